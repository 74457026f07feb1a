"""The package is typed for its users: the lazily loaded public names are the real types to a
type checker, and every ``type: ignore`` in the package says why beside it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_type_ignore_says_why():
    bare = []
    for path in sorted((ROOT / "ap_gym").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "type: ignore" in line and not re.search(r"type: ignore\[[\w\-, ]+\]  # \S", line):
                bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, "a type: ignore without its code and a reason after it:\n" + "\n".join(bare)


@pytest.mark.slow
def test_a_users_type_checker_sees_the_lazy_public_names(tmp_path):
    """``ap_gym.RunConfig`` and friends load on first use; to mypy they were ``Any``, so
    ``RunConfig.from_dikt`` passed."""
    user = tmp_path / "user.py"
    user.write_text("import ap_gym\nap_gym.RunConfig.from_dikt({})\nap_gym.AgentConfig(history_window=2)\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                           str(user)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert 'has no attribute "from_dikt"' in done.stdout, done.stdout[-2000:]
    assert done.stdout.count("error:") == 1, done.stdout[-2000:]
