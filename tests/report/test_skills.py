"""The admission filter with its own judge, exported skills, and the frozen-skill layer that reads them."""

from __future__ import annotations

import json

import pytest

from ap_gym.cli import main
from ap_gym.errors import APGymError
from ap_gym.protocol import RunConfig, run
from ap_gym.protocol.results import load_episodes
from ap_gym.report.skills import export_skills, read_skills
from tests.helpers import TINY_AGENT, config


def test_judge_filters_with_its_own_backbone_and_skills_feed_the_frozen_layer(tmp_path):
    policies = [{"name": "abstraction", "label": "filtered",
                 "options": {**TINY_AGENT, "admission": "llm", "judge_backbone": "strict"}}]
    data = config(tmp_path, policies=policies, iterations=1, train_per_iter=4, heldout=1,
                  judges={"strict": "tiny:seed=5"})
    run_dir = run(RunConfig.from_dict(data), progress=False)
    meta = json.loads((run_dir / "config.json").read_text())
    assert "strict" in meta["judges"]
    train = [x for x in load_episodes(run_dir) if x["phase"] == "train"]
    assert all(x["usage"]["calls"].get("admission", 0) == 1 for x in train)  # one judge call per new abstraction

    out = tmp_path / "skills.json"
    assert main(["skills", str(run_dir), "--policy", "filtered", "--out", str(out)]) == 0
    skills = json.loads(out.read_text())
    assert len(skills["admitted"]) + len(skills["filtered_out"]) == len(train)
    assert skills["setting"] == "textworld/filtered/seed0"

    # the frozen layer: Anti-Persistence with the exported skills on top
    out.write_text(json.dumps({**skills, "admitted": [{"text": "Examine everything first."}]}))
    frozen = [{"name": "anti_persistence", "label": "ap_frozen",
               "options": {**TINY_AGENT, "frozen_abstractions": str(out)}}]
    run2 = run(RunConfig.from_dict(config(tmp_path / "b", policies=frozen, iterations=1, train_per_iter=1,
                                          heldout=1)), progress=False)
    (episode,) = [x for x in load_episodes(run2) if x["phase"] == "eval"]
    assert "## Skills\n- Examine everything first." in episode["policy_info"]["guidance"]


def test_export_errors_name_what_to_do(tmp_path):
    with pytest.raises(APGymError, match="no setting"):
        export_skills(tmp_path, "nothing", tmp_path / "s.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(APGymError, match="not a skills file"):
        read_skills(tmp_path / "bad.json")
    (tmp_path / "plain.txt").write_text("one\n\ntwo\n")
    assert read_skills(tmp_path / "plain.txt") == ["one", "two"]
