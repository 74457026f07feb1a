"""Every benchmark script is named by a test: each answers ``--help`` without running (so a
renamed import or a broken module fails here, in seconds), and the scripts whose figures
the README quotes at the smallest size run in ``tests/test_benchmarks.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))


def test_the_list_of_scripts_is_the_folders():
    assert "agent.py" in SCRIPTS and "results.py" in SCRIPTS and len(SCRIPTS) >= 20


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_script_says_what_it_does_and_runs_nothing(script, tmp_path):
    def files() -> dict[Path, int]:  # bytecode caches aside: another test's import may write them meanwhile
        return {p: p.stat().st_mtime_ns for p in (ROOT / "benchmarks").rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}

    before = files()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={"HF_HUB_OFFLINE": "1",
                                                                              "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
    assert files() == before, "--help wrote files"


def test_the_demo_timer_times_what_the_makefile_runs():
    """benchmarks/demo_time.py reads the demo target's commands; a part the Makefile adds is timed."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.demo_time import demo_parts

    parts = demo_parts()
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert len(parts) == target.count("\n\t") and parts
    assert [p[1] for p in parts] == ["run", "report", "injection", "demo"]
    assert all(Path(p[0]).name == "ap-gym" and Path(p[0]).is_absolute() for p in parts)
    assert not any("=" in p[0] for p in parts)  # the environment is set by the timer, not passed as a command
