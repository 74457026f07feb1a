"""The README's Python examples run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


EXAMPLES = README.parent / "examples"


def test_the_ten_lines_block_is_examples_ten_lines_py():
    block = next(b for b in _blocks() if "WalkthroughPolicy()" in b)
    assert block == (EXAMPLES / "ten_lines.py").read_text()


@pytest.mark.slow
def test_ten_lines_runs_as_a_plain_script_on_an_empty_cache(tmp_path):
    """No ``if __name__ == "__main__":`` in the script: helper processes (game generation)
    must not re-import it. An empty cache makes the game be generated on the spot."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AP_GYM_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(EXAMPLES / "ten_lines.py")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert "success=" in lines[0] and " -> " in lines[1], done.stdout
    assert list((tmp_path / "cache").rglob("*.z8")) or list((tmp_path / "cache").rglob("*.ulx"))


def test_the_vault_gives_admissible_commands_on_every_step():
    namespace: dict = {"__name__": "__main__"}  # as the other README tests run it (one registration)
    exec(compile(next(b for b in _blocks() if "class Vault" in b), "README-vault", "exec"), namespace)
    env = namespace["Vault"](split="train")
    _, info = env.reset(seed=0)
    assert info["admissible_commands"]
    for _ in range(2):
        *_, info = env.step("read note")
        assert "read note" in info["admissible_commands"]


def test_add_your_own_environment_example_runs(capsys):
    block = next(b for b in _blocks() if "class Vault" in b)
    exec(compile(block, "README-vault", "exec"), {"__name__": "__main__"})
    assert "Open the vault. | True" in capsys.readouterr().out


@pytest.mark.slow
def test_the_vault_and_a_user_policy_run_under_ap_gym_run(tmp_path):
    """The README's module and config, through the CLI with two worker processes."""
    (tmp_path / "my_envs.py").write_text(next(b for b in _blocks() if "class Vault" in b))
    config = yaml.safe_load(next(b for b in re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.S)
                                 if "vault" in b))
    config["out"] = str(tmp_path / "results")
    (tmp_path / "vault.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for command in (["run", str(tmp_path / "vault.yaml")], ["report", str(tmp_path / "results/vault")]):
        done = subprocess.run([sys.executable, "-m", "ap_gym.cli", *command], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "results/vault/summary.json").read_text())
    assert set(summary["final"]) == {f"vault/{p}/seed0" for p in ("last_command", "random", "no_memory")}
    assert summary["final"]["vault/last_command/seed0"]["success_rate"] == 1.0
    report = (tmp_path / "results/vault/report/report.md").read_text()
    assert "last_command" in report and "vault @ tiny-llama(seed=0)" in report


@pytest.mark.slow
@pytest.mark.parametrize("marker", ["WalkthroughPolicy()", "RecordEpisode("])
def test_readme_loops_run(marker, capsys):
    block = next(b for b in _blocks() if marker in b)
    exec(compile(block, "README", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip()


def test_every_figure_the_readme_quotes_is_in_results_md():
    """README quotes only measured figures, and only those RESULTS.md (generated from the
    benchmark scripts' output) holds: every ratio (``1.02x``) and every dated figure."""
    results = (README.parent / "benchmarks" / "RESULTS.md").read_text()
    section = README.read_text().split("## Benchmarks", 1)[1]
    quoted = re.findall(r"(?<![\w.])(\d+\.\d+)x", section)
    assert quoted, "the Benchmarks section quotes no ratio"
    missing = [q for q in quoted if q not in results]
    assert not missing, f"README quotes ratios that RESULTS.md does not hold: {missing}"
    for date in set(re.findall(r"20\d\d-\d\d-\d\d", section)):
        assert date in results, f"README dates a figure {date}, but no RESULTS.md section has that date"


def test_the_trained_agents_figures_are_results_md_figures():
    """The opening's trained agent is quoted from RESULTS.md: every interval and count there
    (``0.55 [0.40, 0.69]``, ``22/40``) is one a benchmark script wrote."""
    results = (README.parent / "benchmarks" / "RESULTS.md").read_text()
    text = README.read_text()
    section = text[text.index("## An agent trained here"):text.index("## Ten lines of Python")]
    quoted = re.findall(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", section) + re.findall(r"\(\d+/\d+\)", section)
    assert len(quoted) >= 6, "the section quotes no measured figure"
    missing = [q for q in quoted if q not in results]
    assert not missing, f"README quotes figures that RESULTS.md does not hold: {missing}"


def test_the_training_config_block_is_a_valid_training_config():
    """The README's ``ap-gym train`` config is one the trainer takes (and the recipe's own)."""
    from ap_gym.training import TrainConfig

    block = next(b for b in re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.S) if "stages:" in b)
    config = TrainConfig.from_dict(yaml.safe_load(block))
    recipe = TrainConfig.from_file(README.parent / "benchmarks" / "train" / "alfworld-sft.yaml")
    assert (config.name, config.agent, config.train_layers) == (recipe.name, recipe.agent, recipe.train_layers)
    assert [s.kind for s in config.stages] == ["sft", "rl"]


def test_the_layout_table_names_every_module():
    """Six modules were missing from the Layout table: every module of the package is named there."""
    text = README.read_text()
    layout = text[text.index("## Layout"):text.index("**Layers.**")]
    package = README.parent / "ap_gym"
    missing = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
               if p.name != "__init__.py" and p.stem not in layout]
    assert not missing, f"modules the README's Layout does not name: {missing}"
