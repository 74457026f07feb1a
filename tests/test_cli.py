"""What a user of ``ap-gym run`` and ``ap-gym report`` sees when the input is bad.

These tests drive the commands a user types (``main([...])`` with a YAML file) and use
nothing else of the package, so they also run against versions of it from before issue
15's fixes, where they fail (``benchmarks/failing_first.py`` shows it): the proof that
each fix is what makes them pass.
"""

from __future__ import annotations

import shutil
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from ap_gym.cli import main
from ap_gym.protocol.results import parse_line

#: Short tiny-backbone episodes (the same options as tests.helpers.TINY_AGENT, inlined so
#: that this module imports nothing but the CLI).
TINY = {"agent": {"action_mode": "generate", "generation": {"max_new_tokens": 3}},
        "memory": {"synthesis": {"max_new_tokens": 6}}}


def write_config(tmp_path: Path, **change: Any) -> Path:
    """A small run (the Shop, the tiny backbone, one short iteration) with ``change`` applied."""
    data = {"name": "t", "benchmarks": ["shop"], "backbone": "tiny", "policies": [{"name": "random"}],
            "iterations": 1, "train_per_iter": 2, "heldout": 3, "max_steps": 3, **change}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize(("change", "named"), [
    ({"policies": [{"name": "random", "optons": {}}]}, "optons"),
    ({"iterations": -1}, "iterations"),
    ({"heldout": -2}, "heldout"),
    ({"retries": -1}, "retries"),
    ({"benchmarks": "shop"}, "benchmarks"),
    ({"seeds": 0}, "seeds"),
    ({"iterations": "two"}, "iterations"),
    ({"max_steps": [3]}, "max_steps"),
    ({"policies": [{"name": "random", "label": "a/b"}]}, "a/b"),
    ({"policies": [{"name": "random", "label": "../up"}]}, "../up"),
    ({"policies": [{"name": "random", "label": "x"}, {"name": "no_memory", "label": "x"}]}, "unique"),
])
def test_a_bad_config_exits_2_naming_the_key_and_writes_nothing(tmp_path, capsys, change, named):
    """Issue 15 items 8 and 10: before, these ran anyway (exit 0, empty or mislabelled
    results), wrote outside ``--out``, or ended in a raw exception."""
    out = tmp_path / "out"
    assert main(["run", str(write_config(tmp_path, **change)), "--out", str(out)]) == 2
    assert named in capsys.readouterr().err
    assert written(out) == []


@pytest.mark.parametrize("name", ["../escaped", "/tmp/ap_gym_absolute_name_test"])
def test_a_run_name_cannot_leave_out(tmp_path, capsys, name):
    """Issue 15 item 8: ``--name ../x`` and an absolute ``--name`` wrote outside ``--out``."""
    shutil.rmtree("/tmp/ap_gym_absolute_name_test", ignore_errors=True)
    out = tmp_path / "out"
    assert main(["run", str(write_config(tmp_path)), "--out", str(out), "--name", name]) == 2
    assert "run name" in capsys.readouterr().err
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/ap_gym_absolute_name_test").exists()
    assert written(out) == []


def test_an_empty_config_file_is_refused(tmp_path, capsys):
    """Issue 15 item 10: an empty YAML started the full default grid."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    out = tmp_path / "out"
    assert main(["run", str(empty), "--out", str(out)]) == 2
    assert "empty" in capsys.readouterr().err
    assert written(out) == []


def test_resume_keeps_the_valid_lines_after_a_damaged_one(tmp_path, capsys, caplog):
    """Issue 15 item 2: one damaged line hid every later line, and resume deleted those
    valid lines and played their episodes again."""
    out = tmp_path / "out"
    cfg = write_config(tmp_path, heldout=5)
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    assert (out / "t" / ".view" / "index.sqlite").exists()  # indexed as it ended: ap-gym view opens it at once
    log = out / "t" / "shop" / "random" / "seed0" / "episodes.jsonl"
    lines = log.read_text().splitlines()
    assert len(lines) >= 4
    middle = len(lines) // 2
    log.write_text("\n".join(lines[:middle] + [lines[middle][:30] + "\x00garbage"] + lines[middle + 1:]) + "\n")
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    kept = log.read_text().splitlines()
    assert kept[:middle] + kept[middle:len(lines) - 1] == lines[:middle] + lines[middle + 1:]  # byte for byte
    replayed = [parse_line(x).header for x in kept[len(lines) - 1:]]  # only the damaged line's episode, played again
    assert [(h.phase, h.index) for h in replayed] == [(parse_line(lines[middle]).header.phase,
                                                       parse_line(lines[middle]).header.index)]
    assert "damaged" in capsys.readouterr().err + caplog.text
    assert log.with_suffix(".jsonl.bad").read_text(errors="replace").startswith(lines[middle][:30])
    from ap_gym.view.index import RunIndex

    ix = RunIndex(out / "t")  # the index the resume left agrees with the file it rewrote
    assert [(r["phase"], r["idx"]) for r in ix.all_rows()] == [(parse_line(x).header.phase,
                                                                parse_line(x).header.index) for x in kept]
    ix.close()


def test_report_names_a_setting_whose_memory_cannot_be_read(tmp_path):
    """Issue 15 item 15: the audit skipped such a setting without a word."""
    out = tmp_path / "out"
    cfg = write_config(tmp_path, policies=[{"name": "abstraction", "options": TINY}], train_per_iter=2, heldout=2)
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    store = out / "t" / "shop" / "abstraction" / "seed0" / "memory.sqlite"
    store.write_bytes(b"\0" * store.stat().st_size)
    assert main(["report", str(out / "t"), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "shop/abstraction/seed0" in text.split("could not be read", 1)[-1]


class SilentServer:
    """Accepts connections and never answers: a hung model server."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        for conn in self.held:
            conn.close()
        self.sock.close()


def test_a_hung_model_server_fails_the_run_at_start_within_its_deadline(tmp_path, capsys):
    """Issue 15 item 4: a server that never answers ``GET /models`` blocked the run at start
    (5 attempts of 120 s each, per call)."""
    server = SilentServer()
    try:
        cfg = write_config(tmp_path, policies=[{"name": "no_memory", "options": {"agent": TINY["agent"]}}])
        code = main(["run", str(cfg), "--out", str(tmp_path / "out"), "--backbone", server.url])
    finally:
        server.close()
    assert code == 2
    err = capsys.readouterr().err
    # the start-up check's own deadline (15 s) cut it, not a call's (120 s, five attempts)
    assert server.url.rsplit("/v1", 1)[0] in err and "at most 15 s each" in err


def test_list_shows_a_users_env_and_policy_with_imports(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_things.py").write_text(
        "import gymnasium as gym\n"
        "from ap_gym.envs import StartResult, StepResult, TextEnv\n"
        "from ap_gym.policies import BasePolicy, register_policy\n\n"
        "class Door(TextEnv):\n"
        "    benchmark = 'door'\n"
        "    def _task_ids(self, split): return ['door/1']\n"
        "    def task_family(self, task_id): return 'door'\n"
        "    def _start(self, task_id, options): return StartResult('A door.', 'Open it.')\n"
        "    def _advance(self, action): return StepResult('It opens.', 1.0, won=True)\n"
        "    def walkthrough(self, task_id): return ['open door']\n\n"
        "@register_policy('knock')\n"
        "class Knock(BasePolicy):\n"
        "    '''Knocks first.'''\n"
        "    def act(self, observation, info): return 'knock'\n\n"
        "if 'mine/Door-v0' not in gym.registry:\n"
        "    gym.register('mine/Door-v0', entry_point=Door)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["list", "--imports", "my_things"]) == 0
    out = capsys.readouterr().out
    assert "door\tmine/Door-v0\tcan: walkthrough" in out and "policy knock\tneeds: -\tKnocks first." in out


@pytest.mark.parametrize("flag", ["--backbone", "--embedder"])
def test_a_url_with_credentials_is_refused_and_never_written_or_shown(tmp_path, capsys, flag):
    """Issue 42 item 4: user:password@ in a URL bypassed the https-or-loopback rule (sent as
    Basic auth in clear text to any host) and was written to config.json, shown by the
    viewer and printed in start-up errors."""
    from ap_gym.backbones import OpenAIBackbone
    from ap_gym.backbones.embedders import make_embedder
    from ap_gym.errors import BackboneError

    cfg = write_config(tmp_path)
    out = tmp_path / "out"
    url = "http://bob:s3cret@203.0.113.5:8000/v1"
    assert main(["run", str(cfg), "--out", str(out), flag, url]) == 2
    said = capsys.readouterr()
    assert "credentials" in said.err and "AP_GYM_API_KEY" in said.err
    assert "s3cret" not in said.out + said.err and written(out) == []
    for build in (OpenAIBackbone, make_embedder):
        with pytest.raises(BackboneError) as refused:
            build("https://bob:s3cret@127.0.0.1:9/v1")
        assert "credentials" in str(refused.value) and "s3cret" not in str(refused.value)


@pytest.mark.parametrize(("command", "after_s"), [
    (["demo", "--backbone", "tiny", "--tasks", "1", "--benchmarks", "textworld"], 4.0),
    (["view", "RUN", "--port", "0"], 0.05),  # while the viewer indexes the run and imports its server
    (["view", "RUN", "--port", "0"], 1.5),  # around uvicorn's start (a Ctrl-C there was once lost)
])
def test_ctrl_c_ends_a_command_with_one_line_and_no_traceback(tmp_path, command, after_s):
    """Issue 42 item 7: Ctrl-C in ap-gym demo printed KeyboardInterrupt tracebacks, and so did
    Ctrl-C in the seconds before ap-gym view had imported its server."""
    import os
    import signal
    import subprocess
    import sys

    from tests.helpers import synthetic_run

    run = synthetic_run(tmp_path, "r", {"p": [True]})
    argv = [str(run) if part == "RUN" else part for part in command]
    argv += ["--out", str(tmp_path / "out")] if command[0] == "demo" else []
    # the Ctrl-C comes `after_s` after ap-gym's own code starts (a timer in the child), not after
    # the interpreter's start: on a loaded machine a sleep here landed in Python's own startup,
    # which no program can make quiet
    child = ("import os, signal, sys, threading\nfrom ap_gym.cli import main\n"
             f"threading.Timer({after_s}, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
             f"sys.exit(main({argv!r}))\n")
    def as_from_a_terminal() -> None:
        # a child inherits an ignored or blocked SIGINT across exec: under pytest-xdist the worker
        # that runs this may have one (the view hung in a full suite, Ctrl-C ignored, and passed
        # alone); a user's shell starts ap-gym with SIGINT at its default, as here
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"}, preexec_fn=as_from_a_terminal)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"Ctrl-C did not stop `ap-gym {' '.join(command)}` (SIGINT in this test process: "
                    f"{signal.getsignal(signal.SIGINT)}, blocked: {signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])}); "
                    f"stdout {out[-300:]!r} stderr {err[-1500:]!r}")
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert proc.returncode in (0, 130)


def test_the_demo_without_a_trained_agent_says_how_to_make_one(tmp_path, monkeypatch, capsys):
    from ap_gym.demo import trained_demo

    monkeypatch.chdir(tmp_path)  # no results/train here
    assert trained_demo(out=tmp_path / "results") == 0
    said = capsys.readouterr().out
    assert "ap-gym train benchmarks/train/alfworld-sft.yaml" in said and "2 CPU cores" in said


@pytest.mark.slow
def test_the_demo_shows_a_trained_agent_beside_the_untrained_model_and_the_rule(tmp_path, capsys):
    from ap_gym.backbones.hf import TransformersBackbone, tiny_llama
    from ap_gym.demo import trained_demo
    from ap_gym.training import publish_checkpoint

    model, tokenizer = tiny_llama(seed=0)
    checkpoint = publish_checkpoint(tmp_path / "ckpt", TransformersBackbone(model, tokenizer=tokenizer).save).path
    assert trained_demo(out=tmp_path / "results", checkpoint=str(checkpoint), tasks=2, max_steps=3) == 0
    said = capsys.readouterr().out
    for row in ("trained model", "untrained model", "rule"):
        assert row in said, said[-2000:]
