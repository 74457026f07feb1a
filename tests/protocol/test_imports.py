"""Issue 42 item 9: a config's ``imports:`` edges. A module that exits, hangs, is named by a
path, or takes over one of ap-gym's env ids is refused with a clear error."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import pytest

from ap_gym.protocol.config import ConfigError, import_modules

MODULES = {
    "exits_on_import": "import sys\nsys.exit(0)\n",
    "loops_on_import": "while True:\n    pass\n",
    "takes_textworld": ("import gymnasium as gym\nfrom ap_gym.envs.shop import ShopEnv\n"
                        "gym.register('ap_gym/TextWorld-v0', entry_point=ShopEnv)\n"),
}


@pytest.fixture
def modules(tmp_path, monkeypatch):
    for name, text in MODULES.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_module_that_exits_is_refused(modules):
    with pytest.raises(ConfigError, match=r"called sys.exit\(0\)"):
        import_modules(["exits_on_import"])


def test_a_module_that_loops_is_cut_off(modules):
    with pytest.raises(ConfigError, match="did not finish within 1 s"):
        import_modules(["loops_on_import"], timeout_s=1)


def test_a_module_that_loops_is_cut_off_off_the_main_thread_too(modules):
    """No signal reaches a thread (a Ray actor's, a server's worker): the module is first
    imported in a child process under the limit."""
    import threading

    caught: list[BaseException] = []

    def load() -> None:
        try:
            import_modules(["loops_on_import"], timeout_s=3)
        except BaseException as e:  # noqa: BLE001 - the test reads what came out
            caught.append(e)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the import hung the thread"
    assert caught and isinstance(caught[0], ConfigError) and "did not finish within 3 s" in str(caught[0])


def test_a_module_that_registers_a_builtin_env_again_is_refused_and_the_env_kept(modules):
    import ap_gym  # noqa: F401

    before = gym.registry["ap_gym/TextWorld-v0"]
    with pytest.warns(UserWarning), pytest.raises(ConfigError, match="ap_gym/TextWorld-v0 again"):
        import_modules(["takes_textworld"])
    assert gym.registry["ap_gym/TextWorld-v0"] is before


@pytest.mark.parametrize("name", ["../../etc/passwd", "my envs", "", "a..b"])
def test_a_path_or_no_name_is_refused(name):
    with pytest.raises(ConfigError, match="not a module name"):
        import_modules([name])


def test_ap_gym_list_says_so_and_exits_2(modules):
    for module, said in (("exits_on_import", "sys.exit"), ("../../etc/passwd", "not a module name")):
        done = subprocess.run([sys.executable, "-m", "ap_gym.cli", "list", "--imports", module], capture_output=True,
                              text=True, timeout=120, cwd=modules, env={**os.environ, "PYTHONPATH": str(modules)})
        assert done.returncode == 2 and said in done.stderr, done.stderr[-1500:]
