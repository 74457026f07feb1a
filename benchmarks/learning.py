"""Learning on a real benchmark: three credit-assignment rules, one budget, the same seeds.

SmolLM2-135M-Instruct (the packaged model, fp32, on this CPU) is trained on TextWorld
coin-collector games (TextWorld's own generator, levels 1-5, many seeds; their objective
spells the route out, so a small model can learn to follow it) through ap-gym's training
path: group rollouts of the evaluation agent and prompt (``play_groups``: ``run_episodes``
lanes, the ``choose`` agent at a temperature), then a policy gradient over the admissible
commands with one of three rules:

* ``grpo``: trajectory-level group-normalised returns (GRPO);
* ``rebn``: REINFORCE with Return Batch Normalisation over per-turn discounted returns
  (GEM's baseline);
* ``gigpo``: GRPO's trajectory advantage plus step-level groups from anchor states
  (verl-agent's GiGPO; ``status_line=False`` makes equal states equal text).

Same updates, groups, tasks, learning rate and seeds for each. The held-out games are
played before and after by ``ap-gym run`` itself on the saved checkpoints (greedy
``choose``, the no-memory agent), with Wilson intervals. Each update is a line of
``results/learning/<rule>/training.jsonl`` (the log format the viewer reads), the curves
are ``results/learning/curves.png``, and the section goes to RESULTS.md.

    python benchmarks/learning.py [--updates 30] [--rules grpo rebn gigpo] [--model smollm2|tiny] [--fresh]

A killed run continues where it stopped: a rule whose log holds every update under the same
settings and whose checkpoint was saved is not trained again (``--fresh`` retrains it), and
the held-out runs resume like any ``ap-gym run``.

A flat curve is a result: the section says what moved and what did not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.backbones.hf import TransformersBackbone, tiny_llama  # noqa: E402
from ap_gym.envs.textworld import GameSpec, ensure_game  # noqa: E402
from ap_gym.paths import cache_dir  # noqa: E402
from ap_gym.protocol import RunConfig, load_headers, run  # noqa: E402
from ap_gym.report.stats import proportion  # noqa: E402
from ap_gym.training.groups import RULES, chosen_logprob, play_groups, training_choose_agent  # noqa: E402
from ap_gym.trainlog import TrainingLog  # noqa: E402
from benchmarks._bench import emit, machine, positive  # noqa: E402

ENV = "ap_gym/TextWorld-v0"
#: A short history and observation cut keep a decision's prompt near 400 tokens on this CPU.
AGENT = {"history_window": 3, "max_observation_chars": 600}


def suite(train: int, test: int, levels: tuple[int, ...]) -> dict[str, list[str]]:
    """Coin-collector games (generated once, cached), each under a name of its own."""
    folder = cache_dir("learning", "coin")
    out: dict[str, list[str]] = {"train": [], "test": []}
    for split, n, base in (("train", train, 5000), ("test", test, 9000)):
        for i in range(n):
            level = levels[i % len(levels)]
            spec = GameSpec("tw-coin_collector", (("level", level),), base + i, difficulty=level)
            game = ensure_game(spec)
            name = folder / f"coin_l{level}_s{base + i}"
            for ext in (".z8", ".json"):
                target = name.with_suffix(ext)
                if not target.exists():
                    shutil.copyfile(game.with_suffix(ext), target)
            out[split].append(str(name.with_suffix(".z8")))
    return out


def env_kwargs(games: dict[str, list[str]]) -> dict[str, Any]:
    return {"games": games, "status_line": False}


def load(model: str, seed: int) -> TransformersBackbone:
    if model == "tiny":
        m, tokenizer = tiny_llama(seed=seed)
        return TransformersBackbone(m, tokenizer=tokenizer)
    return TransformersBackbone(None if model == "smollm2" else model)


def evaluate(checkpoint: Path | str, games: dict[str, list[str]], out: Path, name: str, max_steps: int) -> tuple[int, int]:
    """Held-out success of a checkpoint, played by ``ap-gym run`` (greedy choose, no memory)."""
    config = RunConfig.from_dict({
        "name": name, "out": str(out), "benchmarks": [ENV], "backbone": str(checkpoint),
        "env_options": {ENV: env_kwargs(games)}, "policies": [{"name": "no_memory", "options": {"agent": AGENT}}],
        "iterations": 1, "train_per_iter": 0, "max_steps": max_steps, "workers": 1, "retries": 1})
    heads = [h for h in load_headers(run(config, progress=False)) if h.phase == "eval"]
    return sum(h.success for h in heads), sum(not h.infrastructure_failure for h in heads)


def won(out: Path, name: str) -> dict[str, bool]:
    """Each held-out game of a finished evaluation and whether it was won (read back from the run)."""
    return {h.task_id: h.success for h in load_headers(out / "eval" / name) if h.phase == "eval"
            and not h.infrastructure_failure}


def by_level(out: Path, rules: list[str]) -> list[str]:
    """Held-out wins per level for each model, and whether the rules won the same games: three
    equal totals could hide different games (or the same ones, which is a finding too)."""
    names = {"untrained": "before", **{rule: f"after-{rule}" for rule in rules}}
    results = {label: won(out, name) for label, name in names.items()}
    levels = sorted({int(t.split("_l")[1].split("_")[0]) for t in results["untrained"]})
    lines = ["| level | held-out games | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for level in levels:
        games = [t for t in results["untrained"] if t.startswith(f"coin_l{level}_")]
        lines.append(f"| {level} | {len(games)} | " + " | ".join(str(sum(results[label].get(t, False) for t in games))
                                                              for label in names) + " |")
    sets = {rule: frozenset(t for t, w in results[rule].items() if w) for rule in rules}
    same = len(set(sets.values())) == 1
    common = frozenset.intersection(*sets.values()) if sets else frozenset()
    lines += ["", ("The rules won the same held-out games" if same else
                   f"The rules won different games: {len(common)} won by every rule; "
                   + ", ".join(f"{r} alone {len(sets[r] - frozenset().union(*(v for k, v in sets.items() if k != r)))}"
                               for r in rules)) + "; every loss ran out of the step limit"
              * all(h.termination.value == "step_limit" for rule in rules
                    for h in load_headers(out / "eval" / f"after-{rule}") if h.phase == "eval" and not h.success) + "."]
    return lines


def train(rule: str, args: argparse.Namespace, games: dict[str, list[str]], out: Path) -> Path:
    """One rule's training; returns its checkpoint (the model and its tokenizer)."""
    import torch

    torch.manual_seed(args.seed)
    backbone = load(args.model, args.seed)
    backbone.model.train()
    trained = trainable(backbone.model, args.train_layers)
    optimizer = torch.optim.Adam(trained, lr=args.lr)
    agent = training_choose_agent(args.temperature, AGENT)
    log = TrainingLog(out / rule / "training.jsonl", run=f"learning/{rule}", rule=rule,
                      config={k: v for k, v in vars(args).items() if not callable(v)})
    rng = np.random.default_rng(args.seed)  # the tasks: the same for every rule
    pick = np.random.default_rng(args.seed + 1)  # which decisions enter an update
    started = time.perf_counter()
    for update in range(1, args.updates + 1):
        t0 = time.perf_counter()
        tasks = [(games["train"][int(rng.integers(len(games["train"])))].rsplit("/", 1)[1].removesuffix(".z8"),
                  int(rng.integers(1 << 30))) for _ in range(args.groups)]
        trajectories = play_groups(backbone, ENV, tasks, args.group_size, agent=agent,
                                   sample_seed=args.seed * 100_003 + update, max_steps=args.max_steps,
                                   lanes=args.lanes, env_kwargs={**env_kwargs(games), "split": "train"})
        advantages = RULES[rule](trajectories) if rule != "rebn" else RULES[rule](trajectories, args.gamma)
        t1 = time.perf_counter()
        terms = [(float(a), d) for t, adv in zip(trajectories, advantages, strict=True)
                 for a, d in zip(adv, t.decisions, strict=True) if abs(a) > 1e-8]
        with_advantage = len(terms)
        if len(terms) > args.decisions:  # a uniform sample: its mean is an unbiased estimate of the mean
            terms = [terms[i] for i in sorted(pick.choice(len(terms), args.decisions, replace=False))]
        optimizer.zero_grad()
        loss, drift = 0.0, []
        for a, decision in terms:
            logp = chosen_logprob(backbone, decision, args.temperature)
            drift.append(float(logp.detach()) - decision.logprob)  # the policy's move since it played
            term = -a * logp / max(len(terms), 1)
            term.backward()
            loss += float(term.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(trained, 1.0)) if terms else 0.0
        if terms:
            optimizer.step()
        log.write(update=update, reward=statistics.fmean(t.ret for t in trajectories) if trajectories else None,
                  success=statistics.fmean(t.episode.success for t in trajectories) if trajectories else None,
                  loss=loss, grad_norm=grad_norm, decisions=sum(len(t.decisions) for t in trajectories),
                  with_advantage=with_advantage, used=len(terms),
                  episodes=len(trajectories), logprob_drift=statistics.fmean(drift) if drift else 0.0,
                  rollout_s=t1 - t0, update_s=time.perf_counter() - t1, wall_s=time.perf_counter() - started)
        print(f"{rule} update {update:3d}: reward {log.last['reward']:.3f} success {log.last['success']:.2f} "
              f"loss {loss:+.4f} ({t1 - t0:.0f} s rollout, {time.perf_counter() - t1:.0f} s update, "
              f"{with_advantage} decisions with an advantage, {len(terms)} used)", flush=True)
    checkpoint = out / rule / "checkpoint"
    backbone.save(checkpoint)
    return checkpoint


#: Arguments that do not change what a rule learns.
NOT_SETTINGS = frozenset({"rules", "out", "figure", "fresh"})


def finished(rule: str, args: argparse.Namespace, out: Path) -> float | None:
    """The training seconds of ``rule`` when an earlier run trained it to the end with these
    settings (its log complete, its checkpoint saved); ``None`` when it must be trained."""
    log = out / rule / "training.jsonl"
    head = TrainingLog.header(log)
    if args.fresh or head is None or not (out / rule / "checkpoint" / "config.json").exists():
        return None
    settings = {k: v for k, v in vars(args).items() if k not in NOT_SETTINGS and not callable(v)}
    if {k: v for k, v in head.get("config", {}).items() if k not in NOT_SETTINGS} != settings:
        return None
    rows = TrainingLog.read(log)
    if [r["update"] for r in rows] != list(range(1, args.updates + 1)):
        return None
    return float(rows[-1]["wall_s"])


def trainable(model: Any, layers: int) -> list[Any]:
    """Train the last ``layers`` transformer blocks and the final norm (0: every weight).

    A gradient through all 30 blocks of SmolLM2 costs ~5 s a decision on this CPU; through
    the last 4, ~2.9 s. The embeddings stay frozen: SmolLM2 ties them to the output layer,
    and a trainable embedding would carry the backward pass through every block."""
    params = list(model.parameters())
    if layers <= 0:
        return params
    for p in params:
        p.requires_grad_(False)
    blocks = model.model.layers
    chosen = [p for block in blocks[len(blocks) - min(layers, len(blocks)):] for p in block.parameters()]
    chosen += list(model.model.norm.parameters())
    for p in chosen:
        p.requires_grad_(True)
    return chosen


def plot(out: Path, rules: list[str], window: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"grpo": "o-", "rebn": "s--", "gigpo": "^:"}
    for rule in rules:
        rows = TrainingLog.read(out / rule / "training.jsonl")
        x = [r["update"] for r in rows]
        for ax, key in zip(axes, ("reward", "success"), strict=True):
            values = np.array([r[key] if r[key] is not None else np.nan for r in rows], dtype=float)
            smooth = np.convolve(np.nan_to_num(values), np.ones(window) / window, mode="valid") if \
                len(values) >= window else values
            ax.plot(x[len(x) - len(smooth):], smooth, styles.get(rule, "-"), label=rule, markersize=3)
    axes[0].set_ylabel(f"training return (moving mean of {window})")
    axes[1].set_ylabel(f"training success (moving mean of {window})")
    for ax in axes:
        ax.set_xlabel("update")
        ax.legend()
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="smollm2 | tiny | a model directory")
    parser.add_argument("--rules", nargs="+", default=["grpo", "rebn", "gigpo"], choices=sorted(RULES))
    parser.add_argument("--updates", type=positive, default=30)
    parser.add_argument("--groups", type=positive, default=2, help="tasks per update")
    parser.add_argument("--group-size", type=positive, default=4)
    parser.add_argument("--lanes", type=positive, default=4)
    parser.add_argument("--max-steps", type=positive, default=8)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--train-layers", type=int, default=4, help="last transformer blocks trained (0: all)")
    parser.add_argument("--decisions", type=positive, default=12,
                        help="decisions with an advantage per update at most (a uniform sample)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.9)
    parser.add_argument("--train-games", type=positive, default=32)
    parser.add_argument("--test-games", type=positive, default=20)
    parser.add_argument("--levels", type=positive, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/learning")
    parser.add_argument("--fresh", action="store_true", help="retrain rules an earlier run finished")
    parser.add_argument("--figure", default="benchmarks/figures/learning_curves.png",
                        help="where the curves are copied for RESULTS.md ('' for none)")
    args = parser.parse_args()
    import torch

    from ap_gym.processes import cpu_budget

    torch.set_num_threads(cpu_budget())  # OMP_NUM_THREADS, else the cores this process may use
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    games = suite(args.train_games, args.test_games, tuple(args.levels))
    print(f"machine: {machine()}\n{len(games['train'])} training games, {len(games['test'])} held-out", flush=True)
    base = out / "base"
    if args.model in ("smollm2", "tiny"):
        load(args.model, args.seed).save(base)
    else:
        base = Path(args.model)
    started = time.perf_counter()
    before = evaluate(base, games, out / "eval", "before", args.max_steps)
    print(f"held-out before: {before[0]}/{before[1]}", flush=True)
    results, seconds, reused = {}, {}, []
    for rule in args.rules:
        done = finished(rule, args, out)
        if done is None:
            checkpoint = train(rule, args, games, out)
            seconds[rule] = float(TrainingLog.read(out / rule / "training.jsonl")[-1]["wall_s"])
        else:
            checkpoint, seconds[rule] = out / rule / "checkpoint", done
            reused.append(rule)
            print(f"{rule}: trained to the end by an earlier run with these settings; its checkpoint is reused "
                  "(--fresh retrains it)", flush=True)
        results[rule] = evaluate(checkpoint, games, out / "eval", f"after-{rule}", args.max_steps)
        print(f"held-out after {rule}: {results[rule][0]}/{results[rule][1]} ({seconds[rule]:.0f} s training)",
              flush=True)
    curves = plot(out, args.rules, window=5)
    if args.figure:  # a copy RESULTS.md can show (results/ is not committed)
        Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(curves, args.figure)
        curves = Path(args.figure)
    emit("learning", "`learning.py`: learning on TextWorld, three credit-assignment rules",
         section(args, games, before, results, seconds, time.perf_counter() - started, curves, reused))


def section(args: argparse.Namespace, games: dict[str, list[str]], before: tuple[int, int],
            results: dict[str, tuple[int, int]], seconds: dict[str, float], total_s: float, curves: Path,
            reused: list[str]) -> str:
    from ap_gym.report.stats import difference

    layers = "every weight" if args.train_layers <= 0 else \
        f"the last {args.train_layers} transformer blocks and the final norm (embeddings frozen)"
    model = {"smollm2": "SmolLM2-135M-Instruct (the packaged model, fp32)", "tiny": "A tiny random Llama"}.get(
        args.model, args.model)
    lines = [f"{model} trained on {len(games['train'])} TextWorld coin-collector games (levels "
             f"{', '.join(map(str, args.levels))}; TextWorld's objective spells out the route), evaluated on "
             f"{len(games['test'])} held-out ones by `ap-gym run` on the saved checkpoints (greedy `choose`, no "
             f"memory, at most {args.max_steps} steps). Each rule: {args.updates} updates of {args.groups} tasks x "
             f"{args.group_size} attempts (the choose agent at T = {args.temperature}, the evaluation prompt and "
             f"stepper), a policy gradient over the admissible commands through {layers}, at most "
             f"{args.decisions} decisions with an advantage per update (a uniform sample), Adam lr {args.lr}, seed "
             f"{args.seed}; gamma {args.gamma} for ReBN and GiGPO's step groups. The same tasks and seeds for every "
             "rule. Held-out success with 95 % Wilson intervals; the difference to the untrained model with "
             "Newcombe's.", "",
             "| model | held-out success | minus before | training time |", "|---|---|---|---|",
             f"| untrained | {proportion(*before)} | - | - |"]
    for rule, (k, n) in results.items():
        lines.append(f"| {rule} | {proportion(k, n)} | {difference(k, n, *before)} | {seconds[rule] / 60:.0f} min |")
    lines += ["", "Held-out wins per level:", "", *by_level(Path(args.out), list(results))]
    shown = os.path.relpath(curves.resolve(), Path(__file__).resolve().parent)  # from RESULTS.md's folder
    lines += ["", f"![learning curves]({shown})", "",
              f"Training curves (moving mean over 5 updates): `{curves}`; per-update logs: "
              f"`{args.out}/<rule>/training.jsonl`. Training time is the rule's updates (rollouts and gradient "
              f"steps), not its held-out evaluation. This invocation: {total_s / 60:.0f} min"
              + (f"; {', '.join(reused)} trained by an earlier invocation with the same settings (checkpoint "
                 "reused, held-out run resumed)." if reused else "."), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
