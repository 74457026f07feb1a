"""Known errors in, what comes out: the error-reproduction apparatus checked by injection.

On the Shop, a scripted actor (:class:`~ap_gym.backbones.scripted.ScriptedActor`) plays
through the protocol's own loop (:mod:`ap_gym.protocol.loop`). Every design starts from a
memory seeded where *it* reads: records for trajectory memory and Anti-Persistence (both
variants), rules for abstraction memory and AutoRefine, both for joint memory,
reflections for Reflexion; a known share of them wrong. The wrong behaviour is buying at
once, before choosing the instruction's options, and it is **conditionally** wrong: in the
``optionless`` families (grocery and kitchen here, whose instructions name no option) it
wins, elsewhere it fails. So wrong guidance can sit in *successful* records, where
imitation and strategic synthesis read, and the paper's indirect path (guidance ->
trajectory -> later synthesis) is open to every design, Anti-Persistence included.

The actor follows its guidance with probability ``compliance`` (a rule's recommended
command, or what a shown successful record did next); synthesis copies an error it sees in
its material with probability ``copying`` and writes one unprompted with probability
``base_error``. The labeller is this study's ground truth (a text that recommends, not
forbids, ``click[buy now]``), so the audit's estimates here measure the mechanism, not the
labeller.

The headline is the paper's own contrast (Table 2): Anti-Persistence discarding its
guidance against the same design persisting it, everything else equal; then every design
with the injection where it reads; no memory, random and walkthrough for scale.
:func:`randomised_exposure` adds a causal estimate: synthesis calls whose prompt gets a
flagged record, or not, at random.

``ap-gym injection`` runs it (``results/injection/report.md``), ``make demo`` at demo
scale, ``benchmarks/injection.py`` at full size. The tables are in
:mod:`ap_gym.report.injection`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from pydantic import Field

from ap_gym.backbones.scripted import ScriptedActor, shown_records
from ap_gym.envs.shop import ShopEnv
from ap_gym.options import Options
from ap_gym.protocol import RunConfig
from ap_gym.protocol.loop import Runner
from ap_gym.protocol.setting import build_policy
from ap_gym.report.stats import Estimate, allows, difference, proportion
from ap_gym.report.tables import Table
from ap_gym.text import commands_in

__all__ = ["ARMS", "AVOID", "LABEL", "RIGHT", "WRONG", "Injection", "Study", "bought_at_once",
           "difference_of_differences", "dose_response", "randomised_exposure", "recommends_buying_at_once",
           "synthesiser"]

WRONG = "On the item page, buy at once: 'click[buy now]'."
RIGHT = "On the item page, choose every option the instruction names, then buy."
AVOID = "Do not 'click[buy now]' before choosing the options the instruction names."
LABEL = ("Scripted actor: a check of the measuring apparatus (known errors planted where each design reads, an "
         "actor and a synthesiser with known parameters), not a model result.")
#: label -> (policy, options, where the injection goes: records, rules, reflections; None: nothing)
ARMS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "anti_persistence": ("anti_persistence", {}, ("records",)),
    "ap_persist": ("anti_persistence", {"persist_guidance": True}, ("records",)),
    "trajectory": ("trajectory", {}, ("records",)),
    "abstraction": ("abstraction", {}, ("rules",)),
    "joint": ("joint", {}, ("rules", "records")),
    "reflexion": ("reflexion", {}, ("reflections",)),
    "autorefine": ("autorefine", {"evolve_every": 10, "prune_every": 25}, ("rules",)),
    "no_memory": ("no_memory", {}, ()),
    "random": ("random", {}, ()),
    "walkthrough": ("walkthrough", {}, ()),
}
AGENT = {"action_mode": "generate", "list_admissible": True, "max_admissible_listed": 500, "history_window": 100,
         "max_observation_chars": 4000}



def _shop(env: gym.Env[Any, Any]) -> ShopEnv:
    """The Shop under ``env``'s wrappers (the study's goals and oracle plans are its own)."""
    inner = env.unwrapped
    if not isinstance(inner, ShopEnv):
        raise TypeError(f"the injection study plays the Shop, not {type(inner).__name__}")
    return inner

class Injection(Options):
    """The study's parameters (see the module docstring)."""

    share: float = Field(default=0.3, ge=0, le=1)
    seeded: int = Field(default=20, ge=1)
    compliance: float = Field(default=0.8, ge=0, le=1)
    copying: float = Field(default=0.9, ge=0, le=1)
    base_error: float = Field(default=0.02, ge=0, le=1)
    error_rate: float = Field(default=0.05, ge=0, le=1)
    iterations: int = Field(default=3, ge=1)
    train_per_iter: int = Field(default=50, ge=1)
    heldout: int = Field(default=100, ge=1)
    seed: int = 0
    max_steps: int = Field(default=15, ge=4)
    optionless: tuple[str, ...] = ("grocery", "kitchen")
    arms: tuple[str, ...] = tuple(ARMS)
    #: the dose-response: discard against persist at each of these shares, each an
    #: independent run of the two arms (its own seed); a second 0 % run is the placebo
    dose_shares: tuple[float, ...] = (0.0, 0.0)
    #: independent runs per share of the dose-response, their final held-out episodes pooled:
    #: more make the dose effect's interval narrow enough to exclude a real effect
    dose_seeds: int = Field(default=1, ge=1)


def recommends_buying_at_once(text: str, sources: Sequence[Any] = ()) -> bool:
    """The study's ground-truth labeller: the text recommends (does not forbid) ``click[buy now]``."""
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


def synthesiser(copying: float, base_error: float) -> Callable[[str, Any], str]:
    """A synthesiser that copies its material: an error it sees, with probability ``copying``;
    one of its own, with probability ``base_error``. Corrective synthesis and reflections
    turn an error they see into a rule against it; AutoRefine's contrastive skill names no
    command."""

    def synthesise(prompt: str, rng: Any) -> str:
        records = shown_records(prompt)
        against = "avoid the mistakes" in prompt or "write a short reflection" in prompt
        read = records if "Successful attempts" not in prompt else [r for r in records if r[0]]
        seen = any(bought_at_once(commands) for _, commands in read)
        if "Contrast them" in prompt:
            text = RIGHT
        elif against:
            text = AVOID if seen and rng.random() < copying else RIGHT
        else:
            text = WRONG if seen and rng.random() < copying else RIGHT
        return WRONG if rng.random() < base_error else text

    return synthesise


class Study:
    """One run of the study (every arm, one seed) through the protocol; see the module docstring.

    Args:
        config: the parameters.
        out: where the run's results and the report go.
    """

    def __init__(self, config: Injection, out: str | Path) -> None:
        self.config = config
        self.out = Path(out)
        self.env = gym.make("ap_gym/Shop-v0", optionless=config.optionless, max_episode_steps=config.max_steps)
        shop = _shop(self.env)
        self.train_ids, self.test_ids = shop.task_ids("train"), shop.task_ids("test")
        walkthroughs = {shop.goal(t).instruction: shop.oracle_actions(t) for t in self.train_ids + self.test_ids}
        self.actor = ScriptedActor(walkthroughs, synthesiser(config.copying, config.base_error),
                                   compliance=config.compliance, error_rate=config.error_rate, seed=config.seed)

    def run_config(self, seeded: dict[str, Path]) -> RunConfig:
        c = self.config
        policies = []
        for label in c.arms:
            name, options, _ = ARMS[label]
            opts = {**({"agent": AGENT} if name not in ("random", "walkthrough") else {}), **options}
            policies.append({"name": name, "label": label, "options": opts,
                             "initial_state": str(seeded[label]) if label in seeded else None})
        return RunConfig.from_dict({
            "name": "injection", "out": str(self.out), "benchmarks": ["shop"], "backbone": "scripted",
            "env_options": {"shop": {"optionless": list(c.optionless)}}, "policies": policies, "seeds": [c.seed],
            "iterations": c.iterations, "train_per_iter": c.train_per_iter, "heldout": c.heldout,
            "max_steps": c.max_steps, "eval_before_training": True, "workers": 1, "retries": 0,
            "description": f"**{LABEL}**"})

    def run(self, progress: bool = False) -> Path:
        """Seed every arm's memory, then run them all through the protocol; the run directory.
        The study's env stays open (the exposure check plays records with it): :meth:`close`."""
        from ap_gym.report.audit import record_labeller

        seeded = {label: self.out / "seeded" / label for label in self.config.arms if ARMS[label][2]}
        config = self.run_config(seeded)
        runner = Runner(config)
        runner.resources.provide("scripted", self.actor)
        # the study's ground truth is the run's audit labeller: its report, ap-gym report and ap-gym
        # view audit the run alike (named before the run writes its view index)
        config.run_dir.mkdir(parents=True, exist_ok=True)
        record_labeller(config.run_dir, recommends_buying_at_once)
        for label, snapshot in seeded.items():
            if not (snapshot / "state.json").exists():  # kept: a resumed study starts from the same memory
                self.seed_memory(runner, label, snapshot)
        return runner.run(progress=progress)

    def close(self) -> None:
        self.env.close()

    def seed_memory(self, runner: Runner, label: str, snapshot: Path) -> None:
        """The arm's starting memory, saved as the snapshot its policy starts from."""
        work = Path(tempfile.mkdtemp(prefix="ap_gym_injection_"))
        policy = build_policy(runner.config.policy(label), runner.config, work / "memory.sqlite",
                              self.config.seed, runner.resources, benchmark="shop")
        try:
            policy.train()
            memory, wrong = policy.memory, round(self.config.share * self.config.seeded)
            for i, task in enumerate(self.train_ids[: self.config.seeded]):
                record, vec = self.record(memory, task, at_once=i < wrong)
                for place in ARMS[label][2]:
                    if place == "records":
                        memory.trajectories.add(**record, embedding=vec, iteration=0)
                    else:
                        kind = "rule" if place == "rules" else "reflection"
                        memory.add_abstraction(WRONG if i < wrong else RIGHT, kind, vec, [])
            policy.save_state(snapshot)
        finally:
            policy.close()
            shutil.rmtree(work, ignore_errors=True)

    def record(self, memory: Any, task: str, at_once: bool) -> tuple[dict[str, Any], Any]:
        """A played record of ``task``: the oracle's, or buying at once; with its embedding."""
        shop = _shop(self.env)
        plan = shop.oracle_actions(task)
        if at_once:
            plan = [a for a in plan if a.startswith(("search[", "click[next", "click[b0")) or a == "click[buy now]"]
        obs, info = self.env.reset(options={"task_id": task})
        vec = memory.embed_task(info["instruction"], obs)
        steps, won = [], False
        for action in plan:
            obs, reward, terminated, _, info = self.env.step(action)
            steps.append({"action": action, "observation": obs, "reward": reward})
            won = bool(info.get("won"))
            if terminated:
                break
        return {"task_id": task, "family": info["task_family"], "instruction": info["instruction"], "steps": steps,
                "success": won, "score": info.get("score")}, vec


def randomised_exposure(synthesise: Callable[[list[dict[str, str]]], str], records: Sequence[str],
                        flagged: Sequence[str], n: int, seed: int = 0) -> dict[str, Any]:
    """A causal estimate of copying (the paper's §F.1, at synthesis): ``n`` synthesis calls,
    each from a clean record, with a flagged record added to the prompt or not by a coin.

    Args:
        synthesise: one synthesis call on messages (a backbone's ``generate``, text out).
        records: formatted clean records (the material).
        flagged: formatted records that carry the error (successful ones that bought at once).

    Returns:
        the flagged-output counts of each arm and their difference with its 95 % interval.
    """
    from ap_gym.prompts import load_prompt
    from ap_gym.seeding import derived_rng

    counts = {True: [0, 0], False: [0, 0]}
    for i in range(n):
        rng = derived_rng("exposure", seed, i)
        exposed = rng.random() < 0.5
        material = [rng.choice(list(records)), rng.choice(list(flagged if exposed else records))]
        prompt = load_prompt("synth_imitation").format(instruction="a shopping task", records="\n\n".join(
            f"[{k + 1}] {r}" for k, r in enumerate(material)))
        text = synthesise([{"role": "user", "content": prompt}])
        counts[exposed][0] += recommends_buying_at_once(text)
        counts[exposed][1] += 1
    effect: Estimate = difference(counts[True][0], counts[True][1], counts[False][0], counts[False][1])
    return {"exposed": tuple(counts[True]), "control": tuple(counts[False]), "effect": effect}


def dose_response(out: str | Path, config: Injection, progress: bool = False) -> list[dict[str, Any]]:
    """Discard against persist at each share of ``config.dose_shares`` and at ``config.share``,
    each ``config.dose_seeds`` independent runs of the two arms (their final held-out episodes
    pooled), and each contrast minus the first 0 % share's: the part of the contrast the
    injection causes. A second 0 % share is a placebo: its dose effect's interval should hold 0."""
    from ap_gym.protocol.results import load_headers

    shares = [*config.dose_shares, config.share]
    out_rows: list[dict[str, Any]] = []
    for k, share in enumerate(shares):
        final: dict[str, list[bool]] = {}
        seeds = []
        for j in range(config.dose_seeds):  # seed config.seed + 1 + k for the first (as before: it resumes)
            seed = config.seed + 1 + k + j * len(shares)
            arm_config = config.model_copy(update={"share": share, "seed": seed, "dose_seeds": 1,
                                                   "arms": ("anti_persistence", "ap_persist"), "dose_shares": ()})
            arm = Study(arm_config, Path(out) / (f"dose{k}_share{share:g}" + (f"_run{j}" if j else "")))
            try:
                run_dir = arm.run(progress=progress)
            finally:
                arm.close()
            seeds.append(seed)
            heads = [h for h in load_headers(run_dir) if h.phase == "eval"]
            last = max((h.iteration for h in heads), default=0)
            for h in heads:
                if h.iteration == last and not h.infrastructure_failure:
                    final.setdefault(h.policy, []).append(h.success)
        a, b = final.get("anti_persistence", []), final.get("ap_persist", [])
        out_rows.append({"share": share, "seed": seeds[0], "seeds": seeds, "discard": (sum(a), len(a)),
                         "persist": (sum(b), len(b)), "contrast": difference(sum(a), len(a), sum(b), len(b))})
    base = next((r for r in out_rows if r["share"] == 0.0), None)
    for r in out_rows:
        r["dose"] = None if base is None or r is base else difference_of_differences(r["contrast"], base["contrast"])
    return out_rows


def difference_of_differences(d1: Estimate, d0: Estimate) -> Estimate:
    """``d1 - d0`` for two independent differences of proportions, with the MOVER interval
    (each side's own Newcombe bounds combined, as Newcombe combines two Wilson intervals).
    Its range is [-2, 2]: a difference of two differences of rates."""
    if not (d1.estimable and d0.estimable):
        return Estimate(float("nan"), float("nan"), float("nan"))
    d = d1.value - d0.value
    low = d - ((d1.value - d1.low) ** 2 + (d0.high - d0.value) ** 2) ** 0.5
    high = d + ((d1.high - d1.value) ** 2 + (d0.value - d0.low) ** 2) ** 0.5
    return Estimate(d, max(-2.0, low), min(2.0, high))


def run_study(out: str | Path, config: Injection | None = None, *, exposure_calls: int = 200,
              progress: bool = True, backbone: Any = None) -> dict[str, Any]:
    """The study: every arm through the protocol, the randomised-exposure check of the
    synthesiser, and ``out/report.md`` with its tables. Returns the figures."""
    from ap_gym.policies.records import format_record
    from ap_gym.report.injection import injection_tables, write_injection_report

    config = config or Injection()
    study = Study(config, Path(out) / "run")
    try:
        run_dir = study.run(progress=progress)
        tables = injection_tables(run_dir, recommends_buying_at_once, bought_at_once,
                                  {label: ARMS[label][2] for label in config.arms})
        exposure = exposure_check(study, config, exposure_calls, format_record, backbone)
    finally:
        study.close()
    dose = dose_response(Path(out) / "dose", config, progress=progress)
    # the dose effect leads; then its contrasts per share, then the full run's tables
    tables = [dose_headline(dose), dose_table(dose), *tables]
    actor = study.actor
    compliance = actor.followed / actor.offered if actor.offered else float("nan")
    truth = config.copying * (1 - config.base_error)
    head = [f"**{LABEL}**", "", f"Parameters: {config.to_dict()}.", "",
            f"Realised compliance: the actor took {actor.followed} of the {actor.offered} commands its guidance "
            f"offered ({compliance:.2f}; set {config.compliance}).",
            f"Randomised exposure at synthesis ({exposure_calls} calls, a flagged record added to the prompt by a "
            f"coin): flagged outputs {exposure['exposed'][0]}/{exposure['exposed'][1]} exposed, "
            f"{exposure['control'][0]}/{exposure['control'][1]} not; causal effect {exposure['effect']} "
            + (f"(truth copying x (1 - base error) = {truth:.2f})." if backbone is None else
               f"(synthesis by {getattr(backbone, 'identity', backbone)}: a real model's copying, no planted truth).")]
    write_injection_report(run_dir, out, tables, head, bought_at_once)
    return {"run": run_dir, "report": Path(out) / "report.md", "tables": tables, "exposure": exposure,
            "compliance": compliance, "dose": dose}


def dose_headline(rows: list[dict[str, Any]]) -> Table:
    """The study's first table: what injecting adds over the 0 % run (and the placebo's check),
    each with its interval and a sentence on what the interval allows (issue 50)."""
    body = []
    seen_zero = False
    for r in rows:
        if r["dose"] is None:
            seen_zero = True
            continue
        placebo = r["share"] == 0.0 and seen_zero
        name = "placebo: a second 0 % run" if placebo else f"{100 * r['share']:g} % injected"
        runs = len(r.get("seeds", [r["seed"]]))
        effect = "difference from the 0 % run" if placebo else "effect of injecting"
        body.append([name, f"{runs} run{'s' * (runs > 1)}, {r['discard'][1]} + {r['persist'][1]} episodes",
                     str(r["dose"]), allows(r["dose"], effect)])
    return Table("injection_dose_effect", "What injecting adds (the dose effect): discard minus persist, minus the "
                 "same contrast at 0 %", ["injected", "runs, held-out episodes (discard + persist)",
                                           "dose effect [95 %]", "what the interval allows"], body,
                 "The headline. Injection is the only thing that differs between a share's runs and the 0 % run, "
                 "so this is the part of discard's lead over persist that the planted errors cause; the contrast "
                 "at 0 % (the actor's own errors, copied by synthesis) is in the next table. A difference of two "
                 "differences of rates (range [-2, 2], MOVER interval). The placebo repeats 0 % and should hold 0.")


def dose_table(rows: list[dict[str, Any]]) -> Table:
    """The dose-response: each share's discard-minus-persist contrast and what the injection adds."""
    body, data = [], []
    seen_zero = False
    for r in rows:
        name = f"{100 * r['share']:g} %" + (" (placebo: a second run)" if r["share"] == 0.0 and seen_zero else "")
        seen_zero |= r["share"] == 0.0
        dose = str(r["dose"]) if r["dose"] is not None else \
            "(the base)" if r["share"] == 0.0 else "n/a: no 0 % run to subtract"
        body.append([name, str(proportion(*r["discard"])), str(proportion(*r["persist"])), str(r["contrast"]), dose])
        data.append([r["share"], r["seed"], *r["discard"], *r["persist"], r["contrast"].value,
                     r["contrast"].low, r["contrast"].high,
                     *((r["dose"].value, r["dose"].low, r["dose"].high) if r["dose"] is not None else ("", "", ""))])
    return Table("injection_dose", "Dose-response: discard against persist at each injected share",
                 ["injected share", "discard: success", "persist: success", "discard minus persist",
                  "minus the 0 % contrast (what the injection adds)"], body,
                 "Each share is an independent run of the two arms (its own seed). At 0 % nothing is injected, so "
                 "its contrast is the base the design makes without injection (the actor's own errors, copied by "
                 "synthesis); the last column is what injecting adds to it (a difference of two differences: its "
                 "range is [-2, 2]; MOVER interval). The placebo row repeats 0 %: its interval should hold 0.",
                 ["share", "seed", "discard_successes", "discard_episodes", "persist_successes", "persist_episodes",
                  "contrast", "contrast_lo", "contrast_hi", "dose", "dose_lo", "dose_hi"], data)


def exposure_check(study: Study, config: Injection, n: int, format_record: Any, backbone: Any = None
                   ) -> dict[str, Any]:
    """:func:`randomised_exposure` on the study's own synthesiser (or, given one, a real
    ``backbone``'s generation: a served model's copying) and Shop records: clean ones (the
    oracle's, with options) and flagged ones (bought at once, and won: optionless)."""
    from ap_gym.memory import Record

    shop = _shop(study.env)

    class _Embed:  # records need no embedding here
        def embed_task(self, *_: Any) -> None:
            return None

    clean: list[str] = []
    flagged: list[str] = []
    for task in study.train_ids[:60]:
        at_once = shop.goal(task).category in config.optionless
        record, _ = study.record(_Embed(), task, at_once=at_once)
        text = format_record(Record(0, **record, iteration=0, mode=None))
        (flagged if at_once and record["success"] else clean).append(text)
    synthesise = synthesiser(config.copying, config.base_error)

    def call(messages: list[dict[str, str]]) -> str:
        from ap_gym.seeding import derived_rng

        if backbone is not None:
            from ap_gym.backbones.base import GenerationConfig

            return str(backbone.generate(messages, GenerationConfig(max_new_tokens=160)).text)
        return synthesise(messages[-1]["content"], derived_rng(config.seed, "exposure", messages[-1]["content"]))

    return randomised_exposure(call, clean, flagged, n, config.seed)
