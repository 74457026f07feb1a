"""A quick look: the no-memory LLM agent and the floors on a few held-out tasks.

It plays held-out tasks of TextWorld (generated games) and ScienceWorld with the
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

__all__ = ["episode_table", "run_demo"]


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
    from ap_gym.envs import resolve_benchmark
    from ap_gym.policies import AgentConfig, NoMemory

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(width=None if sys.stdout.isatty() else 160)
    rows: list[tuple[str, str, Episode]] = []
    console.log("loading the backbone (the first run converts the packaged GGUF, ~20 s)")
    model = make_backbone(backbone)
    if isinstance(model, ServedBackbone):  # a server that cannot score candidates: say so now
        model.check(scoring=action_mode == "choose")
    agent = NoMemory(model, AgentConfig(action_mode=action_mode)).eval()
    for bench in benchmarks:
        env = gym.make(resolve_benchmark(bench), split="test", max_episode_steps=max_steps)
        try:
            for task_id in env.unwrapped.task_ids("test")[:: max(1, 20 // tasks_per_benchmark)][:tasks_per_benchmark]:
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
    summary = {}
    for bench, name, ep in rows:
        s = summary.setdefault(f"{bench}/{name}", {"episodes": 0, "successes": 0, "steps": 0})
        s["episodes"] += 1
        s["successes"] += int(ep.success)
        s["steps"] += ep.num_steps
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(episode_table(rows, f"ap-gym demo: held-out tasks ({max_steps}-step limit, {action_mode} mode)"))
    console.print(f"results: {out}/episodes.jsonl, {out}/summary.json")
    return 0
