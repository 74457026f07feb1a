"""Temporary directories a killed process leaves are removed by the next one, never those
of a process that still runs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from ap_gym.processes import cpu_budget, owned_tempdir, process_alive


def test_a_killed_owners_directory_goes_and_a_live_ones_stays(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    host = socket.gethostname().replace("_", "-")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not process_alive(dead.pid)
    left = tmp_path / f"ap_gym_worker_{host}_{dead.pid}_abc"
    (left / "scratch").mkdir(parents=True)
    (left / "scratch" / "memory.sqlite").write_text("x")
    live = tmp_path / f"ap_gym_worker_{host}_{os.getppid()}_def"  # the parent runs
    live.mkdir()
    other_host = tmp_path / f"ap_gym_worker_elsewhere_{dead.pid}_ghi"  # another machine's: not ours to judge
    other_host.mkdir()
    other_prefix = tmp_path / f"ap_gym_snapshot_{host}_{dead.pid}_jkl"
    other_prefix.mkdir()

    mine = owned_tempdir("ap_gym_worker_")
    assert mine.is_dir() and mine.parent == tmp_path and f"_{os.getpid()}_" in mine.name
    assert not left.exists() and live.exists() and other_host.exists() and other_prefix.exists()
    again = owned_tempdir("ap_gym_worker_")  # its own earlier directory is never swept
    assert mine.exists() and again != mine
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, other_host.name, other_prefix.name, mine.name, again.name])
    assert Path(tempfile.gettempdir()) == tmp_path


def test_the_cpu_budget_is_omp_num_threads_where_set_else_the_usable_cores(monkeypatch):
    """Local workers divide this budget: a process told to keep to some cores keeps to them."""
    from ap_gym.protocol.config import RunConfig
    from ap_gym.protocol.executors.local import LocalExecutor

    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    assert cpu_budget() == 6
    executor = LocalExecutor(RunConfig(workers=3), resources=None)
    assert executor.worker_threads() == 2
    for bad in ("", "0", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", bad)
        assert cpu_budget() == len(os.sched_getaffinity(0))


def _echo(conn) -> None:  # a Child's target: module-level, pickled by reference
    conn.send(conn.recv() * 2)


def test_a_child_process_says_nothing_on_stderr(tmp_path):
    """Every engine and worker is a Child: its start printed runpy's warning (the module it
    ran as ``__main__`` had been imported by ``ap_gym`` already) into every run's output."""
    script = tmp_path / "child.py"
    script.write_text("from tests.test_processes import _echo\n"
                      "from ap_gym.processes import Child\n"
                      "child = Child(_echo, name='echo')\n"
                      "child.conn.send(21)\n"
                      "print(child.conn.recv())\n"
                      "child.stop()\n")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "42"
    assert done.stderr == "", done.stderr[-2000:]
