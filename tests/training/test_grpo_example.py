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
