"""No test asserts a wall-clock bound: CI machines are shared, and a test that asserts a
duration is a benchmark in disguise (issue 42 item 10: a fresh clone's suite failed two
tests on wall time under load). Durations belong in benchmarks/; a test may guard
against a hang with a generous limit (pytest-timeout, a join's timeout), never assert one.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"time", "perf_counter", "monotonic", "perf_counter_ns", "monotonic_ns", "time_ns"}
#: Names that hold a measured duration (compared in an assertion, they assert one).
WORDS = ("elapsed", "duration")


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


def test_no_test_asserts_a_wall_clock_bound(tmp_path):
    planted = tmp_path / "test_planted.py"
    planted.write_text("import time\n\ndef test_x():\n    t = time.monotonic()\n    elapsed = time.monotonic() - t\n"
                       "    assert time.monotonic() - t < 2\n    assert elapsed < 90\n")
    assert len(wall_time_assertions(tmp_path)) == 2  # the scan finds both kinds
    found = wall_time_assertions()
    assert not found, "tests that assert a duration (move the measurement to benchmarks/):\n" + "\n".join(found)
