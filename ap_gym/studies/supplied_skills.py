"""Supplied skills (the paper's §F.1): the same tasks with no skill, correct skills and wrong ones.

The paper gives a memory-free agent skill libraries written in pairs that differ only in
procedural correctness (on AppWorld, whose data is not reachable offline) and compares
success without skills, with the correct ones and with the wrong ones. Here the skills
are a YAML file the user writes (``benchmarks/skills/shop.yaml`` and ``alfworld.yaml`` ship)::

    benchmark: shop
    skills:
      - {scope: options, correct: "...", wrong: "..."}

and the study runs through the protocol: the no-memory agent three times (``none``,
``correct``, ``wrong``: the skills shown in every prompt), on the same held-out tasks and
seeds, on any backbone. Its table gives each arm's success with a Wilson interval and the
differences to ``none`` with Newcombe's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ap_gym.errors import APGymError
from ap_gym.protocol import RunConfig
from ap_gym.protocol.loop import Runner
from ap_gym.protocol.results import Rates, load_headers
from ap_gym.report.stats import difference, proportion
from ap_gym.report.tables import Table

__all__ = ["ARMS", "read_skill_pairs", "run_supplied_skills", "supplied_skills_table"]

ARMS = ("none", "correct", "wrong")


def read_skill_pairs(path: str | Path) -> tuple[str, list[dict[str, str]]]:
    """The benchmark and the skill pairs of a skills YAML file (see the module docstring)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        pairs = [{"scope": str(p.get("scope", "")), "correct": str(p["correct"]), "wrong": str(p["wrong"])}
                 for p in data["skills"]]
        benchmark = str(data["benchmark"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, AttributeError) as e:
        raise APGymError(f"{path} is not a skills file ({type(e).__name__}: {e}); it holds `benchmark:` and "
                         "`skills:` pairs {scope, correct, wrong} (see benchmarks/skills/shop.yaml)") from None
    if not pairs:
        raise APGymError(f"{path} holds no skill pair")
    return benchmark, pairs


def run_supplied_skills(skills: str | Path, out: str | Path, *, backbone: str = "default", heldout: int | None = 20,
                        seeds: tuple[int, ...] = (0, 1, 2), max_steps: int = 15, agent: dict[str, Any] | None = None,
                        provide: Any = None, progress: bool = True) -> Path:
    """Run the three arms through the protocol and write ``report.md``; the run directory.

    ``provide`` is a backbone object to use for ``backbone`` (a scripted one, in tests).
    """
    benchmark, pairs = read_skill_pairs(skills)
    agent = agent or {"action_mode": "react"}
    texts = {"none": [], "correct": [p["correct"] for p in pairs], "wrong": [p["wrong"] for p in pairs]}
    config = RunConfig.from_dict({
        "name": "supplied-skills", "out": str(out), "benchmarks": [benchmark], "backbone": backbone,
        "policies": [{"name": "no_memory", "label": arm, "options": {"agent": agent, "skills": texts[arm]}}
                     for arm in ARMS],
        "seeds": list(seeds), "iterations": 1, "train_per_iter": 0, "heldout": heldout, "max_steps": max_steps,
        "workers": 1, "description": f"Supplied skills (§F.1) from {skills}: a no-memory agent with no skill, "
                                      "the correct skills, and the wrong skills of the same scope, on the same tasks."})
    runner = Runner(config)
    if provide is not None:
        runner.resources.provide(backbone, provide)
    run_dir = runner.run(progress=progress)
    table = supplied_skills_table(run_dir)
    table.write_csv(run_dir)
    (run_dir / "report.md").write_text("\n".join(["# Supplied skills (§F.1)", "", config.description, "",
                                                  f"Skills: {skills} ({len(pairs)} pairs); backbone: {backbone}.",
                                                  "", table.markdown(), ""]))
    return run_dir


def supplied_skills_table(run_dir: str | Path) -> Table:
    """Each arm's held-out success (all seeds pooled), and its difference to no skill."""
    lines = [h for h in load_headers(run_dir) if h.phase == "eval"]
    counts = {}
    for arm in ARMS:
        rates = Rates.of(h for h in lines if h.policy == arm)
        counts[arm] = (rates.successes, rates.valid)
    rows, data = [], []
    for arm in ARMS:
        k, n = counts[arm]
        diff = difference(k, n, *counts["none"]) if arm != "none" else None
        rows.append([arm, n, str(proportion(k, n)), "-" if diff is None else str(diff)])
        data.append([arm, k, n, None if diff is None else diff.value])
    return Table("supplied_skills", "Supplied skills: held-out success by arm", ["skills", "episodes",
                 "success [95 % CI]", "minus no skill [95 % CI]"], rows,
                 "Seeds pooled. Intervals: Wilson; Newcombe for the differences.",
                 ["skills", "successes", "episodes", "difference_to_none"], data)
