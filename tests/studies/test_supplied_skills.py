"""Supplied skills (§F.1): no skill, correct skills, wrong skills on the same tasks."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from ap_gym.backbones.scripted import ScriptedActor
from ap_gym.cli import main
from ap_gym.errors import APGymError
from ap_gym.studies.supplied_skills import read_skill_pairs, run_supplied_skills

SKILLS = Path(__file__).resolve().parents[2] / "benchmarks" / "skills"


def test_the_shipped_skill_files_pair_every_skill():
    for name in ("shop.yaml", "alfworld.yaml"):
        benchmark, pairs = read_skill_pairs(SKILLS / name)
        assert benchmark == name.removesuffix(".yaml") and len(pairs) >= 3
        assert all(p["correct"] != p["wrong"] and p["scope"] for p in pairs)


def test_wrong_skills_cost_a_following_agent_and_correct_ones_do_not(tmp_path):
    env = gym.make("ap_gym/Shop-v0").unwrapped
    walkthroughs = {env.goal(t).instruction: env.oracle_actions(t) for t in env.task_ids("test")}
    actor = ScriptedActor(walkthroughs, lambda prompt, rng: "", compliance=1.0)
    run_dir = run_supplied_skills(SKILLS / "shop.yaml", tmp_path, backbone="scripted", heldout=10, seeds=(0,),
                                  agent={"action_mode": "generate", "max_admissible_listed": 500},
                                  provide=actor, progress=False)
    rows = {r[0]: r for r in (run_dir / "supplied_skills.csv").read_text().splitlines()[1:] for r in [r.split(",")]}
    success = {arm: int(rows[arm][1]) / int(rows[arm][2]) for arm in ("none", "correct", "wrong")}
    assert success["wrong"] < success["none"] <= success["correct"] + 1e-9
    assert "Supplied skills" in (run_dir / "report.md").read_text()


def test_a_bad_skills_file_is_named(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("benchmark: shop\nskills: [{scope: x}]\n")
    with pytest.raises(APGymError, match="not a skills file"):
        read_skill_pairs(tmp_path / "bad.yaml")
    assert main(["supplied-skills", str(tmp_path / "bad.yaml"), "--out", str(tmp_path)]) == 2
    assert "not a skills file" in capsys.readouterr().err
