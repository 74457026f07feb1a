"""A quick look: the no-memory LLM agent and the floors on a few held-out tasks; and the
agent trained here, when one is.

:func:`run_demo` plays held-out tasks of TextWorld (generated games) and ScienceWorld with the
no-memory agent on the packaged SmolLM2-135M-Instruct (choosing among admissible
commands by summed log-likelihood) beside the random and walkthrough floors, writes
``episodes.jsonl`` and ``summary.json`` under ``out``, and prints success, score, steps
and LLM calls per task.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
from rich.console import Console
from rich.table import Table

import ap_gym
from ap_gym.policies import RandomPolicy, WalkthroughPolicy
from ap_gym.protocol.results import EpisodeLine
from ap_gym.types import Episode

__all__ = ["TRAINED", "episode_table", "run_demo", "trained_demo"]

#: Checkpoints ``ap-gym train`` writes with the shipped recipes (benchmarks/train/), the most
#: trained first: the first that exists is the agent the demo shows.
TRAINED = (("alfworld", "results/train/alfworld-grpo/checkpoint"), ("alfworld", "results/train/alfworld-sft/checkpoint"))
#: The recipe's agent options (benchmarks/train/alfworld-sft.yaml): the prompt it was trained on.
TRAINED_AGENT = {"history_window": 6, "max_observation_chars": 500}


def episode_table(rows: list[tuple[str, str, Episode]], title: str) -> Table:
    table = Table(title=title)
    for col in ("benchmark", "policy", "task", "success", "score", "steps", "LLM calls", "end"):
        table.add_column(col)
    for bench, policy, ep in rows:
        score = "-" if ep.score is None else f"{ep.score:g}/{ep.max_score:g}" if ep.max_score else f"{ep.score:g}"
        table.add_row(bench, policy, ep.task_id, "yes" if ep.success else "no", score,
                      str(ep.num_steps), str(ep.usage.llm_calls), ep.termination.value)
    return table


def run_demo(tasks_per_benchmark: int = 3, out: str | Path = "results/demo", backbone: str | None = None,
             benchmarks: tuple[str, ...] = ("textworld", "scienceworld"), action_mode: str = "choose",
             max_steps: int = 50) -> int:
    """Play the no-memory agent (``action_mode``) and the floors on a few held-out tasks."""
    from ap_gym.backbones import make_backbone
    from ap_gym.backbones.base import ServedBackbone
    from ap_gym.envs import resolve_benchmark, text_env
    from ap_gym.policies import AgentConfig, NoMemory

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(width=None if sys.stdout.isatty() else 160)
    rows: list[tuple[str, str, Episode]] = []
    console.log("loading the backbone (the first run converts the packaged GGUF, ~20 s)")
    model = make_backbone(backbone)
    if isinstance(model, ServedBackbone):  # a server that cannot score candidates: say so now
        model.check(scoring=action_mode == "choose")
    agent = NoMemory(model, AgentConfig.coerce({"action_mode": action_mode})).eval()
    for bench in benchmarks:
        env = gym.make(resolve_benchmark(bench), split="test", max_episode_steps=max_steps)
        try:
            for task_id in text_env(env).task_ids("test")[:: max(1, 20 // tasks_per_benchmark)][:tasks_per_benchmark]:
                for name, policy in (("no_memory", agent), ("random", RandomPolicy(seed=0)),
                                     ("walkthrough", WalkthroughPolicy())):
                    ep = ap_gym.run_episode(env, policy.eval(), task_id=task_id, seed=0)
                    console.log(f"{bench} {name}: {ep.summary_line()}")
                    rows.append((bench, name, ep))
        finally:
            env.close()
    with open(out / "episodes.jsonl", "w") as f:  # the results format's lines, one per episode
        for index, (bench, name, ep) in enumerate(rows):
            f.write(EpisodeLine.of("eval", 0, index, bench, name, 0, 1, ep).to_json() + "\n")
    summary: dict[str, dict[str, int]] = {}
    for bench, name, ep in rows:
        s = summary.setdefault(f"{bench}/{name}", {"episodes": 0, "successes": 0, "steps": 0})
        s["episodes"] += 1
        s["successes"] += int(ep.success)
        s["steps"] += ep.num_steps
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(episode_table(rows, f"ap-gym demo: held-out tasks ({max_steps}-step limit, {action_mode} mode)"))
    console.print(f"results: {out}/episodes.jsonl, {out}/summary.json")
    return 0


def trained_demo(out: str | Path = "results", checkpoint: str | None = None, tasks: int = 3,
                 max_steps: int = 30) -> int:
    """The agent ``ap-gym train`` made (the first of :data:`TRAINED` that exists, or
    ``checkpoint``) beside the untrained model and the best simple rule on ``tasks`` held-out
    ALFWorld games (one per task type first), by ``ap-gym run``; without a checkpoint, say
    how to make one and how long it takes here."""
    from ap_gym.backbones.checkpoint import CheckpointError, verify_checkpoint
    from ap_gym.protocol import RunConfig, load_headers, run

    console = Console(width=None if sys.stdout.isatty() else 160)
    found = checkpoint or next((path for _, path in TRAINED if Path(path).exists()), None)
    if found is None:
        console.print("No trained agent here yet. One command makes one (SFT on ALFWorld's expert plans; about "
                      f"{_recipe_minutes()} on 2 CPU cores):\n"
                      "  .venv/bin/ap-gym train benchmarks/train/alfworld-sft.yaml\n"
                      "then `make demo` shows it beside the untrained model and the best simple rule, and "
                      "benchmarks/RESULTS.md (the `agent.py` sections) shows what the recipes give on held-out games.")
        return 0
    try:
        verify_checkpoint(found, hashes=False)
    except CheckpointError as e:
        console.print(f"[red]{found}: {e}[/red]")
        return 1
    agent = {"name": "no_memory", "options": {"agent": TRAINED_AGENT}}
    config = RunConfig.from_dict({
        "name": "demo-trained", "out": str(out), "benchmarks": ["alfworld"],
        "env_options": {"alfworld": {"games": "generated"}}, "backbones": {"trained": str(found), "untrained": "default"},
        "policies": [{**agent, "label": "agent"}, {"name": "rule_household", "label": "rule"}], "seeds": [0],
        "iterations": 1, "train_per_iter": 0, "heldout": tasks, "max_steps": max_steps, "workers": 1,
        "lanes": tasks})  # every game in one batched round
    console.log(f"the trained agent {found} beside the untrained model and the best simple rule on {tasks} held-out "
                f"ALFWorld games ({max_steps}-step limit)")
    heads = [h for h in load_headers(run(config)) if h.phase == "eval"]
    table = Table(title=f"ap-gym demo: an agent trained here ({found})")
    for col in ("agent", "won", "task families won"):
        table.add_column(col)
    for name in ("trained/agent", "untrained/agent", "rule"):
        mine = [h for h in heads if (f"{h.backbone}/{h.policy}" if h.backbone else h.policy) == name
                or (name == "rule" and h.policy == "rule")]
        mine = list({h.task_id: h for h in mine}.values())  # the rule needs no model: one run per task
        table.add_row(name.replace("/agent", " model"), f"{sum(h.success for h in mine)}/{len(mine)}",
                      ", ".join(sorted({h.task_family for h in mine if h.success})) or "-")
    console.print(table)
    console.print(f"results: {config.run_dir} (ap-gym view {config.run_dir}); the full held-out comparison with "
                  "intervals: benchmarks/RESULTS.md, the agent.py sections")
    return 0


def _recipe_minutes() -> str:
    """How long the SFT recipe took here, from RESULTS.md's agent_alfworld section if it was run."""
    import re

    section = Path(__file__).resolve().parents[1] / "benchmarks" / "sections" / "agent_alfworld.md"
    try:
        found = re.search(r"SFT (\d+) min", section.read_text())
    except OSError:
        found = None
    return f"{found.group(1)} minutes" if found else "one to two hours"  # 2 h here beside other jobs (2026-12-06)
