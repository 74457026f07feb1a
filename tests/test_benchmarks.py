"""Benchmark scripts run at their smallest size, so that none rots unnoticed (a renamed
method once crashed ``make bench``). Each writes its section into a temporary directory
(``AP_GYM_SECTIONS``), never over the one RESULTS.md quotes; the shape is checked, not the
figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(tmp_path: Path, name: str, *args: str) -> str:
    sections = tmp_path / "sections"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AP_GYM_SECTIONS": str(sections), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = list(sections.glob("*.md"))
    assert len(written) == 1, written
    return written[0].read_text()


@pytest.mark.slow
def test_learning_py_runs_small_and_shows_its_baselines_and_caveats(tmp_path):
    text = _script(tmp_path, "learning.py", "--model", "tiny", "--updates", "1", "--groups", "1", "--group-size",
                   "2", "--lanes", "2", "--max-steps", "3", "--train-games", "2", "--test-games", "2", "--levels", "1",
                   "--rules", "grpo", "--random-seeds", "2", "--out", str(tmp_path / "learning"), "--figure", "")
    for row in ("| random |", "| rule |", "| walkthrough |", "| untrained |", "| grpo |"):
        assert row in text, row
    assert "cannot be lost" in text or "no way to lose" in text
    assert "held-out games follow a route" in text


@pytest.mark.slow
def test_agent_py_runs_its_whole_recipe_small(tmp_path):
    text = _script(tmp_path, "agent.py", "treasure", "--smoke", "--rules", "grpo", "--out", str(tmp_path / "agent"))
    for row in ("| random |", "| rule |", "| walkthrough |", "| untrained |", "| sft |", "| sft+grpo |"):
        assert row in text, row
    assert "Held-out wins per task family" in text and "How the episodes ended" in text
