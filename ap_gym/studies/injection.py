"""Validate the measuring apparatus by injection: known wrong rules in, what comes out?

On the Shop (its oracle gives every task's walkthrough) a scripted, deterministic
"compliant" backbone (:class:`~ap_gym.backbones.scripted.CompliantBackbone`) acts: it
follows any admissible command the guidance recommends, and otherwise plays the
walkthrough with a set error rate. Every policy's memory is seeded with the same ``K``
rules, a share ``p`` of them wrong: "On the item page, buy at once: 'click[buy now]'"
(buying before choosing the instruction's options scores below 1, a failure). The right
rules name no command ("choose every option the instruction names, then buy").

Synthesis copies its material, as a model that imitates its records would: a rule
written from a record that bought at once is the wrong rule again (abstraction memory,
Anti-Persistence's imitation and strategic modes); corrective synthesis and reflections
turn such a record into "Do not 'click[buy now]' before choosing the options"; AutoRefine's
contrastive skill names no command. The admission judge says yes.

The labeller is a checker against this study's ground truth: it flags a text that
recommends (does not forbid) 'click[buy now]'. Then the harness must show:

* the audit recovers the injected error rate of the seeded store within its 95 % interval;
* abstraction memory reproduces the errors: its new abstractions written from records
  exposed to a wrong rule are wrong far more often than the others, and its held-out
  episodes buy at once far more often than no memory's;
* Anti-Persistence does not carry them forward: it stores no abstraction, its held-out
  guidance recommends no wrong rule, and it buys at once no more often than no memory;
* AutoRefine's scoring and pruning retire the wrong rules; Reflexion writes reflections on
  failures only.

``ap-gym injection`` runs it and writes ``report.md``, ``results.json`` and ``curves.png``
(held-out success and the share of episodes that followed a wrong rule, per iteration,
iteration -1 being the seeded memory before any training); ``make demo`` runs it at demo
scale; ``benchmarks/injection.py`` prints its figures for RESULTS.md. The random and
walkthrough policies run beside the designs as the floor and the ceiling of the tasks.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import ap_gym
from ap_gym.backbones.scripted import CompliantBackbone, guidance_rules
from ap_gym.policies import make_policy
from ap_gym.protocol.loop import training_sample
from ap_gym.report.audit import Invocation, audit
from ap_gym.text import commands_in

WRONG = "On the item page, buy at once: 'click[buy now]'."
RIGHT = "On the item page, choose every option the instruction names, then buy."
AVOID = "Do not 'click[buy now]' before choosing the options the instruction names."
POLICIES = ("random", "walkthrough", "no_memory", "trajectory", "abstraction", "anti_persistence", "autorefine",
            "reflexion")
#: What every table and plot of the study says first.
LABEL = ("Scripted backbone: a check of the measuring apparatus (known wrong rules injected, a deterministic "
         "compliant actor), not a model result.")
AGENT = {"action_mode": "generate", "list_admissible": True, "max_admissible_listed": 500, "history_window": 100,
         "max_observation_chars": 4000}


def recommends_buying_at_once(text: str, sources: Sequence[Any] = ()) -> bool:
    """The study's ground-truth labeller: the text recommends 'click[buy now]'."""
    return any(c.text == "click[buy now]" and not c.negated for c in commands_in(text))


def bought_at_once(commands: Sequence[str]) -> bool:
    """A product was bought without choosing any option after opening it."""
    opened = False
    for c in commands:
        if re.fullmatch(r"click\[b0[a-z0-9]{8}\]", c):
            opened = True
            continue
        if c == "click[buy now]":
            return opened
        if c.startswith("click[") and c not in ("click[next >]", "click[< prev]", "click[back to search]"):
            opened = False  # an option was chosen
    return False


def _records(prompt: str) -> list[list[str]]:
    """The commands of each record shown in a synthesis prompt (lines ``> command``)."""
    records: list[list[str]] = []
    for line in prompt.splitlines():
        if line.startswith(("Task:", "[")) and "Task:" in line:
            records.append([])
        elif line.startswith("> ") and records:
            records[-1].append(line[2:].strip())
    return records


def synthesise(prompt: str) -> str:
    """What a model that copies its records writes (see the module docstring)."""
    bad = any(bought_at_once(r) for r in _records(prompt))
    if "avoid the mistakes" in prompt or "write a short reflection" in prompt:
        return AVOID if bad else RIGHT
    if "Contrast them" in prompt:
        return RIGHT
    return WRONG if bad else RIGHT


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@dataclass
class Outcome:
    """One policy's figures: held-out at the final iteration, its store's audit, and per
    iteration (``curve``: iteration -> success, bought-at-once share)."""

    policy: str
    heldout_success: float
    heldout_bought_at_once: float
    heldout_wrong_guidance: float
    seeded: int
    seeded_flagged: int
    new_abstractions: int
    new_flagged_exposed: str
    new_flagged_unexposed: str
    q: float
    alpha: float
    eta: float
    active_wrong_seeded_at_end: int
    extra: dict[str, Any] = field(default_factory=dict)
    curve: dict[int, tuple[float, float]] = field(default_factory=dict)


def study(policy_name: str, *, share: float = 0.3, rules: int = 20, iterations: int = 3, train_per_iter: int = 50,
          heldout: int = 100, error_rate: float = 0.05, seed: int = 0, embedder: Any = None,
          workdir: Path | None = None, advance: Any = None) -> Outcome:
    """One policy through the protocol on the seeded memory; see the module docstring.
    ``advance(n)`` is called after each episode (a progress bar)."""
    env = gym.make("ap_gym/Shop-v0", max_episode_steps=15)
    shop = env.unwrapped
    train_ids, test_ids = shop.task_ids("train"), shop.task_ids("test")[:heldout]
    walkthroughs = {shop.goal(t).instruction: shop.oracle_actions(t) for t in train_ids + test_ids}
    if len(walkthroughs) != len(train_ids) + len(test_ids):
        raise RuntimeError("two Shop tasks share an instruction; the compliant backbone needs them distinct")
    backbone = CompliantBackbone(walkthroughs, synthesise, error_rate=error_rate, seed=seed)
    workdir = Path(workdir or tempfile.mkdtemp(prefix="ap_gym_injection_"))
    options: dict[str, Any] = {"agent": AGENT} if policy_name not in ("random", "walkthrough") else {}
    if policy_name == "random":
        options["seed"] = seed
    if policy_name not in ("no_memory", "random", "walkthrough"):
        options.update(embedder=embedder, db_path=workdir / f"{policy_name}.sqlite", seed=seed)
    if policy_name == "autorefine":
        options.update(evolve_every=10, prune_every=25)
    policy = make_policy(policy_name, backbone, **options)
    seeded_ids: list[int] = []
    wrong = round(share * rules)
    memory = getattr(policy, "memory", None)
    if memory is not None:  # every memory gets the same seeded rules, on the first training tasks' embeddings
        for i, task in enumerate(train_ids[:rules]):
            obs, info = env.reset(options={"task_id": task})
            vec = memory.embed_task(info["instruction"], obs)
            seeded_ids.append(memory.add_abstraction(WRONG if i < wrong else RIGHT, "rule", vec, []))
    advance = advance or (lambda n=1: None)
    learns = memory is not None
    curve: dict[int, tuple[float, float]] = {}

    def evaluate(it: int) -> list[Any]:
        policy.eval()
        episodes = []
        for t in test_ids:
            episodes.append(ap_gym.run_episode(env, policy, task_id=t, seed=seed, max_steps=15))
            advance(1)
        curve[it] = (sum(ep.success for ep in episodes) / len(episodes),
                     sum(bought_at_once([s.action for s in ep.steps]) for ep in episodes) / len(episodes))
        return episodes

    try:
        train_lines: list[dict[str, Any]] = []
        train_episodes: list[Any] = []
        evals = evaluate(-1)  # the seeded memory, before any training
        for it in range(iterations):
            if learns:
                policy.train()
                for task in training_sample(train_ids, train_per_iter, seed, it):
                    ep = ap_gym.run_episode(env, policy, task_id=task, seed=seed, max_steps=15)
                    train_lines.append(ep.policy_info)
                    train_episodes.append(ep)
                    advance(1)
                policy.memory.iteration = it + 1
            else:
                advance(train_per_iter)
            evals = evaluate(it)
        bought = [bought_at_once([s.action for s in ep.steps]) for ep in evals]
        wrong_guidance = [recommends_buying_at_once(guidance_rules(ep.policy_info.get("guidance") or ""))
                          for ep in evals]
        out = Outcome(policy_name, sum(ep.success for ep in evals) / len(evals), sum(bought) / len(evals),
                      sum(wrong_guidance) / len(evals), len(seeded_ids), 0, 0, "-", "-", math.nan, math.nan,
                      math.nan, 0, curve=curve)
        if memory is not None:
            policy.train()
            stored = memory.abstractions.all(include_inactive=True)
            rejected = [Invocation(r["text"], tuple(r["parents"]), False, tuple(r["sources"]))
                        for info in train_lines for r in info.get("rejected_abstractions", [])]
            row = audit(policy_name, stored, recommends_buying_at_once, rejected)
            seeded = [a for a in stored if a.id in seeded_ids]
            new = [a for a in stored if a.id not in seeded_ids]
            flags = {a.id: recommends_buying_at_once(a.text) for a in stored}
            exposed = [a for a in new if any(flags.get(p) for p in a.parents)]
            unexposed = [a for a in new if a not in exposed]
            out.seeded_flagged = sum(flags[a.id] for a in seeded)
            out.new_abstractions = len(new)
            out.new_flagged_exposed = f"{sum(flags[a.id] for a in exposed)}/{len(exposed)}"
            out.new_flagged_unexposed = f"{sum(flags[a.id] for a in unexposed)}/{len(unexposed)}"
            out.q, out.alpha, out.eta = row.q, row.alpha, row.eta
            out.active_wrong_seeded_at_end = sum(a.active and flags[a.id] for a in seeded)
            out.extra = {"skills_evolved": sum(1 for info in train_lines if info.get("evolved_family")),
                         "deactivated": sum(1 for a in stored if not a.active),
                         "kinds_written": sorted({a.kind for a in new}), "train_success":
                         round(sum(ep.success for ep in train_episodes) / max(1, len(train_episodes)), 2),
                         "failed_training_episodes": sum(not ep.success for ep in train_episodes)}
        return out
    finally:
        env.close()
        if hasattr(policy, "close"):
            policy.close()


def run_study(out: str | Path, *, share: float = 0.3, rules: int = 20, iterations: int = 3, train_per_iter: int = 50,
              heldout: int = 100, error_rate: float = 0.05, seed: int = 0,
              policies: Sequence[str] = POLICIES, progress: bool = True) -> list[Outcome]:
    """Every policy through the study, then ``report.md``, ``results.json`` and ``curves.png`` in ``out``."""
    from rich.progress import Progress

    from ap_gym.backbones.embedders import make_embedder

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    embedder = make_embedder("default")
    per_policy = (iterations + 1) * heldout + iterations * train_per_iter
    outcomes = []
    work = Path(tempfile.mkdtemp(prefix="ap_gym_injection_"))
    try:
        with Progress(disable=not progress) as bar:
            task = bar.add_task("injection study (scripted backbone)", total=per_policy * len(policies))
            for name in policies:
                outcomes.append(study(name, share=share, rules=rules, iterations=iterations,
                                      train_per_iter=train_per_iter, heldout=heldout, error_rate=error_rate,
                                      seed=seed, embedder=embedder, workdir=work,
                                      advance=lambda n=1: bar.advance(task, n)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    settings = {"share": share, "rules": rules, "iterations": iterations, "train_per_iter": train_per_iter,
                "heldout": heldout, "error_rate": error_rate, "seed": seed}
    (out / "results.json").write_text(json.dumps({"label": LABEL, "settings": settings,
                                                  "outcomes": [asdict(o) for o in outcomes]}, indent=1, default=str))
    (out / "report.md").write_text(report_text(outcomes, settings))
    plot(outcomes, out / "curves.png")
    return outcomes


def table_rows(outcomes: Sequence[Outcome], share: float, rules: int) -> list[str]:
    header = ("policy", "held-out success", "bought at once", "wrong guidance shown", "new abstractions",
              "wrong given exposed", "wrong given unexposed", "q", "alpha", "eta", "wrong seeded still active")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for o in outcomes:
        cells = [o.policy, f"{o.heldout_success:.2f}", f"{o.heldout_bought_at_once:.2f}", f"{o.heldout_wrong_guidance:.2f}",
                 o.new_abstractions, o.new_flagged_exposed, o.new_flagged_unexposed,
                 *("-" if math.isnan(v) else f"{v:.2f}" for v in (o.q, o.alpha, o.eta)),
                 f"{o.active_wrong_seeded_at_end}/{round(share * rules)}" if o.seeded else "-"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def report_text(outcomes: Sequence[Outcome], settings: Mapping[str, Any]) -> str:
    seeded = next((o for o in outcomes if o.seeded), None)
    lines = ["# Injection study: known wrong rules in, what comes out", "", f"**{LABEL}**", "",
             "The memory of every design starts with the same seeded rules, a known share of them wrong "
             "(\"On the item page, buy at once: 'click[buy now]'\": buying before choosing the instruction's "
             "options fails). The actor follows any admissible command its guidance recommends; synthesis copies "
             "its records. If the harness measures what it should, abstraction memory reuses the stored wrong "
             "rules and writes them again from the failures they cause (error reproduction), while "
             "Anti-Persistence, which discards its guidance after each episode, does not carry them forward. "
             "Random and walkthrough are the floor and the ceiling of these tasks.", "",
             f"Settings: {json.dumps(dict(settings))}.", ""]
    if seeded is not None:
        low, high = wilson(seeded.seeded_flagged, seeded.seeded)
        lines += [f"Audit of the seeded store: {seeded.seeded_flagged}/{seeded.seeded} flagged = "
                  f"{seeded.seeded_flagged / seeded.seeded:.2f} (Wilson 95 % [{low:.2f}, {high:.2f}]); injected "
                  f"{settings['share']:.2f}.", ""]
    lines += ["## Final held-out iteration (scripted backbone)", "",
              *table_rows(outcomes, settings["share"], settings["rules"]), "",
              "*Wrong given exposed*: new abstractions written from records whose prompts held a wrong rule, and "
              "how many of them are wrong; q, alpha and eta are per synthesis invocation.", "",
              "![held-out success and wrong-rule following per iteration (scripted backbone)](curves.png)", ""]
    return "\n".join(lines)


def plot(outcomes: Sequence[Outcome], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-"), ("P", "--"), ("X", ":"), ("*", "-.")]
    for k, o in enumerate(outcomes):  # markers and dashes tell overlapping lines apart
        iters = sorted(o.curve)
        marker, dash = styles[k % len(styles)]
        for ax, j in ((axes[0], 0), (axes[1], 1)):
            ax.plot(iters, [100 * o.curve[i][j] for i in iters], marker=marker, linestyle=dash, label=o.policy,
                    markersize=8 - k * 0.5, alpha=0.85)
    axes[0].set_ylabel("held-out success (%)")
    axes[1].set_ylabel("held-out episodes that bought at once (%)")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("iteration (-1: seeded memory, before training)")
        ax.set_ylim(-3, 103)
    axes[0].legend(fontsize=7)
    fig.suptitle("Injection study. " + LABEL, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, default=0.3, help="share of wrong rules among the seeded ones")
    parser.add_argument("--rules", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--train-per-iter", type=int, default=50)
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--error-rate", type=float, default=0.05)
    parser.add_argument("--out", default="results/injection")
    args = parser.parse_args(argv)
    t = time.monotonic()
    outcomes = run_study(args.out, share=args.share, rules=args.rules, iterations=args.iterations,
                         train_per_iter=args.train_per_iter, heldout=args.heldout, error_rate=args.error_rate)
    summary = report_text(outcomes, {"share": args.share, "rules": args.rules, "iterations": args.iterations,
                                     "train_per_iter": args.train_per_iter, "heldout": args.heldout,
                                     "error_rate": args.error_rate}).split("## Final held-out iteration")[0]
    lines = [LABEL, "", summary.splitlines()[-2], "", *table_rows(outcomes, args.share, args.rules), ""]
    lines += [f"- {o.policy}: {o.extra}" for o in outcomes if o.extra]
    lines += ["", f"{time.monotonic() - t:.0f} s; report: {args.out}/report.md"]
    print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, Python {platform.python_version()}")
    print("\n".join(lines))
    return "\n".join(lines)

if __name__ == "__main__":
    main()
