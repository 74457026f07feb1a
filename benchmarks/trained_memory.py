"""The paper's question asked of an agent that wins sometimes: every memory design on a model trained here.

Runs ``benchmarks/paper/trained_<benchmark>.yaml`` (the protocol on the checkpoint
``ap-gym train`` made: SFT on the expert's plans, then GRPO; all seven designs, Table 2's
persist arm and an arm whose guidance the untrained model writes; 3 seeds; exposure to
stored abstractions randomised per training task), then ``ap-gym report`` on it, and writes
the section ``trained_memory_<benchmark>``: each design's held-out success pooled over seeds
with its 95 % Wilson interval and its difference to no memory (Newcombe), the report's
Table 1, LLM calls, modes, Table 2 and the audit with its randomised gap, and sentences that
say which differences the intervals allow.

    python benchmarks/trained_memory.py alfworld
    python benchmarks/trained_memory.py treasure

A missing checkpoint is trained first (``benchmarks/train/<benchmark>-sft.yaml``, then
``-grpo.yaml``); everything resumes where it stopped.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.protocol import RunConfig, load_headers, run  # noqa: E402
from ap_gym.report import collect, report_tables, write_report  # noqa: E402
from ap_gym.report.stats import Estimate, difference, proportion  # noqa: E402
from ap_gym.studies.injection import difference_of_differences  # noqa: E402
from ap_gym.training import TrainConfig, Trainer  # noqa: E402
from benchmarks._bench import emit, machine  # noqa: E402
from benchmarks._heldout import evaluate, rows_table  # noqa: E402
from benchmarks.agent import RULE  # noqa: E402

HERE = Path(__file__).resolve().parent
#: The report's tables this section shows, in order.
SHOWN = ("final_success", "calls", "modes", "discard_vs_persist", "audit")


def final_wins(run_dir: Path, leave_out: frozenset[str] = frozenset()) -> dict[str, list[bool]]:
    """Each arm's held-out outcomes at the final iteration, over every seed (infrastructure
    failures and the settings ``arm/seedN`` in ``leave_out`` aside)."""
    heads = [h for h in load_headers(run_dir) if h.phase == "eval" and not h.infrastructure_failure
             and f"{h.policy}/seed{h.seed}" not in leave_out]
    last = max(h.iteration for h in heads)
    by: dict[str, list[bool]] = defaultdict(list)
    for h in heads:
        if h.iteration == last:
            by[h.policy].append(h.success)
    return by


def pooled(run_dir: Path, reference: str = "no_memory",
           leave_out: frozenset[str] = frozenset(), order: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """Each arm's held-out success at the final iteration pooled over seeds, and sentences on
    which differences to ``reference`` the intervals allow (``leave_out``: settings
    ``arm/seedN`` that did not finish)."""
    by = final_wins(run_dir, leave_out)
    ref = by.get(reference, [])
    lines = [f"| arm | held-out success (pooled over seeds) | minus {reference} |", "|---|---|---|"]
    said = []
    rank = {arm: k for k, arm in enumerate(order)}
    for arm, wins in sorted(by.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])):
        if arm == reference:
            lines.append(f"| {arm} | {proportion(sum(wins), len(wins))} ({sum(wins)}/{len(wins)}) | - |")
            continue
        d = difference(sum(wins), len(wins), sum(ref), len(ref))
        lines.append(f"| {arm} | {proportion(sum(wins), len(wins))} ({sum(wins)}/{len(wins)}) | {d} |")
        if d.low > 0:
            said.append(f"{arm} did better than {reference} (the interval of the difference, {d}, excludes 0)")
        elif d.high < 0:
            said.append(f"{arm} did worse than {reference} (the interval of the difference, {d}, excludes 0)")
        else:
            said.append(f"{arm} minus {reference}: {d}, an interval that holds 0 (no difference shown)")
    return lines, said


#: The verbs a TextWorld or ALFWorld command starts with, and words no command holds: guidance
#: made only of short commands is actions, not advice.
VERBS = frozenset(["go", "take", "open", "close", "unlock", "lock", "insert", "put", "drop", "examine", "look",
                   "inventory", "eat", "cook", "slice", "heat", "cool", "clean", "toggle", "use", "move"])
ADVICE = frozenset(["you", "your", "should", "if", "when", "before", "after", "then", "first", "always", "never",
                    "try", "must", "need", "sure", "avoid", "don't", "is", "are", "will", "can", "because"])


def only_commands(text: str) -> bool:
    """Whether ``text`` (headers and numbering aside) is nothing but short commands."""
    body = " ".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    words = [w.strip("*-:.,;!?()[]\"'").lower() for w in body.split()]
    words = [w for w in words if w and not w.isdigit()]
    if not words or words[0] not in VERBS or ADVICE & set(words):
        return False
    segments = re.split(r" (?=(?:" + "|".join(sorted(VERBS)) + r") )", " ".join(words) + " ")
    return all(len(seg.split()) <= 5 for seg in segments)


def guidance_table(run_dir: Path) -> list[str]:
    """What each arm's prompt showed as guidance on the held-out tasks: how often, how long, and
    how often it was nothing but commands (a model trained only to act may answer a request
    for advice with actions), with an example."""
    heads = [h for h in load_headers(run_dir) if h.phase == "eval" and not h.infrastructure_failure]
    by: dict[str, list[str]] = defaultdict(list)
    for h in heads:
        d = h.decisions
        by[h.policy].append((d.mode_guidance or d.guidance or "").strip())
    lines = ["| arm | held-out episodes | with guidance | words (median) | only commands | an example |",
             "|---|---|---|---|---|---|"]
    for arm, texts in by.items():
        shown = [t for t in texts if t]
        if not shown:
            continue
        words = [len(t.split()) for t in shown]
        commands = sum(only_commands(t) for t in shown)
        example = re.sub(r"\s+", " ", min(shown, key=lambda t: abs(len(t.split()) - statistics.median(words))))
        example = example[:100].replace("|", "/") + ("..." if len(example) > 100 else "")
        lines.append(f"| {arm} | {len(texts)} | {len(shown)} | {statistics.median(words):g} | "
                     f"{commands} ({commands / len(shown):.0%}) | {example} |")
    return lines


def unfinished(run_dir: Path, config: RunConfig) -> list[str]:
    """The settings (arm/seed) whose held-out phase did not finish."""
    done: dict[tuple[str, int], int] = defaultdict(int)
    for h in load_headers(run_dir):
        if h.phase == "eval" and h.iteration == config.iterations - 1:  # iterations count from 0
            done[(h.policy, h.seed)] += 1
    want = config.heldout or 0
    return [f"{p.label}/seed{s}" for p in config.policies for s in config.seeds if done[(p.label, s)] < want]


def baselines(config: RunConfig, benchmark: str) -> list[str]:
    """The floor, the best simple rule and the ceiling on the run's own held-out games at its
    step limit (random: one run per seed of the study), so each arm's number can be read."""
    env_id = config.benchmarks[0]
    rule, what = RULE[benchmark]
    out = Path(config.out) / f"{config.name}-baselines"
    options = config.env_options.get(env_id, {})
    rows = [evaluate("random", out, env_id, options, [{"name": "random"}],
                     seeds=tuple(config.seeds), heldout=config.heldout, max_steps=config.max_steps)["random"]]
    rows += list(evaluate("rules", out, env_id, options,
                          [{"name": rule, "label": "rule"}, {"name": "walkthrough"}], heldout=config.heldout,
                          max_steps=config.max_steps).values())
    notes = {"random": "the floor: uniform over the admissible commands", "rule": f"the best simple rule: {what}",
             "walkthrough": "the ceiling: the expert's plan"}
    return ["The same held-out games at the same step limit, played without a model "
            f"(`{out}`):", "", *rows_table(rows, notes=notes), ""]


def arm_difference(run_dir: Path, arm: str, reference: str = "no_memory") -> Estimate:
    """``arm`` minus ``reference`` in held-out success at the final iteration, pooled over seeds."""
    wins = final_wins(run_dir)
    return difference(sum(wins[arm]), len(wins[arm]), sum(wins[reference]), len(wins[reference]))


def guided(benchmark: str, main_run: Path) -> list[str]:
    """The arm fine-tuned with Anti-Persistence's guidance in its prompts: its own no-memory and
    Anti-Persistence rows, under the same protocol, tasks and seeds, what its prompts showed,
    and how Anti-Persistence's difference to no memory moved from the run above."""
    Trainer(TrainConfig.from_file(HERE / "train" / f"{benchmark}-guided.yaml")).run()
    config = RunConfig.from_file(HERE / "paper" / f"trained_{benchmark}_guided.yaml")
    run_dir = run(config)
    lines, said = pooled(run_dir)
    before, after = arm_difference(main_run, "anti_persistence"), arm_difference(run_dir, "anti_persistence")
    moved = difference_of_differences(after, before)
    verdict = (f"an interval that holds 0: no change shown, and changes from {moved.low:.2f} to {moved.high:.2f} "
               "are not ruled out" if moved.low <= 0 <= moved.high else
               "an interval that excludes 0: Anti-Persistence's effect depends on whether the model saw memory "
               "text in training")
    return ["### The arm trained with memory in its prompts", "",
            f"`{config.backbone}`: the agent above after one more epoch of SFT on the expert's plans with "
            "Anti-Persistence's guidance (written by the model itself from the expert's records) in the prompt "
            f"(`benchmarks/train/{benchmark}-guided.yaml`); the same protocol, tasks and seeds "
            f"(`benchmarks/paper/trained_{benchmark}_guided.yaml`). If an effect of Anti-Persistence above came from "
            "prompts the model never saw in training, it changes here.", "", *lines, "",
            "What the intervals allow: " + "; ".join(said) + ".", "",
            f"Anti-Persistence minus no memory was {before} on the model that saw no memory text in training and is "
            f"{after} on this one; the change, {moved} (MOVER: the two differences' own intervals combined, as if "
            f"independent; they share tasks and seeds, which if anything makes it wide), is {verdict}.", "",
            "What its prompts showed as guidance on the held-out tasks:", "", *guidance_table(run_dir), ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", choices=["alfworld", "treasure"])
    parser.add_argument("--config", default=None, help="default: benchmarks/paper/trained_<benchmark>.yaml")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--guided", action="store_true",
                        help="also the arm trained with Anti-Persistence's guidance in its prompts "
                             "(benchmarks/train/<benchmark>-guided.yaml, paper/trained_<benchmark>_guided.yaml)")
    parser.add_argument("--as-it-stands", action="store_true",
                        help="report the run as far as it got (no episode is played; the section names the settings "
                             "missing): for a run stopped before its end")
    args = parser.parse_args()
    config = RunConfig.from_file(args.config or HERE / "paper" / f"trained_{args.benchmark}.yaml",
                                 workers=args.workers)
    started = time.perf_counter()
    print(f"machine: {machine()}", flush=True)
    if not Path(config.backbone).exists():  # the checkpoint first: SFT, then GRPO
        for stage in ("sft", "grpo"):
            Trainer(TrainConfig.from_file(HERE / "train" / f"{args.benchmark}-{stage}.yaml")).run()
    run_dir = config.run_dir if args.as_it_stands else run(config)
    report = write_report([run_dir])
    tables = {t.name: t for t in report_tables(collect([run_dir]))}
    missing = unfinished(run_dir, config)
    lines, said = pooled(run_dir, leave_out=frozenset(missing), order=tuple(p.label for p in config.policies))
    text = [f"The protocol of `benchmarks/paper/trained_{args.benchmark}.yaml` on `{config.backbone}` (SmolLM2-135M-"
            f"Instruct after SFT and GRPO here, fixed before any held-out number was seen): {config.iterations} training "
            f"iteration of {config.train_per_iter} tasks, then {config.heldout} held-out tasks with memory frozen, "
            f"seeds {list(config.seeds)}, at most {config.max_steps} steps, greedy `choose`, synthesis by the same "
            "model (64 new tokens) except in `ap_untrained_synthesis` (the packaged untrained model writes the "
            "guidance), exposure to stored abstractions randomised per training task (p = "
            f"{config.audit.randomise_exposure}). Report: `{report / 'report.md'}`.", "",
            "Held-out success per arm, pooled over seeds, with 95 % Wilson intervals and Newcombe's interval of the "
            "difference to no memory:", "", *lines, "", "What the intervals allow: " + "; ".join(said) + ".", "",
            *baselines(config, args.benchmark)]
    text += ["What the prompts showed as guidance on the held-out tasks (`only commands`: besides headers, "
             "nothing but commands of at most five words each, and no word of advice such as 'you', 'if' or "
             "'before'):", "", *guidance_table(run_dir), ""]
    if missing:
        text[:0] = [f"**Unfinished:** this run was stopped before its end; {len(missing)} of "
                    f"{len(config.policies) * len(config.seeds)} settings have no complete held-out results ({', '.join(missing)}): the pooled "
                    "table leaves them out; the report's tables (Table 1 on) count the episodes they played.", ""]
    for name in SHOWN:
        if name in tables:
            text += [tables[name].markdown(), ""]
    if args.guided:
        text += guided(args.benchmark, run_dir)
    text += [f"This invocation: {(time.perf_counter() - started) / 60:.0f} min (settings an earlier invocation "
             "finished are read, not played again).", ""]
    emit(f"trained_memory_{args.benchmark}", f"`trained_memory.py {args.benchmark}`: every memory design on the "
         "agent trained here", "\n".join(text))


if __name__ == "__main__":
    main()
