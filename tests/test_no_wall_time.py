"""No test asserts a wall-clock bound: CI machines are shared, and a test that asserts a
duration is a benchmark in disguise (issue 42 item 10: a fresh clone's suite failed two
tests on wall time under load). Durations belong in benchmarks/; a test may guard
against a hang with a generous limit (pytest-timeout, a join's timeout), never assert one.

A deadline a test waits under (``time.monotonic() + 240``) is a bound too: the kill helper's
fixed 240 s to reach a kill point failed a fresh clone under load, and the assertion scan did
not see it. Each deadline left in the suite is listed below with why it is there; a new one
fails the scan until it is removed or listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"time", "perf_counter", "monotonic", "perf_counter_ns", "monotonic_ns", "time_ns"}
#: Names that hold a measured duration (compared in an assertion, they assert one).
WORDS = ("elapsed", "duration")
#: The deadlines kept on purpose, by file and enclosing function, with the reason.
KEPT_DEADLINES = {
    "tests/protocol/test_orphans.py::_wait_gone":
        "the behaviour under test: a run's processes die within 15-30 s of their parent",
    "tests/protocol/executors/test_local.py::test_worker_processes_die_with_a_killed_driver":
        "the behaviour under test: workers die within 20 s of a SIGKILLed driver",
    "tests/envs/test_engine_process.py::test_a_child_orphaned_while_it_starts_exits_at_once":
        "the behaviour under test: a child orphaned during its start exits within 20 s",
    "tests/test_paths.py::_reader":
        "not a bound: how long a reader keeps reading while builders race (the test's workload)",
}


def _reads_a_clock(node: ast.AST) -> bool:
    called = {id(sub.func) for sub in ast.walk(node) if isinstance(sub, ast.Call)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", "")
            base = ast.unparse(sub.func.value) if isinstance(sub.func, ast.Attribute) else ""
            if name in CLOCKS and base in ("time", ""):
                return True
        if isinstance(sub, ast.Name) and id(sub) not in called and any(w in sub.id.lower() for w in WORDS):
            return True
    return False


def wall_time_assertions(root: Path = TESTS) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assert) and any(isinstance(c, ast.Compare) and _reads_a_clock(c)
                                                     for c in ast.walk(node.test)):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {ast.unparse(node.test)[:100]}")
    return found


def _is_clock_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _reads_a_clock(node) and not node.args


def clock_deadlines(root: Path = TESTS) -> dict[str, int]:
    """``clock() + N`` expressions, keyed by ``file::enclosing function`` (or the module)."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        owners = {}
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(fn):  # breadth first: an inner function overrides its outer one
                    owners[id(sub)] = fn.name
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and (
                    _is_clock_call(node.left) or _is_clock_call(node.right)):
                key = f"{path.relative_to(root.parent)}::{owners.get(id(node), '<module>')}"
                found.setdefault(key, node.lineno)
    return found


def test_every_deadline_in_the_suite_is_one_kept_on_purpose(tmp_path):
    planted = tmp_path / "test_planted.py"
    planted.write_text("import time\n\ndef test_x():\n    end = time.monotonic() + 240\n"
                       "    while time.monotonic() < end:\n        pass\n")
    assert list(clock_deadlines(tmp_path)) == [f"{tmp_path.name}/test_planted.py::test_x"]
    found = clock_deadlines()
    new = {k: v for k, v in found.items() if k not in KEPT_DEADLINES}
    assert not new, ("tests that wait under a fixed deadline (a wall-time bound that fails on a busy machine: "
                     "wait on progress instead, or list it in KEPT_DEADLINES with why):\n"
                     + "\n".join(f"{k} (line {v})" for k, v in new.items()))
    gone = set(KEPT_DEADLINES) - set(found)
    assert not gone, f"KEPT_DEADLINES lists deadlines no longer in the suite: {sorted(gone)}"


def test_no_test_asserts_a_wall_clock_bound(tmp_path):
    planted = tmp_path / "test_planted.py"
    planted.write_text("import time\n\ndef test_x():\n    t = time.monotonic()\n    elapsed = time.monotonic() - t\n"
                       "    assert time.monotonic() - t < 2\n    assert elapsed < 90\n")
    assert len(wall_time_assertions(tmp_path)) == 2  # the scan finds both kinds
    found = wall_time_assertions()
    assert not found, "tests that assert a duration (move the measurement to benchmarks/):\n" + "\n".join(found)
