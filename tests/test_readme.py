"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_add_your_own_environment_example_runs(capsys):
    block = next(b for b in _blocks() if "class Vault" in b)
    exec(compile(block, "README-vault", "exec"), {"__name__": "readme"})
    assert "Open the vault. | True" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("marker", ["WalkthroughPolicy()", "RecordEpisode("])
def test_readme_loops_run(marker, capsys):
    block = next(b for b in _blocks() if marker in b)
    exec(compile(block, "README", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip()
