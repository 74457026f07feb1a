"""examples/grpo_torch.py trains: finite losses, weights that move, and the winning
command's log-probability rising on the toy env."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo_torch.py"


@pytest.mark.slow
def test_the_pure_torch_grpo_example_learns_the_toy_env(tmp_path):
    out = tmp_path / "updates.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLE), "--model", "tiny", "--updates", "6", "--check",
                           "--out", str(out)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6
    assert all(math.isfinite(r["loss"]) for r in rows)
    stepped = [r for r in rows if r["grad_norm"] > 0]
    assert len(stepped) >= 3, "fewer than 3 updates had a gradient"
    probes = [r["probe_logprob"] for r in rows]
    assert len(set(probes)) > 1  # the weights moved
    first = float(done.stdout.split("probe logprob ")[1].split()[0])
    assert probes[-1] > first  # the winning command became likelier


MEMORY = ["no_memory", "trajectory", "abstraction", "joint", "reflexion", "autorefine", "anti_persistence"]


@pytest.mark.slow
def test_a_checkpoint_the_example_saved_is_a_backbone_for_every_memory_design(tmp_path):
    """The trained agent with and without memory is one config: ``backbone: DIR``."""
    from ap_gym.protocol import RunConfig, load_headers, run
    from tests.helpers import register_dial

    checkpoint = tmp_path / "trained"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLE), "--model", "tiny", "--updates", "1", "--save", str(checkpoint)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (checkpoint / "config.json").exists() and (checkpoint / "tokenizer_config.json").exists()
    env_id = register_dial()
    options = {"agent": {"action_mode": "choose", "history_window": 2}}
    memory = {**options, "memory": {"synthesis": {"max_new_tokens": 6}}}
    config = RunConfig.from_dict({
        "name": "trained", "out": str(tmp_path / "runs"), "benchmarks": [env_id], "backbone": str(checkpoint),
        "env_options": {env_id: {"split": "train"}},
        "policies": [{"name": n, "options": options if n == "no_memory" else memory} for n in MEMORY],
        "seeds": [0], "iterations": 1, "train_per_iter": 2, "heldout": 1, "max_steps": 2, "workers": 1})
    out = run(config, progress=False)
    heads = load_headers(out)
    resolved = json.loads((out / "config.json").read_text())
    assert str(checkpoint) in json.dumps(resolved.get("backbones", resolved))  # the run names what it ran
    assert {h.policy for h in heads if h.phase == "eval"} == set(MEMORY)
    assert not any(h.infrastructure_failure for h in heads)
