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


@pytest.mark.parametrize(("text", "commands"), [
    ("go south", True),
    ("## Lessons from earlier tasks\ngo south go south go east go south go west", True),
    ("1. open the door\n2. go east", True),
    ("take red apple from table", True),
    # advice, and what the untrained model wrote as guidance in trained_memory.py's run: not commands
    ("Take the key before you go north.", False),
    ("Always open the chest first, then take what is in it.", False),
    ("1. The goal is to find the keycard and pick it up. 2. The keycard is a standard kind of thing.", False),
    ("go to the kitchen and look around, because the key is usually there", False),
    ("", False),
])
def test_the_guidance_table_tells_commands_from_advice(text, commands):
    """trained_memory.py's 'only commands' column: a planted mix of moves and advice."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.trained_memory import only_commands

    assert only_commands(text) is commands


def test_engine_boundary_py_runs_small_and_shows_every_side_quiet_and_hogged(tmp_path):
    """The script behind issue 52's blocked boundary item: every side has a row on both
    machines, or is named as left out (a kernel or CPU without ``sched_setattr``)."""
    text = _script(tmp_path, "engine_boundary.py", "--step-ms", "0.2", "--steps", "5", "--rounds", "2", "--hog", "1")
    for state in ("quiet", "1-process hog"):
        assert f"| {state} | raw | " in text and f"| {state} | scheduler | " in text
        for side in ("one CPU", "short slice", "one CPU + short slice"):
            assert f"| {state} | {side} | " in text or f"Left out ({state}): {side}:" in text, (state, side)
    assert "Target (issue 52" in text
