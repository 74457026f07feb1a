"""An agent that acts: SmolLM2 trained here on the engine's expert plans, then by RL, beside its baselines.

For one benchmark (``alfworld`` or ``treasure``: TextWorld's treasure hunter), this script

1. plays the held-out games with the baselines that give a learned agent's number its
   meaning, on the same games at the same step limit: uniform random over the admissible
   commands (several seeds), the best simple rule (:mod:`ap_gym.policies.rules`), the
   expert's walkthrough (the ceiling) and the untrained packaged model;
2. trains the packaged SmolLM2-135M-Instruct with ``ap-gym train``'s trainer:
   ``benchmarks/train/<benchmark>-sft.yaml`` (supervised on the expert's plans of the
   training games, played through the evaluation prompt), then each RL rule from that
   checkpoint (``<benchmark>-<rule>.yaml``);
3. plays the held-out games with each checkpoint (``ap-gym run``: greedy ``choose``, no
   memory, the agent options the model was trained with);
4. writes the section ``agent_<benchmark>``: held-out success with 95 % Wilson intervals,
   the difference to the untrained model, wins per task family, how episodes ended, and
   the training curves.

Everything resumes: a trained stage is kept (its checkpoint verified), a killed one
continues from its last save, and the held-out runs resume like any ``ap-gym run``.

    python benchmarks/agent.py alfworld [--heldout 60] [--rules grpo rebn gigpo]
    python benchmarks/agent.py treasure

The training configs are the recipe: ``ap-gym train benchmarks/train/alfworld-sft.yaml``
and then ``ap-gym train benchmarks/train/alfworld-grpo.yaml`` give the same checkpoints.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.envs import short_name  # noqa: E402
from ap_gym.training import TrainConfig, Trainer  # noqa: E402
from ap_gym.trainlog import TrainingLog  # noqa: E402
from benchmarks._bench import emit, machine, positive  # noqa: E402
from benchmarks._heldout import Row, evaluate, family_table, rows_table, termination_table  # noqa: E402

HERE = Path(__file__).resolve().parent
#: The best simple rule of each benchmark, and what it does.
RULE = {"alfworld": ("rule_household", "search the receptacles in order, take the goal's object, change it at the "
                     "appliance, put it in the goal's receptacle"),
        "treasure": ("rule_explore", "take the goal's object if listed, else open what is closed, else an exit not "
                     "yet taken, not the way back")}
TITLE = {"alfworld": "ALFWorld (generated games, held-out scenes)", "treasure": "TextWorld treasure hunter"}


def configs(benchmark: str, rules: list[str], smoke: str | None = None) -> tuple[TrainConfig, dict[str, TrainConfig]]:
    """The recipe's training configs; with ``smoke`` (a results root) the same recipe shrunk to
    seconds on a tiny random model (the suite runs it so the script cannot rot)."""
    sft = TrainConfig.from_file(HERE / "train" / f"{benchmark}-sft.yaml")
    rl = {rule: TrainConfig.from_file(HERE / "train" / f"{benchmark}-{rule}.yaml") for rule in rules}
    if smoke is None:
        return sft, rl
    small = {"out": smoke, "model": "tiny", "max_steps": 3, "autocast": "none", "train_layers": 0}
    sft = sft.model_copy(update={**small, "stages": (sft.stages[0].model_copy(update={"tasks": 2, "epochs": 1}),)})
    start = str(Path(smoke) / sft.name / "checkpoint")
    rl = {rule: c.model_copy(update={**small, "model": start, "stages": (c.stages[0].model_copy(update={
        "updates": 1, "groups": 1, "group_size": 2, "lanes": 2, "max_steps": 3}),)}) for rule, c in rl.items()}
    return sft, rl


def plot(sft: Path, rl: dict[str, Path], path: Path) -> Path:
    """SFT's loss and each RL rule's training success against the update."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    rows = TrainingLog.read(sft)
    loss = np.array([r["loss"] for r in rows], dtype=float)
    window = min(10, max(1, len(loss)))
    axes[0].plot([r["update"] for r in rows][window - 1:], np.convolve(loss, np.ones(window) / window, "valid"))
    axes[0].set_xlabel("SFT update")
    axes[0].set_ylabel(f"loss (moving mean of {window})")
    styles = {"grpo": "o-", "rebn": "s--", "gigpo": "^:"}
    for rule, log in rl.items():
        rows = TrainingLog.read(log)
        axes[1].plot([r["update"] for r in rows], [r["success"] for r in rows], styles.get(rule, "-"), label=rule,
                     markersize=3)
    axes[1].set_xlabel("RL update")
    axes[1].set_ylabel("training success (attempts of the update)")
    axes[1].set_ylim(-0.05, 1.05)
    if rl:
        axes[1].legend()
    else:
        axes[1].text(0.5, 0.5, "no RL stage in this invocation", ha="center", va="center",
                     transform=axes[1].transAxes, color="0.4")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", choices=sorted(RULE))
    parser.add_argument("--rules", nargs="*", default=["grpo", "rebn", "gigpo"], choices=["grpo", "rebn", "gigpo"])
    parser.add_argument("--heldout", type=positive, default=None,
                        help="held-out games, spread evenly over the split (default: all)")
    parser.add_argument("--max-steps", type=positive, default=None,
                        help="the step limit of every row (default: the training config's)")
    parser.add_argument("--random-seeds", type=positive, default=5)
    parser.add_argument("--workers", type=positive, default=1)
    parser.add_argument("--lanes", type=positive, default=4, help="held-out episodes a worker plays at once")
    parser.add_argument("--out", default="results/agent")
    parser.add_argument("--no-train", action="store_true", help="only the baselines and the untrained model")
    parser.add_argument("--smoke", action="store_true",
                        help="the whole script in seconds on a tiny random model (2 held-out games, 3 steps): a check "
                             "that it runs, not a result (write its section elsewhere: AP_GYM_SECTIONS=DIR)")
    args = parser.parse_args()
    if args.smoke:
        args.heldout, args.max_steps, args.random_seeds, args.lanes = 2, 3, 1, 1
    sft, rl = configs(args.benchmark, [] if args.no_train else args.rules,
                      smoke=str(Path(args.out) / "smoke-train") if args.smoke else None)
    env_id, env_options, agent = sft.benchmark, dict(sft.env_options), dict(sft.agent)
    max_steps = args.max_steps or sft.max_steps or 50
    out = Path(args.out) / args.benchmark
    started = time.perf_counter()
    print(f"machine: {machine()}\n{TITLE[args.benchmark]}: held-out {args.heldout or 'all'}, {max_steps} steps",
          flush=True)

    def heldout(name: str, policies: list[dict[str, Any]], backbone: str = "default",
                seeds: tuple[int, ...] = (0,)) -> dict[str, Row]:
        return evaluate(name, out, env_id, env_options, policies, backbone=backbone, seeds=seeds,
                        heldout=args.heldout, max_steps=max_steps, workers=args.workers, lanes=args.lanes)

    model = {"name": "no_memory", "options": {"agent": agent}}
    rule, what = RULE[args.benchmark]
    rows = [heldout("random", [{"name": "random"}], seeds=tuple(range(args.random_seeds)))["random"]]
    rows += list(heldout("baselines", [{"name": rule, "label": "rule"}, {"name": "walkthrough"}]).values())
    base = str(Trainer(sft).base_model()) if args.smoke else "default"
    rows.append(heldout("untrained", [{**model, "label": "untrained"}], base)["untrained"])
    print("held-out: " + ", ".join(f"{r.label} {r.won}/{r.n}" for r in rows), flush=True)
    notes = {"random": "the floor: uniform over the admissible commands", "rule": f"the best simple rule: {what}",
             "walkthrough": "the ceiling: the expert's plan", "untrained": "SmolLM2-135M-Instruct, greedy choose"}
    minutes: dict[str, float] = {}
    if not args.no_train:
        trained = Trainer(sft).run()
        minutes["sft"] = TrainingLog.read(Trainer(sft).stage_dirs()[-1] / "training.jsonl")[-1]["wall_s"] / 60
        rows.append(heldout("sft", [{**model, "label": "sft"}], str(trained.path))["sft"])
        notes["sft"] = f"SmolLM2 after SFT on the expert's plans ({minutes['sft']:.0f} min)"
        print(f"held-out after SFT: {rows[-1].won}/{rows[-1].n}", flush=True)
        for name, config in rl.items():
            checkpoint = Trainer(config).run()
            minutes[name] = TrainingLog.read(Trainer(config).stage_dirs()[-1] / "training.jsonl")[-1]["wall_s"] / 60
            label = f"sft+{name}"
            rows.append(heldout(label, [{**model, "label": label}], str(checkpoint.path))[label])
            notes[label] = f"then {name} from the SFT checkpoint ({minutes[name]:.0f} min)"
            print(f"held-out after SFT + {name}: {rows[-1].won}/{rows[-1].n}", flush=True)
    figure = None
    if not args.no_train:
        figure = plot(Trainer(sft).stage_dirs()[-1] / "training.jsonl",
                      {n: Trainer(c).stage_dirs()[-1] / "training.jsonl" for n, c in rl.items()},
                      out / "training.png")
        if not args.smoke:  # a copy RESULTS.md can show (results/ is not committed); never a smoke run's
            shown = HERE / "figures" / f"agent_{args.benchmark}.png"
            shutil.copyfile(figure, shown)
            figure = shown
    emit(f"agent_{args.benchmark}", f"`agent.py {args.benchmark}`: an agent trained here on {TITLE[args.benchmark]}",
         section(args, sft, rl, rows, notes, minutes, max_steps, figure, time.perf_counter() - started))


def section(args: argparse.Namespace, sft: TrainConfig, rl: dict[str, TrainConfig], rows: list[Row],
            notes: dict[str, str], minutes: dict[str, float], max_steps: int, figure: Path | None,
            total_s: float) -> str:
    stage = sft.stages[0]
    n_games = len({h.task_id for r in rows for h in r.heads})
    recipe = (f"SFT: {stage.epochs} epochs over the expert's plans of the {short_name(sft.benchmark)} training "
              f"split, played through the evaluation prompt (`{stage.objective}` objective, batch {stage.batch}, "
              f"AdamW lr {stage.lr}), the last {sft.train_layers or 'all'} transformer blocks trained"
              f"{' in bf16 autocast' if sft.autocast == 'bfloat16' else ''}.")
    for name, config in rl.items():
        s = config.stages[0]
        recipe += (f" {name}: {s.updates} updates of {s.groups} tasks x {s.group_size} attempts (T = {s.temperature}, "
                   f"at most {s.max_steps or config.max_steps} steps), at most {s.decisions} decisions per update, "
                   f"lr {s.lr}.")
    if not rl:
        recipe += (" No RL stage in this invocation (`--rules` named none): the SFT+RL rows of this benchmark are "
                   "not measured here.")
    total_min = sum(minutes.values())
    lines = [f"The packaged SmolLM2-135M-Instruct trained on this 2-core CPU by `ap-gym train` "
             f"(`benchmarks/train/{args.benchmark}-*.yaml`), then played on {n_games} held-out games of "
             f"{TITLE[args.benchmark]} by `ap-gym run` (greedy `choose` among the admissible commands, no memory, "
             f"agent options {sft.agent}, at most {max_steps} steps), beside the floor, the best simple rule and "
             f"the ceiling on the same games and step limit. {recipe} Training took {total_min:.0f} min in all "
             f"(SFT {minutes.get('sft', 0):.0f} min; wall time on this 2-core machine, which ran other jobs beside "
             "it: an upper bound, not a speed figure). Held-out success with 95 % Wilson intervals; the difference to "
             "the untrained model with Newcombe's. The held-out games were never trained on (other scenes for "
             "ALFWorld; other seeds for TextWorld), and nothing here was tuned on them.", "",
             *rows_table(rows, reference="untrained", notes=notes), "",
             "Held-out wins per task family (random: pooled over its seeds):", "", *family_table(rows), "",
             "How the episodes ended:", "", *termination_table(rows)]
    if figure is not None:
        lines += ["", f"![training curves]({os.path.relpath(figure.resolve(), HERE)})", "",
                  f"Training curves: SFT's loss and each RL rule's training success per update "
                  f"(`{os.path.relpath(figure.resolve(), HERE.parent)}`; logs: "
                  "`results/train/<run>/<stage>/training.jsonl`)."]
    lines += ["", f"This invocation: {total_s / 60:.0f} min (training and held-out runs not already done).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
