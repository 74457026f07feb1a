"""The admission filter with its own judge, exported skills (per backbone and seed), and the
frozen-skill layer that reads them (the paper's §F.2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ap_gym.cli import main
from ap_gym.errors import APGymError
from ap_gym.protocol import RunConfig, run
from ap_gym.protocol.config import ConfigError
from ap_gym.protocol.results import load_episodes
from ap_gym.protocol.skills import export_skills, read_skills, skills_for
from tests.helpers import TINY_AGENT, config

PAPER = Path(__file__).resolve().parents[2] / "benchmarks" / "paper"


def test_judge_filters_with_its_own_backbone_and_skills_feed_the_frozen_layer(tmp_path):
    policies = [{"name": "abstraction", "label": "filtered",
                 "options": {**TINY_AGENT, "admission": "llm", "judge_backbone": "strict"}}]
    data = config(tmp_path, policies=policies, iterations=1, train_per_iter=4, heldout=1,
                  judges={"strict": "tiny:seed=5"})
    run_dir = run(RunConfig.from_dict(data), progress=False)
    meta = json.loads((run_dir / "config.json").read_text())
    assert "strict" in meta["judges"]
    train = [x for x in load_episodes(run_dir) if x.header.phase == "train"]
    assert all(x.header.usage.calls_for("admission") == 1 for x in train)  # one judge call per new abstraction

    out = tmp_path / "skills.json"
    assert main(["skills", str(run_dir), "--policy", "filtered", "--out", str(out)]) == 0
    skills = json.loads(out.read_text())
    (entry,) = skills["settings"].values()
    assert list(skills["settings"]) == ["textworld/filtered/seed0"]
    assert len(entry["admitted"]) + len(entry["filtered_out"]) == len(train)
    assert all(len(a["embedding"]) == 384 for a in entry["admitted"])  # retrieval as abstraction memory did

    # the frozen layer: Anti-Persistence with the skills on top, the nearest `frozen_budget` of them
    texts = [f"Skill number {i}: examine everything first." for i in range(8)]
    entry["admitted"] = [{"text": t} for t in texts]
    out.write_text(json.dumps(skills))
    frozen = [{"name": "anti_persistence", "label": "ap_frozen",
               "options": {**TINY_AGENT, "frozen_abstractions": str(out), "frozen_budget": 3}}]
    run2 = run(RunConfig.from_dict(config(tmp_path / "b", policies=frozen, iterations=1, train_per_iter=1,
                                          heldout=1)), progress=False)
    (episode,) = [x for x in load_episodes(run2) if x.header.phase == "eval"]
    shown = [t for t in texts if f"- {t}" in episode.header.policy_info["guidance"]]
    assert "## Skills\n- Skill number" in episode.header.policy_info["guidance"] and len(shown) == 3

    # the skills file is an input of the run: kept in it, and an edit before a resume is refused
    manifest = json.loads((run2 / "inputs" / "manifest.json").read_text())
    assert (run2 / "inputs" / manifest[str(out)]["copy"]).read_bytes() == out.read_bytes()
    entry["admitted"] = [{"text": "An edited skill."}]
    out.write_text(json.dumps(skills))
    with pytest.raises(ConfigError, match="changed since this run started"):
        run(RunConfig.from_dict(config(tmp_path / "b", policies=frozen, iterations=1, train_per_iter=1, heldout=1)),
            progress=False)


def test_export_errors_name_what_to_do(tmp_path):
    with pytest.raises(APGymError, match="no setting"):
        export_skills(tmp_path, "nothing", tmp_path / "s.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(APGymError, match="not a skills file"):
        read_skills(tmp_path / "bad.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(APGymError, match="not a skills file"):
        read_skills(tmp_path / "deep.json")
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(APGymError, match="cannot read"):
        read_skills(tmp_path / "bytes.json")
    (tmp_path / "plain.txt").write_text("one\n\ntwo\n")
    assert skills_for(tmp_path / "plain.txt", "shop", None, 0) == [{"text": "one"}, {"text": "two"}]


@pytest.mark.slow
def test_frozen_skills_run_end_to_end_per_backbone_and_seed(tmp_path):
    """§F.2 as documented: the admission filter's run on two backbones and two seeds, `ap-gym
    skills` exports every setting, and ablations_frozen.yaml gives each setting its own."""
    backbones = {"llama-4-scout": "tiny", "qwen3-coder-next": "tiny:seed=1"}
    first = config(tmp_path, name="abl", benchmarks=["shop"], backbones=backbones, seeds=[0, 1], iterations=1,
                   train_per_iter=2, heldout=1, max_steps=3, judges={"judge": "tiny:seed=9"},
                   policies=[{"name": "abstraction", "label": "abstraction_filtered",
                              "options": {**TINY_AGENT, "admission": "llm", "judge_backbone": "judge"}}])
    run_dir = run(RunConfig.from_dict(first), progress=False)
    out = tmp_path / "skills.json"
    assert main(["skills", str(run_dir), "--policy", "abstraction_filtered", "--benchmark", "shop",
                 "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["settings"]) == 4
    for key, entry in data["settings"].items():  # a text that says whose it is
        entry["admitted"] = [{"text": f"Skill of {key}."}]
    out.write_text(json.dumps(data))

    frozen = yaml.safe_load((PAPER / "ablations_frozen.yaml").read_text())
    for p in frozen["policies"]:
        p["options"] = {**p["options"], **TINY_AGENT, "frozen_abstractions": str(out)}
    frozen.update(out=str(tmp_path), benchmarks=["shop"], backbones=backbones, seeds=[0, 1], iterations=1,
                  train_per_iter=1, heldout=1, max_steps=3, workers=1, retries=0, eval_before_training=False,
                  env_options={}, embedder="default")
    run2 = run(RunConfig.from_dict(frozen), progress=False)
    evals = [x for x in load_episodes(run2) if x.header.phase == "eval"]
    assert len(evals) == 4
    for x in evals:
        own = f"Skill of shop/{x.header.backbone}/abstraction_filtered/seed{x.header.seed}."
        assert own in x.header.policy_info["guidance"], (own, x.header.policy_info["guidance"][:200])


def test_export_skips_damaged_rejections(tmp_path):
    """A rejected abstraction without text, or policy_info that is a list, is left out of
    filtered_out (never a crash); a well-formed rejection is kept."""
    from tests.helpers import synthetic_run

    run_dir = synthetic_run(tmp_path, "r", {"filtered": [True, False]})
    episodes = next(run_dir.rglob("episodes.jsonl"))
    base = json.loads(episodes.read_text().splitlines()[0])
    lines = []
    for info in ({"rejected_abstractions": [{"kind": "rule"}, {"text": ""}, {"text": "Keep me."}, 7]}, [1, 2],
                 {"rejected_abstractions": "not a list"}):
        lines.append(json.dumps({**base, "head": {**base["head"], "phase": "train", "policy_info": info}}))
    episodes.write_text(episodes.read_text() + "\n".join(lines) + "\n")
    data = export_skills(run_dir, "filtered", tmp_path / "s.json")
    (entry,) = data["settings"].values()
    assert [f["text"] for f in entry["filtered_out"]] == ["Keep me."]


def test_a_skills_file_without_every_settings_set_is_refused_before_anything_runs(tmp_path):
    """ablations_frozen.yaml's comment once exported seed 0 only; the run then crashed at its
    second setting with a traceback. Now: refused before the run directory exists."""
    skills = tmp_path / "skills.json"
    skills.write_text(json.dumps({"format": "ap-gym-skills/2", "run": "x", "embedder": None, "settings": {
        "shop/llama-4-scout/abstraction_filtered/seed0": {"admitted": [{"text": "Skill."}], "filtered_out": []},
        "shop/qwen3-coder-next/abstraction_filtered/seed0": {"admitted": [{"text": "Skill."}], "filtered_out": []}}}))
    frozen = yaml.safe_load((PAPER / "ablations_frozen.yaml").read_text())
    assert "--seed" not in (PAPER / "ablations_frozen.yaml").read_text()  # its own comment exports every seed
    for p in frozen["policies"]:
        p["options"] = {**p["options"], **TINY_AGENT, "frozen_abstractions": str(skills)}
    frozen.update(out=str(tmp_path), benchmarks=["shop"], backbones={"llama-4-scout": "tiny", "qwen3-coder-next": "tiny"},
                  seeds=[0, 1], iterations=1, train_per_iter=1, heldout=1, max_steps=3, workers=1, env_options={},
                  embedder="default")
    config_ = RunConfig.from_dict(frozen)
    with pytest.raises(ConfigError, match=r"2 setting\(s\) cannot take their frozen skills.*seed1.*without --seed"):
        run(config_, progress=False)
    assert not config_.run_dir.exists()
