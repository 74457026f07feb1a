"""The paper's experiment as files: each config loads, names its served models without URLs
(and says how to give them), and a CI-sized run of each gives the Table 1 and Table 2 report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ap_gym.cli import main
from ap_gym.protocol import RunConfig, run
from ap_gym.protocol.config import ConfigError
from ap_gym.protocol.results import load_headers
from ap_gym.report import write_report
from tests.helpers import TINY_AGENT

PAPER = Path(__file__).resolve().parents[2] / "benchmarks" / "paper"


def ci_sized(name: str, out: Path, backbones: dict[str, str], **change) -> dict:
    """The config file with tiny backbones, one iteration and a few tasks (its grid kept)."""
    data = yaml.safe_load((PAPER / name).read_text())
    data.update(out=str(out), backbones=backbones, iterations=1, train_per_iter=1, heldout=1, max_steps=3,
                seeds=[0], workers=1, retries=0, embedder="default", **change)
    if "alfworld" in data.get("env_options", {}):
        data["env_options"]["alfworld"] = {"games": "generated"}
    if "judges" in data:
        data["judges"] = {label: "tiny:seed=9" for label in data["judges"]}
    for p in data["policies"]:  # short generations: the subject is the grid, not the model
        options = p.setdefault("options", {})
        options.setdefault("agent", TINY_AGENT["agent"])
        if p["name"] != "no_memory":
            options.setdefault("memory", {}).setdefault("synthesis", TINY_AGENT["memory"]["synthesis"])
    return data


def test_the_paper_files_hold_the_paper_grid():
    main_ = yaml.safe_load((PAPER / "main.yaml").read_text())
    assert main_["benchmarks"] == ["alfworld", "webshop", "scienceworld"] and "textworld" not in main_["benchmarks"]
    assert {p["name"] for p in main_["policies"]} == {"no_memory", "trajectory", "abstraction", "joint", "reflexion",
                                                      "autorefine", "anti_persistence"}
    assert (main_["iterations"], main_["train_per_iter"], main_["seeds"], main_["heldout"],
            main_["eval_before_training"]) == (10, 50, [0, 1, 2], None, True)
    assert len(main_["backbones"]) == 3
    ablations = yaml.safe_load((PAPER / "ablations.yaml").read_text())
    assert ablations["benchmarks"] == ["alfworld", "webshop"]
    options = [json.dumps(p.get("options", {}), sort_keys=True) for p in ablations["policies"] if isinstance(p, dict)]
    for needle in ('"persist_guidance": true', '"random_mode": true', '"lam": 0.0', '"lam": 0.2', '"lam": 0.5',
                   '"budget": 1', '"budget": 10', '"neighbours": 3', '"neighbours": 5', '"neighbours": 20',
                   '"gamma": 1.0', '"gamma": 0.98', '"judge_backbone": "judge"'):
        assert any(needle in o for o in options), needle
    assert sum('"fixed_mode"' in o for o in options) == 4


SERVERS = {"llama-4-scout": "http://a:1/v1", "qwen3-coder-next": "http://b:1/v1", "gemma-4-31b-it": "http://c:1/v1"}


def test_served_models_need_their_urls_and_the_error_says_how(tmp_path):
    with pytest.raises(ConfigError, match=r"--backbone llama-4-scout=http://HOST:PORT/v1"):
        RunConfig.from_file(PAPER / "main.yaml")
    with pytest.raises(ConfigError, match=r"--judge judge=http://HOST:PORT/v1"):
        RunConfig.from_file(PAPER / "ablations.yaml", backbones={"llama-4-scout": "tiny", "qwen3-coder-next": "tiny"},
                            embedder="default")
    with pytest.raises(ConfigError, match=r"--embedder http://HOST:PORT/v1.*--embedder default.*another similarity"):
        RunConfig.from_file(PAPER / "main.yaml", backbones=SERVERS)  # the paper's embedder is served, not MiniLM
    config = RunConfig.from_file(PAPER / "main.yaml", backbones=SERVERS, embedder="default")  # said explicitly
    assert config.backbones["gemma-4-31b-it"] == "http://c:1/v1"
    with pytest.raises(ConfigError, match=r"'llama-4-scout' has an empty spec"):
        RunConfig.from_file(PAPER / "main.yaml", backbones={**SERVERS, "llama-4-scout": ""}, embedder="default")
    RunConfig.from_file(PAPER / "textworld.yaml")


def test_the_paper_configs_run_the_papers_agent():
    """Every policy of the paper's files generates its action (react) under a stated budget."""
    for name in ("main.yaml", "ablations.yaml", "ablations_frozen.yaml"):
        config = RunConfig.from_file(PAPER / name, backbones=SERVERS if name == "main.yaml" else
                                     {"llama-4-scout": "http://a:1/v1", "qwen3-coder-next": "http://b:1/v1"},
                                     judges={"judge": "http://j:1/v1"} if name == "ablations.yaml" else None,
                                     embedder="http://e:1/v1")
        agents = [p.options["agent"] for p in config.policies]
        assert len(agents) >= 1 and all(a["action_mode"] == "react" for a in agents), name
        assert all(a["react_generation"]["max_new_tokens"] == 256 and a["max_prompt_tokens"] for a in agents)
    main_ = RunConfig.from_file(PAPER / "main.yaml", backbones=SERVERS, embedder="default")
    assert len(main_.policies) == 8 and main_.env_options["alfworld"] == {"games": "official"}
    # Table 2's persist arm is in the same run as the flagship, so the two compare on one grid
    persist = [p for p in main_.policies if p.options.get("persist_guidance")]
    assert [(p.name, p.label) for p in persist] == [("anti_persistence", "ap_persist")]


def test_a_grid_that_cannot_run_stops_before_anything_is_written(tmp_path, monkeypatch):
    """A missing WebShop used to surface only after every ALFWorld setting; the official ALFWorld
    games, asked for by the paper's file, were silently replaced by generated ones."""
    data = ci_sized("main.yaml", tmp_path, {"scout": "tiny"})
    data["env_options"] = {"alfworld": {"games": "official"}}
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(ConfigError, match=r"(?s)cannot start.*benchmark alfworld.*official.*benchmark webshop.*"
                                          r"WebShop is not installed"):
        run(RunConfig.from_dict(data), progress=False)
    assert not (tmp_path / data["name"]).exists()


@pytest.mark.slow
def test_ci_sized_main_run_gives_table_1(tmp_path):
    data = ci_sized("main.yaml", tmp_path, {"scout": "tiny", "qwen": "tiny:seed=1"},
                    benchmarks=["alfworld", "shop"])
    run_dir = run(RunConfig.from_dict(data), progress=False)
    out = write_report([run_dir])
    text = (out / "report.md").read_text()
    rows = (out / "final_success.csv").read_text().splitlines()  # long: one row per method and setting
    assert rows[0] == "method,setting,success_mean,success_std,seeds"
    assert len({r.split(",")[1] for r in rows[1:]}) == 2 * 2 and len(rows) == 1 + 8 * 2 * 2
    assert "## Table 2: discard versus persist" in text  # both arms in the main run
    assert "| mean over settings |" in text
    assert "## Table 1: final held-out success" in text
    assert "**shop**: Shop, ap-gym's self-contained stand-in for WebShop" in text
    assert "**alfworld**: ALFWorld games generated offline" in text
    family = [r.split(",")[0] for r in (out / "stats.csv").read_text().splitlines()[1:]]
    assert sorted(family) == ["abstraction", "autorefine", "joint", "reflexion", "trajectory"]
    assert [r.split(",")[0] for r in (out / "stats_other.csv").read_text().splitlines()[1:]] == ["ap_persist",
                                                                                                "no_memory"]
    iterations = {h.iteration for h in load_headers(run_dir) if h.setting == "shop/scout/anti_persistence/seed0"}
    assert iterations == {-1, 0}  # before the first training iteration, and after it


@pytest.mark.slow
def test_ci_sized_ablations_give_table_2_and_the_frozen_layer_reads_exported_skills(tmp_path):
    data = ci_sized("ablations.yaml", tmp_path, {"scout": "tiny"}, benchmarks=["textworld", "shop"])
    run_dir = run(RunConfig.from_dict(data), progress=False)
    skills = tmp_path / "skills.json"
    assert main(["skills", str(run_dir), "--policy", "abstraction_filtered", "--benchmark", "shop",
                 "--out", str(skills)]) == 0
    frozen = ci_sized("ablations_frozen.yaml", tmp_path, {"scout": "tiny"}, benchmarks=["shop"])
    frozen["policies"][0]["options"]["frozen_abstractions"] = str(skills)
    frozen_dir = run(RunConfig.from_dict(frozen), progress=False)
    out = write_report([run_dir, frozen_dir])
    text = (out / "report.md").read_text()
    assert "## Table 2: discard versus persist" in text
    rows = (out / "discard_vs_persist.csv").read_text().splitlines()
    assert "| setting | discard (anti_persistence) | persist (ap_persist) |" in text
    assert rows[0] == "setting,discard_mean,discard_std,persist_mean,persist_std" and len(rows) == 3
    methods = {r.split(",")[0] for r in (out / "final_success.csv").read_text().splitlines()[1:]}
    assert {"ap_fixed_strategic", "ap_lambda_0.5", "ap_neighbours_20", "ap_gamma_1", "abstraction_filtered",
            "ap_frozen_skills"} <= methods
