"""Learning on a real benchmark: the credit-assignment rules (GRPO, ReBN, GiGPO), one budget, the same seeds.

SmolLM2-135M-Instruct (the packaged model, fp32, on this CPU) is trained on TextWorld
coin-collector games (TextWorld's own generator, levels 1-5, many seeds) by ap-gym's
trainer (:class:`ap_gym.training.Trainer`, what ``ap-gym train`` runs: group rollouts of
the evaluation agent and prompt, then a policy gradient over the admissible commands)
with one of three rules:

* ``grpo``: trajectory-level group-normalised returns (GRPO);
* ``rebn``: REINFORCE with Return Batch Normalisation over per-turn discounted returns
  (GEM's baseline);
* ``gigpo``: GRPO's trajectory advantage plus step-level groups from anchor states
  (verl-agent's GiGPO; ``status_line=False`` makes equal states equal text).

Same updates, groups, tasks, learning rate and seeds for each. The held-out games are
played by ``ap-gym run`` itself, before and after (greedy ``choose``, the no-memory agent),
beside what gives the numbers their meaning on the same games and step limit: uniform
random over the admissible commands (10 seeds), the best simple rule
(``rule_explore``: take the coin if listed, else an exit not the way back) and the
walkthrough. Coin collector is a narrow test: a game cannot be lost (a failure is the step
limit), and many held-out routes are training routes (the section counts them).

    python benchmarks/learning.py [--updates 30] [--rules grpo rebn gigpo] [--model smollm2|tiny] [--fresh]

A killed run continues where it stopped (the trainer resumes from its last save; a rule
trained to the end under the same settings is kept; ``--fresh`` retrains), and the
held-out runs resume like any ``ap-gym run``.

A flat curve is a result: the section says what moved and what did not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.envs.textworld import GameSpec, ensure_game  # noqa: E402
from ap_gym.paths import cache_dir  # noqa: E402
from ap_gym.training import RLStage, TrainConfig, Trainer  # noqa: E402
from ap_gym.training.groups import RULES  # noqa: E402
from ap_gym.trainlog import TrainingLog  # noqa: E402
from benchmarks._bench import emit, machine, positive  # noqa: E402
from benchmarks._heldout import Row, evaluate, rows_table  # noqa: E402

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


def heldout(name: str, out: Path, games: dict[str, list[str]], policies: list[dict[str, Any]], max_steps: int,
            backbone: str = "default", seeds: tuple[int, ...] = (0,)) -> dict[str, Row]:
    """Held-out episodes of ``policies`` played by ``ap-gym run`` (greedy choose, no memory)."""
    return evaluate(name, out, ENV, env_kwargs(games), policies, backbone=backbone, seeds=seeds, max_steps=max_steps,
                    progress=False)


def by_level(rows: list[Row], rules: list[str]) -> list[str]:
    """Held-out wins per level for each agent, and whether the rules won the same games: three
    equal totals could hide different games (or the same ones, which is a finding too)."""
    def level(task: str) -> int:
        return int(task.split("_l")[1].split("_")[0])

    levels = sorted({level(h.task_id) for r in rows for h in r.heads})
    lines = ["| level | held-out games | " + " | ".join(r.label for r in rows) + " |", "|---|---|" + "---|" * len(rows)]
    for lv in levels:
        cells = []
        for r in rows:
            mine = [h for h in r.heads if level(h.task_id) == lv]
            per = len({h.task_id for h in mine})
            cells.append(f"{sum(h.success for h in mine) / max(r.seeds, 1):g}" if per else "-")
        n = len({h.task_id for r in rows for h in r.heads if level(h.task_id) == lv})
        lines.append(f"| {lv} | {n} | " + " | ".join(cells) + " |")
    trained = {r.label: frozenset(h.task_id for h in r.heads if h.success) for r in rows if r.label in rules}
    if len(trained) > 1:
        same = len(set(trained.values())) == 1
        common = frozenset.intersection(*trained.values())
        lines += ["", ("The rules won the same held-out games." if same else
                       f"The rules won different games: {len(common)} won by every rule; " + ", ".join(
                           f"{r} alone {len(trained[r] - frozenset().union(*(v for k, v in trained.items() if k != r)))}"
                           for r in trained) + ".")]
    return lines


def train(rule: str, args: argparse.Namespace, games: dict[str, list[str]], out: Path) -> Path:
    """One rule's training by ap-gym's trainer; returns its checkpoint (resumed or kept when
    an earlier invocation trained it under the same settings)."""
    config = TrainConfig(
        name=rule, out=str(out), benchmark=ENV, env_options=env_kwargs(games), model=args.model_spec, agent=AGENT,
        max_steps=args.max_steps, seed=args.seed, train_layers=args.train_layers, autocast="none", save_every=5,
        stages=(RLStage(rule=rule, updates=args.updates, groups=args.groups, group_size=args.group_size,
                        lanes=args.lanes, temperature=args.temperature, lr=args.lr, decisions=args.decisions,
                        gamma=args.gamma),))
    trainer = Trainer(config, fresh=args.fresh)
    return trainer.run().path


def routes(games: dict[str, list[str]]) -> tuple[int, int]:
    """How many held-out games' walkthroughs are also a training game's (a route seen in
    training), and how many held-out games there are."""
    import json

    def walk(game: str) -> tuple[str, ...]:
        return tuple(json.loads(Path(game).with_suffix(".json").read_text())["metadata"]["walkthrough"])

    seen = {walk(g) for g in games["train"]}
    return sum(walk(g) in seen for g in games["test"]), len(games["test"])


def plot(out: Path, rules: list[str], window: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"grpo": "o-", "rebn": "s--", "gigpo": "^:"}
    for rule in rules:
        rows = TrainingLog.read(out / rule / f"1-{rule}" / "training.jsonl")
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


#: The baselines: the floor, the best simple rule and the ceiling, on the same games.
BASELINES = [{"name": "rule_explore", "label": "rule"}, {"name": "walkthrough"}]


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
    parser.add_argument("--random-seeds", type=positive, default=10, help="seeds of the random baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/learning")
    parser.add_argument("--fresh", action="store_true", help="retrain rules an earlier run finished")
    parser.add_argument("--figure", default="benchmarks/figures/learning_curves.png",
                        help="where the curves are copied for RESULTS.md ('' for none)")
    args = parser.parse_args()
    args.model_spec = {"smollm2": "default"}.get(args.model, args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    games = suite(args.train_games, args.test_games, tuple(args.levels))
    print(f"machine: {machine()}\n{len(games['train'])} training games, {len(games['test'])} held-out", flush=True)
    started = time.perf_counter()
    rows = [heldout("random", out / "eval", games, [{"name": "random"}], args.max_steps,
                    seeds=tuple(range(args.random_seeds)))["random"]]
    rows += list(heldout("baselines", out / "eval", games, BASELINES, args.max_steps).values())
    base = args.model_spec if args.model_spec != "tiny" else str(Trainer(TrainConfig(
        name="base", out=str(out), benchmark=ENV, model="tiny", seed=args.seed, stages=(RLStage(),))).base_model())
    untrained = heldout("before", out / "eval", games, [{"name": "no_memory", "label": "untrained",
                                                          "options": {"agent": AGENT}}], args.max_steps, base)
    rows.append(untrained["untrained"])
    print("held-out: " + ", ".join(f"{r.label} {r.won}/{r.n}" for r in rows), flush=True)
    seconds = {}
    for rule in args.rules:
        checkpoint = train(rule, args, games, out)
        seconds[rule] = float(TrainingLog.read(out / rule / f"1-{rule}" / "training.jsonl")[-1]["wall_s"])
        after = heldout(f"after-{rule}", out / "eval", games, [{"name": "no_memory", "label": rule,
                                                                 "options": {"agent": AGENT}}],
                        args.max_steps, str(checkpoint))
        rows.append(after[rule])
        print(f"held-out after {rule}: {rows[-1].won}/{rows[-1].n} ({seconds[rule]:.0f} s training)", flush=True)
    curves = plot(out, args.rules, window=5)
    if args.figure:  # a copy RESULTS.md can show (results/ is not committed)
        Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(curves, args.figure)
        curves = Path(args.figure)
    rules = f"{len(args.rules)} credit-assignment rules" if len(args.rules) > 1 else \
        f"one credit-assignment rule ({', '.join(args.rules) or 'none'})"
    emit("learning", f"`learning.py`: learning on TextWorld coin collector, {rules}",
         section(args, games, rows, seconds, time.perf_counter() - started, curves))


def _rule_sentence(rows: list[Row]) -> str:
    """What the simple rule's row says beside the ceiling's and the trained rows' (from the
    rows, never assumed)."""
    by = {r.label: r for r in rows}
    rule, ceiling = by.get("rule"), by.get("walkthrough")
    if rule is None or ceiling is None:
        return ""
    trained = [r for r in rows if r.label not in ("random", "rule", "walkthrough", "untrained")]
    said = (f"A simple rule (take the coin if listed, else an exit not the way back) wins {rule.won}/{rule.n}, "
            f"the walkthrough {ceiling.won}/{ceiling.n}")
    better = [r.label for r in trained if r.won / max(r.n, 1) >= rule.won / max(rule.n, 1)]
    if trained:
        said += ("; no trained model reaches it" if not better else f"; {', '.join(better)} reach(es) it")
    return said + "."


def section(args: argparse.Namespace, games: dict[str, list[str]], rows: list[Row], seconds: dict[str, float],
            total_s: float, curves: Path) -> str:
    layers = "every weight" if args.train_layers <= 0 else \
        f"the last {args.train_layers} transformer blocks and the final norm (embeddings frozen)"
    model = {"smollm2": "SmolLM2-135M-Instruct (the packaged model, fp32)", "tiny": "A tiny random Llama"}.get(
        args.model, args.model)
    shared, n_test = routes(games)
    lost = sum(h.termination.value == "lost" for r in rows for h in r.heads)
    notes = {"random": "the floor: uniform over the admissible commands",
             "rule": "the best simple rule: take the coin if listed, else an exit not the way back",
             "walkthrough": "the ceiling: TextWorld's walkthrough", "untrained": "the packaged model, greedy choose",
             **{rule: f"trained with {rule} ({seconds[rule] / 60:.0f} min)" for rule in seconds}}
    lines = [f"{model} trained on {len(games['train'])} TextWorld coin-collector games (levels "
             f"{', '.join(map(str, args.levels))}) by ap-gym's trainer (`ap_gym.training.Trainer`, the loop `ap-gym "
             f"train` runs), evaluated on {len(games['test'])} held-out ones by `ap-gym run` (greedy `choose`, no "
             f"memory, at most {args.max_steps} steps) beside the floor, the best simple rule and the ceiling on the "
             f"same games and step limit. Each rule: {args.updates} updates of {args.groups} tasks x "
             f"{args.group_size} attempts (the choose agent at T = {args.temperature}, the evaluation prompt and "
             f"stepper), a policy gradient over the admissible commands through {layers}, at most "
             f"{args.decisions} decisions with an advantage per update (a uniform sample), AdamW lr {args.lr} (no "
             f"decay), seed {args.seed}; gamma {args.gamma} for ReBN and GiGPO's step groups. The same tasks and seeds "
             "for every rule. Held-out success with 95 % Wilson intervals; the difference to the untrained model "
             "with Newcombe's.", "",
             "**What this game can and cannot show.** A coin-collector game is a corridor with no distractor and no "
             f"way to lose: a failure is always the step limit ({lost} episodes of all rows ended lost). "
             f"{shared} of the {n_test} held-out games follow a route (walkthrough) that a training game also "
             "follows, so held-out success here is partly recall of training routes. " + _rule_sentence(rows)
             + " Learning here moves a model's ranking of a few commands, and the section cannot show more than "
             "that. `agent_alfworld` and `agent_treasure` are the harder tests.", "",
             *rows_table(rows, reference="untrained", notes=notes)]
    lines += ["", "Held-out wins per level (random: the mean over its seeds):", "", *by_level(rows, list(seconds))]
    shown = os.path.relpath(curves.resolve(), Path(__file__).resolve().parent)  # from RESULTS.md's folder
    lines += ["", f"![learning curves]({shown})", "",
              f"Training curves (moving mean over 5 updates): `{curves}`; per-update logs: "
              f"`{args.out}/<rule>/1-<rule>/training.jsonl`. Training time is the rule's updates (rollouts and "
              f"gradient steps), not its held-out evaluation. This invocation: {total_s / 60:.0f} min.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
