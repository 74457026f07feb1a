"""Fault injection: replay classes of faults and bad input, and tally how each ended.

Every fault is one function that provokes it against the real component (stores on disk,
run configs, the results files, a misbehaving HTTP server, ``ap-gym serve``, ScienceWorld's
JVM) and checks what must hold afterwards. Outcomes:

* ``handled``: the right result (a bad episode recorded as an infrastructure failure, a
  damaged line skipped, a dripping server cut off);
* ``clear error``: an ap-gym error (or an HTTP 4xx) that says what went wrong;
* ``crash``: any other exception; ``hang``: no answer within the fault's time limit;
* ``data loss``: something that was stored is gone or changed;
* ``silently wrong``: it went on as if nothing were wrong (a key sent in clear, a model
  substituted, a fault named as another).

Target: 0 crashes, 0 hangs, 0 data loss, 0 silently wrong.

    python benchmarks/faults.py [--only stores] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import socket
import sqlite3
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from ap_gym.errors import APGymError

TMP = Path(tempfile.mkdtemp(prefix="ap_gym_faults_"))
FAULTS: list[tuple[str, str, Callable[[], str], float]] = []


def fault(category: str, name: str, limit_s: float = 60.0) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        FAULTS.append((category, name, fn, limit_s))
        return fn

    return register


@dataclass
class Outcome:
    category: str
    name: str
    outcome: str
    detail: str
    seconds: float


def attempt(category: str, name: str, fn: Callable[[], str], limit_s: float) -> Outcome:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except APGymError as e:
            box["result"] = f"clear error|{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        except BaseException as e:  # anything else is a crash
            box["result"] = f"crash|{type(e).__name__}: {e}"[:200]

    t = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    seconds = time.monotonic() - t
    if thread.is_alive():
        # where it is stuck, so that a hang names its cause
        frame = sys._current_frames().get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)[-6:]) if frame else "(no frame)"
        print(f"hang: {category}: {name}; the thread is stuck at:\n{stack}", file=sys.stderr, flush=True)
        return Outcome(category, name, "hang", f"no answer within {limit_s:g} s", seconds)
    outcome, _, detail = box["result"].partition("|")
    return Outcome(category, name, outcome, detail, seconds)


# ------------------------------------------------------------------ configs
def _config(**change: Any) -> dict[str, Any]:
    return {"name": "f", "benchmarks": ["textworld"], "backbone": "tiny", "out": str(TMP / "runs"),
            "policies": ["no_memory"], "iterations": 1, **change}


for _name, _change in [
    ("typo in a policy key", {"policies": [{"name": "trajectory", "optons": {}}]}),
    ("negative iterations", {"iterations": -1}), ("zero held-out", {"heldout": 0}), ("retries -1", {"retries": -1}),
    ("benchmarks as a string", {"benchmarks": "textworld"}), ("seeds: 0", {"seeds": 0}),
    ("iterations: two", {"iterations": "two"}), ("unknown executor", {"executor": "dask"}),
    ("unknown benchmark", {"benchmarks": ["nethack"]}), ("unknown policy", {"policies": ["telepathy"]}),
    ("label with /", {"policies": [{"name": "trajectory", "label": "a/b"}]}),
    ("label ..", {"policies": [{"name": "trajectory", "label": ".."}]}), ("name ../x", {"name": "../x"}),
    ("absolute name", {"name": "/tmp/x"}), ("duplicate labels", {"policies": ["trajectory", "trajectory"]}),
    ("missing import", {"imports": ["no_such_module"]}), ("unknown key", {"surprise": 1}),
    ("option of the wrong type", {"workers": "many"}), ("backbones empty", {"backbones": {}}),
]:
    def _refused(change: dict[str, Any] = _change) -> str:
        from ap_gym.protocol import RunConfig

        RunConfig.from_dict(_config(**change))
        return "crash|accepted"

    fault("configs", _name)(_refused)


@fault("configs", "empty YAML file")
def _empty_yaml() -> str:
    from ap_gym.protocol import RunConfig

    path = TMP / "empty.yaml"
    path.write_text("")
    RunConfig.from_file(path)
    return "crash|accepted"


# ------------------------------------------------------------------- stores
_MEMORY: dict[str, Any] = {}


def _policy(name: str = "trajectory", path: str = "live") -> Any:
    from ap_gym.backbones import SentenceTransformerEmbedder, make_backbone
    from ap_gym.policies import make_policy

    _MEMORY.setdefault("backbone", make_backbone("tiny"))
    _MEMORY.setdefault("embedder", SentenceTransformerEmbedder())
    return make_policy(name, _MEMORY["backbone"], embedder=_MEMORY["embedder"], db_path=TMP / path / "m.sqlite",
                       agent={"action_mode": "generate", "generation": {"max_new_tokens": 2}})


def _fill(policy: Any, n: int) -> None:
    for i in range(n):
        policy.trajectories.add(task_id=f"t{i}", family="f", instruction=f"task {i}", steps=[], success=bool(i % 2),
                                score=None, embedding=np.eye(policy.memory.embedder.dim, dtype=np.float32)[i],
                                iteration=0)


def _snapshot_fault(damage: Callable[[Path], None], other_design: bool = False) -> str:
    key = f"{damage.__name__}{other_design}"
    live = _policy(path=f"live_{key}")
    _fill(live, 25)
    source = _policy("anti_persistence", f"src_{key}") if other_design else live
    if other_design:
        _fill(source, 3)
    snapshot = source.save_state(TMP / f"snap_{key}")
    damage(snapshot / "memory.sqlite")
    try:
        live.load_state(snapshot)
    except APGymError as e:
        if len(live.trajectories) != 25:
            return "data loss|the live memory changed"
        live.close()
        return f"clear error|{type(e).__name__}: {str(e)[:120]}"
    return "data loss|a bad snapshot replaced the live memory"


def _zeroed(path: Path) -> None:
    path.write_bytes(b"\0" * 8192)


def _newer(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")


def _other_dim(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value='768' WHERE key='embedding_dim'")


def _untouched(path: Path) -> None:
    pass


fault("stores", "zeroed snapshot")(lambda: _snapshot_fault(_zeroed))
fault("stores", "snapshot of a newer schema")(lambda: _snapshot_fault(_newer))
fault("stores", "snapshot of another embedder's dimension")(lambda: _snapshot_fault(_other_dim))
fault("stores", "snapshot of another design")(lambda: _snapshot_fault(_untouched, other_design=True))


def _damaged_store(sql: str) -> Callable[[], str]:
    def run() -> str:
        from ap_gym.memory import MemoryDB, TrajectoryStore

        path = TMP / f"damaged_{abs(hash(sql))}.sqlite"
        db = MemoryDB(path, embedding_dim=3)
        TrajectoryStore(db).add(task_id="t", family="f", instruction="i", steps=[], success=True, score=1.0,
                                embedding=np.array([1, 0, 0], np.float32), iteration=0)
        db.close()
        if sql == "flip":
            data = bytearray(path.read_bytes())
            for offset in range(4196, len(data), 997):
                data[offset] ^= 0xFF
            path.write_bytes(bytes(data))
        else:
            with sqlite3.connect(path) as conn:
                conn.executescript(sql)
        before = path.read_bytes()
        db = MemoryDB(path, embedding_dim=3)
        store = TrajectoryStore(db)
        store.get(store.ids())
        store.nearest(np.array([1, 0, 0], np.float32), 1)
        db.close()
        return "handled|still readable" if path.read_bytes() == before or sql != "flip" else "handled|read"

    return run


fault("stores", "dropped outcome_log")(_damaged_store("DROP TABLE outcome_log"))
fault("stores", "meta with other columns")(_damaged_store("DROP TABLE meta; CREATE TABLE meta (k, v)"))
fault("stores", "dropped column")(_damaged_store("ALTER TABLE trajectories DROP COLUMN mode"))
fault("stores", "flipped bits on every page")(_damaged_store("flip"))


@fault("stores", "index file of another database")
def _foreign_index() -> str:
    from ap_gym.memory import MemoryDB, TrajectoryStore

    vecs = {}
    for name, seed in (("a", 1), ("b", 2)):
        db = MemoryDB(TMP / f"idx_{name}.sqlite", embedding_dim=16, ann_threshold=20)
        store = TrajectoryStore(db)
        rng = np.random.default_rng(seed)
        vecs[name] = rng.standard_normal((40, 16)).astype(np.float32)
        vecs[name] /= np.linalg.norm(vecs[name], axis=1, keepdims=True)
        for v in vecs[name]:
            store.add(task_id="t", family="f", instruction="i", steps=[], success=True, score=1.0, embedding=v,
                      iteration=0)
        store.nearest(vecs[name][0], 1)
        db.close()
    for suffix in (".trajectories.faiss", ".trajectories.faiss.json"):
        shutil.copyfile(f"{TMP / 'idx_a.sqlite'}{suffix}", f"{TMP / 'idx_b.sqlite'}{suffix}")
    db = MemoryDB(TMP / "idx_b.sqlite", readonly=True, embedding_dim=16, ann_threshold=20)
    hits = TrajectoryStore(db).nearest(vecs["b"][5], 1)
    db.close()
    return "handled|rebuilt from its own rows" if hits[0][0] == 6 else "data loss|searched another database's index"


# ------------------------------------------------------------------ results
@fault("results", "a damaged line in the middle of episodes.jsonl")
def _damaged_line() -> str:
    from ap_gym.protocol.results import EpisodeLine, EpisodeLog, load_episodes
    from ap_gym.types import Episode, Termination

    directory = TMP / "run" / "b" / "p" / "seed0"
    directory.mkdir(parents=True)
    log = EpisodeLog(directory / "episodes.jsonl")
    for i in range(5):
        ep = Episode(task_id=f"t{i}", task_family="f", instruction="", initial_observation="", steps=(),
                     success=False, score=None, max_score=None, termination=Termination.LOST, seed=0)
        log.append(EpisodeLine.of("eval", 0, i, "b", "p", 0, 1, ep))
    lines = (directory / "episodes.jsonl").read_text().splitlines()
    lines[2] = lines[2][:30]
    (directory / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    kept = [x.header.index for x in load_episodes(TMP / "run")]
    EpisodeLog(directory / "episodes.jsonl")  # as a resume opens it
    again = [x.header.index for x in load_episodes(TMP / "run")]
    return "handled|valid lines kept" if kept == again == [0, 1, 3, 4] else f"data loss|kept {kept} then {again}"


# ---------------------------------------------------------------- backbones
class _BadServer:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            if self.mode == "drip":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
                for _ in range(100):
                    conn.sendall(b" ")
                    time.sleep(1)
            elif self.mode == "garbage":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json!")
            else:
                time.sleep(120)
        except OSError:
            pass
        finally:
            conn.close()


def _backbone_fault(mode: str, at_start: bool = False) -> Callable[[], str]:
    def run() -> str:
        from ap_gym.backbones import OpenAIBackbone

        server = _BadServer(mode)
        if at_start:
            OpenAIBackbone(server.url, check_deadline_s=1.0)
        else:
            OpenAIBackbone(server.url, model="m", deadline_s=1.0, retries=1, backoff_s=0.01).generate(
                [{"role": "user", "content": "hi"}])
        return "crash|no error"

    return run


fault("backbones", "a server that sends one byte a second", 30)(_backbone_fault("drip"))
fault("backbones", "a silent server", 30)(_backbone_fault("silent"))
fault("backbones", "a server that answers garbage", 30)(_backbone_fault("garbage"))
fault("backbones", "a hanging /models at start", 30)(_backbone_fault("silent", at_start=True))


@fault("backbones", "an unreachable server")
def _unreachable() -> str:
    from ap_gym.backbones import OpenAIBackbone

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    OpenAIBackbone(f"http://127.0.0.1:{port}/v1", model="m", retries=1, backoff_s=0.01).generate(
        [{"role": "user", "content": "hi"}])
    return "crash|no error"


# -------------------------------------------------------------------- server
def _serve() -> str:
    if "server" not in _MEMORY:
        from ap_gym.backbones import make_backbone
        from ap_gym.backbones.server import BackboneServer

        _MEMORY["server"] = BackboneServer(make_backbone("tiny"), port=0, max_tokens_cap=64, body_timeout_s=2).start()
    return _MEMORY["server"].url


_MSGS = [{"role": "user", "content": "go north"}]
for _name, _body in [
    ("a list body", ["x"]), ("a string body", "x"), ("a message without content", {"messages": [{"role": "user"}]}),
    ("seed: abc", {"messages": _MSGS, "seed": "abc"}), ("max_tokens 0", {"messages": _MSGS, "max_tokens": 0}),
    ("max_tokens -5", {"messages": _MSGS, "max_tokens": -5}), ("max_tokens 8000", {"messages": _MSGS, "max_tokens": 8000}),
    ("no messages", {"messages": []}), ("temperature -1", {"messages": _MSGS, "temperature": -1}),
    ("an unknown role", {"messages": [{"role": "wizard", "content": "x"}]}),
]:
    def _bad_request(body: Any = _body) -> str:
        response = httpx.post(_serve() + "/chat/completions", json=body, timeout=30)
        if 400 <= response.status_code < 500:
            return f"clear error|HTTP {response.status_code}: {response.json()['error']['message'][:80]}"
        return f"crash|HTTP {response.status_code}"

    fault("server", _name)(_bad_request)


@fault("server", "Content-Length larger than the body", 30)
def _short_body() -> str:
    host, port = _serve().split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
        answer = s.recv(4096)
    status = answer.split(b"\r\n")[0].decode()
    return f"clear error|{status}" if answer.startswith(b"HTTP/1.1 408") else f"crash|{status or 'no answer'}"


# ---------------------------------------------------------------------- envs
for _name, _bad in [("a string score", "10"), ("a NaN score", float("nan")), ("an infinite score", float("inf"))]:
    def _bad_score(bad: Any = _bad) -> str:
        import ap_gym
        from ap_gym.envs import StartResult, StepResult, TextEnv
        from ap_gym.policies import RandomPolicy

        class Broken(TextEnv):
            def _task_ids(self, split: str) -> list[str]:
                return ["x/1"]

            def task_family(self, task_id: str) -> str:
                return "x"

            def _start(self, task_id: str, options: Any) -> StartResult:
                return StartResult("start", "do it", 0.0, 1.0, ["wait"])

            def _advance(self, action: str) -> StepResult:
                return StepResult("ok", bad, admissible_commands=["wait"])

        ep = ap_gym.run_episode(Broken(), RandomPolicy(seed=0), task_id="x/1", max_steps=3)
        ok = ep.termination.value == "infrastructure_failure" and "finite" in (ep.error or "")
        return "handled|an infrastructure failure" if ok else f"crash|{ep.termination.value}"

    fault("envs", _name)(_bad_score)


def _engine_fault(env_id: str, engine_pid: Callable[[Any], int], action: str, how: str) -> str:
    """Kill (a native crash) or stop (a hang) an env's engine mid-episode: the step must
    raise EnvInfrastructureError and the next reset must bring a new engine that steps."""
    import os
    import signal

    import gymnasium as gym

    import ap_gym

    env = gym.make(env_id, split="test", engine_timeout_s=3)
    try:
        task = env.unwrapped.task_ids("test")[0]
        env.reset(options={"task_id": task})
        os.kill(engine_pid(env.unwrapped), signal.SIGSTOP if how == "stopped" else signal.SIGKILL)
        try:
            env.step(action)
        except ap_gym.EnvInfrastructureError:
            env.reset(options={"task_id": task})
            env.step(action)
            return "handled|EnvInfrastructureError, then a new engine"
        return "crash|the step returned"
    finally:
        env.close()


for _how in ("killed", "stopped"):
    fault("envs", f"a {_how} ScienceWorld JVM", 120)(
        lambda how=_how: _engine_fault("ap_gym/ScienceWorld-v0", lambda e: e._engine._gateway.java_process.pid,
                                       "look around", how))
    fault("envs", f"a {_how} ALFWorld engine", 120)(
        lambda how=_how: _engine_fault("ap_gym/ALFWorld-v0", lambda e: e._engine.pid, "look", how))


_PLAY_ESCAPES = """
import json, sys
import gymnasium as gym
import ap_gym
env = gym.make("ap_gym/TextWorld-v0", games=[sys.argv[1]])
for action in json.loads(sys.argv[2]):
    env.reset(options={"task_id": "game"})
    env.step(action)
env.close()
"""


@fault("envs", "TextWorld actions holding interpreter escapes and newlines", 300)
def _interpreter_escapes() -> str:
    """What an agent may type: a backslash reached jericho's dumb-frotz as one of its own
    escapes (a segfault, or a wait on the terminal). Played in a child process, so that
    a crash is counted, not suffered."""
    import subprocess

    import gymnasium as gym

    env = gym.make("ap_gym/TextWorld-v0", split="test")
    try:
        game = env.unwrapped.game_path(env.unwrapped.task_ids("test")[0])
    finally:
        env.close()
    actions = ["\\U", "\\q", "\\help", "\\R", "\\P", "look \\X", "go\nnorth"]
    try:
        proc = subprocess.run([sys.executable, "-c", _PLAY_ESCAPES, str(game), json.dumps(actions)],
                              capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "hang|the interpreter waited on its terminal"
    if proc.returncode != 0:
        return f"crash|the game process ended with exit {proc.returncode}"
    return "handled|each reached the game as one plain command"


# ------------------------------------------------------------------ runs killed and resumed
def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid``."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            for child in Path(f"/proc/{p}/task/{p}/children").read_text().split():
                found.add(int(child))
                todo.append(int(child))
    return found


def _kill_and_resume(sig: int, workers: int) -> str:
    """A CLI run killed with ``sig`` after its first held-out episodes, then resumed: the
    summary must equal an uninterrupted run's, and no process of the killed run may live on."""
    import os
    import subprocess
    import sys

    import yaml

    from ap_gym.protocol import RunConfig, run

    base = TMP / f"kill_{sig}_{workers}"
    agent = {"agent": {"action_mode": "generate", "generation": {"max_new_tokens": 3}},
             "memory": {"synthesis": {"max_new_tokens": 6}}}
    data = {"name": "k", "benchmarks": ["textworld"], "backbone": "tiny", "out": str(base / "killed"),
            "policies": [{"name": "anti_persistence", "options": agent}], "seeds": [0], "iterations": 2,
            "train_per_iter": 3, "heldout": 3, "max_steps": 3, "workers": workers}
    base.mkdir(parents=True)
    (base / "cfg.yaml").write_text(yaml.safe_dump(data))
    cmd = [sys.executable, "-m", "ap_gym.cli", "run", str(base / "cfg.yaml")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    episodes = base / "killed/k/textworld/anti_persistence/seed0/episodes.jsonl"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if episodes.exists() and sum('"eval"' in x for x in episodes.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    if proc.poll() is not None:
        return "crash|the run ended before the kill point"
    descendants = _children(proc.pid)
    os.kill(proc.pid, sig)
    proc.wait(60)
    time.sleep(2)
    alive = {p for p in descendants if Path(f"/proc/{p}").exists()
             and "zombie" not in Path(f"/proc/{p}/status").read_text().lower()}
    if alive:
        return f"crash|{len(alive)} process(es) of the killed run still alive"
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    resumed = json.loads((base / "killed/k/summary.json").read_text())
    clean = run(RunConfig.from_dict({**data, "out": str(base / "clean")}), progress=False)
    if resumed != json.loads((clean / "summary.json").read_text()):
        return "data loss|the resumed summary differs from an uninterrupted run's"
    return f"handled|resumed to the uninterrupted run's summary; {len(descendants)} child process(es) ended with it"


for _sig, _signame in ((9, "SIGKILL"), (15, "SIGTERM"), (2, "SIGINT")):
    for _workers in (1, 2):
        fault("runs", f"driver {_signame} mid-run, workers: {_workers}, then resume", 600)(
            lambda s=_sig, w=_workers: _kill_and_resume(s, w))


# ------------------------------------------------------- exposure, substitutions (issue 32)
def _view_run() -> Path:
    """A small real run (Shop, the tiny model), made once, for the viewer's faults."""
    if "view_run" not in _MEMORY:
        from ap_gym.protocol import RunConfig, run

        cfg = {"name": "v", "benchmarks": ["shop"], "backbone": "tiny", "out": str(TMP / "view"),
               "policies": [{"name": "no_memory", "options": {"agent": {"action_mode": "generate",
                                                                        "generation": {"max_new_tokens": 3}}}}],
               "iterations": 1, "heldout": 3, "max_steps": 3}
        _MEMORY["view_run"] = run(RunConfig.from_dict(cfg), progress=False)
    return _MEMORY["view_run"]


def _client(**options: Any) -> Any:
    from fastapi.testclient import TestClient

    from ap_gym.view import Viewer, create_app

    base = options.pop("base_url", "http://127.0.0.1")
    return TestClient(create_app(Viewer([_view_run()]), **options), base_url=base)


@fault("exposure", "ap-gym view --host 0.0.0.0 without a key")
def _view_exposed() -> str:
    from ap_gym.view import serve

    try:
        serve([_view_run()], host="0.0.0.0")
    except ValueError as e:
        return f"clear error|{str(e)[:100]}"
    return "silently wrong|served every run with no key"


@fault("exposure", "the viewer asked under another host name (DNS rebinding)")
def _view_rebinding() -> str:
    status = _client(base_url="http://evil.example").get("/api/runs").status_code
    return f"handled|HTTP {status}" if status == 421 else f"silently wrong|HTTP {status}"


@fault("exposure", "a keyed viewer asked without its key")
def _view_keyless() -> str:
    client = _client(api_key="k3y", hosts=None, base_url="http://10.0.0.5")
    codes = [client.get(p).status_code for p in ("/api/runs", "/", "/api/run/0/episodes")]
    return "handled|401 everywhere" if set(codes) == {401} else f"silently wrong|{codes}"


@fault("exposure", "ap-gym serve --api-key: /docs and /openapi.json without the key")
def _serve_docs() -> str:
    from fastapi.testclient import TestClient

    from ap_gym.backbones import make_backbone
    from ap_gym.backbones.server import build_app
    from ap_gym.backbones.serving import PromptScorer

    client = TestClient(build_app(PromptScorer(make_backbone("tiny")), "tiny", api_key="k3y"))
    codes = [client.get(p).status_code for p in ("/docs", "/openapi.json", "/v1/models")]
    return "handled|401" if set(codes) == {401} else f"silently wrong|{codes}"


@fault("exposure", "$OPENAI_API_KEY and a plain-http server on another host")
def _key_in_clear() -> str:
    import os
    import warnings

    from ap_gym.backbones import OpenAIBackbone

    os.environ["OPENAI_API_KEY"] = "sk-faults"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client = OpenAIBackbone("http://203.0.113.9:8000/v1", "m")
    finally:
        del os.environ["OPENAI_API_KEY"]
    sent = "authorization" in client._client.headers
    return "silently wrong|the key would be sent" if sent else "handled|not sent, with a warning"


@fault("exposure", "ap-gym serve bound to 127.0.0.2 (loopback)")
def _serve_loopback_2() -> str:
    from ap_gym.net import is_loopback

    return "handled|loopback" if is_loopback("127.0.0.2") else "crash|refused as beyond this machine"


@fault("exposure", "ap-gym view --static into a directory that is not a bundle")
def _static_overwrite() -> str:
    from ap_gym.view import write_static

    site = TMP / "site"
    (site / "data").mkdir(parents=True)
    (site / "index.html").write_text("mine")
    (site / "data" / "precious.csv").write_text("1,2")
    try:
        write_static([_view_run()], site)
    except FileExistsError as e:
        intact = (site / "index.html").read_text() == "mine" and (site / "data" / "precious.csv").exists()
        return f"clear error|{str(e)[:90]}" if intact else "data loss|refused, but after touching the files"
    return "data loss|wrote over it"


@fault("substitutions", "a backbone label with an empty URL")
def _empty_url() -> str:
    from ap_gym.protocol import RunConfig

    RunConfig.from_dict(_config(backbones={"paper-model": ""}))
    return "silently wrong|accepted"


@fault("substitutions", "a second registration of an existing policy name")
def _second_registration() -> str:
    from ap_gym.policies import BasePolicy, register_policy

    class Impostor(BasePolicy):
        def act(self, observation: str, info: Any) -> str:
            return "look"

    try:
        register_policy("no_memory")(Impostor)
    except ValueError as e:
        return f"clear error|{str(e)[:90]}"
    return "silently wrong|replaced no_memory"


class _BadEmbedder:
    identity = "bad"

    def __init__(self, rows: np.ndarray) -> None:
        self.rows, self.dim = rows, 4

    def embed(self, texts: Any) -> np.ndarray:
        return np.repeat(self.rows[None, :], len(texts), axis=0)


for _name, _rows in [("an embedder returning NaN vectors", np.array([np.nan, 0, 0, 1], np.float32)),
                     ("an embedder returning the wrong dimension", np.ones(7, np.float32))]:
    def _bad_embeddings(rows: np.ndarray = _rows) -> str:
        from ap_gym.backbones.embedders import checked_vectors
        from ap_gym.memory import Memory

        checked_vectors(np.asarray(_BadEmbedder(rows).embed(["x"])), 4, "bad embedder")
        memory = Memory(TMP / f"emb_{abs(hash(rows.tobytes()))}.sqlite", _BadEmbedder(rows), seed=0)
        memory.embed_task("do it", "a room")
        return "silently wrong|accepted"

    fault("substitutions", _name)(_bad_embeddings)


@fault("substitutions", "a frozen-skills file edited between a kill and the resume", 300)
def _edited_skills() -> str:
    from ap_gym.protocol import RunConfig, run

    skills = TMP / "skills.txt"
    skills.write_text("Look before you act.\n")
    cfg = _config(benchmarks=["shop"], out=str(TMP / "frozen"), heldout=1, train_per_iter=1, max_steps=2,
                  policies=[{"name": "anti_persistence", "options": {
                      "frozen_abstractions": str(skills), "agent": {"action_mode": "generate",
                                                                   "generation": {"max_new_tokens": 3}},
                      "memory": {"synthesis": {"max_new_tokens": 4}}}}])
    run(RunConfig.from_dict(cfg), progress=False)
    skills.write_text("Buy the first thing you see.\n")
    run(RunConfig.from_dict(cfg), progress=False)
    return "silently wrong|resumed with other skills"


@fault("substitutions", "a damaged config.json on resume")
def _damaged_config() -> str:
    from ap_gym.protocol import RunConfig, run

    run_dir = _view_run()
    saved = (run_dir / "config.json").read_text()
    (run_dir / "config.json").write_text("{half")
    try:
        cfg = RunConfig.from_dict(json.loads(saved)["config"])
        run(cfg, progress=False)
    except APGymError as e:
        named = "damaged" in str(e)
        return f"clear error|{str(e)[:90]}" if named else f"silently wrong|{str(e)[:90]}"
    finally:
        (run_dir / "config.json").write_text(saved)
    return "silently wrong|resumed over it"


# --------------------------------------------------------------- served: the cause named
class _Scripted:
    """Answers every request with one canned response: (status, headers, body), or None
    (the connection closed without an answer)."""

    def __init__(self, responses: list[Any]) -> None:
        self.responses = list(responses)
        self.times: list[float] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                self.times.append(time.monotonic())
                answer = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
                if answer is None:
                    continue
                status, headers, body = answer
                body = body if isinstance(body, bytes) else json.dumps(body).encode()
                extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
                             f"{extra}\r\n".encode() + body)


_MODELS = (200, {}, {"data": [{"id": "m"}]})
for _name, _answer in [("bad JSON", (200, {}, b"{oops")), ("an empty body", (200, {}, b"")),
                       ("HTTP 400", (400, {}, {"error": "bad"})), ("HTTP 429", (429, {}, {"error": "slow"})),
                       ("HTTP 500", (500, {}, {"error": "boom"})), ("closed mid-response", None),
                       ("string token ids", (200, {}, {"tokens": "abc"})),
                       ("the wrong shape", (200, {}, {"choices": 3}))]:
    def _probe_names_it(answer: Any = _answer, name: str = _name) -> str:
        from ap_gym.backbones import OpenAIBackbone

        server = _Scripted([_MODELS, _MODELS, answer])
        client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01, check_deadline_s=2)
        try:
            client.check(scoring=True)
        except APGymError as e:
            text = str(e)
            generic = "what it answered: no answer" in text
            return f"silently wrong|{text[:90]}" if generic else f"clear error|{text[:110]}"
        return "silently wrong|accepted"

    fault("served", f"the scoring probe against {_name}", 30)(_probe_names_it)


@fault("served", "Retry-After: 2 on a 429", 30)
def _retry_after() -> str:
    from ap_gym.backbones import OpenAIBackbone

    server = _Scripted([(429, {"Retry-After": "2"}, {"error": "slow"}), _MODELS])
    OpenAIBackbone(server.url, retries=2, backoff_s=0.01)
    waited = server.times[1] - server.times[0]
    return f"handled|waited {waited:.1f} s" if waited >= 1.8 else f"silently wrong|retried after {waited:.2f} s"


@fault("served", "an outage during the start-up probe, then the server back", 30)
def _outage_then_back() -> str:
    from ap_gym.backbones import OpenAIBackbone

    tokens = (200, {}, {"tokens": [5, 6]})
    logprobs = (200, {}, {"choices": [{"index": 0, "prompt_logprobs": [None, {"6": {"logprob": -1.0}},
                                                                          {"5": {"logprob": -2.0}},
                                                                          {"6": {"logprob": -0.5}}]}]})
    server = _Scripted([_MODELS, _MODELS, None, None, _MODELS, tokens, logprobs])
    client = OpenAIBackbone(server.url, retries=1, backoff_s=0.01, check_deadline_s=2)
    with contextlib.suppress(APGymError):
        client.check(scoring=True)
    method = client.check(scoring=True)["scoring"]
    return "handled|probed again once back" if method else "silently wrong|kept 'cannot score'"


@fault("served", "NaN log-probabilities from a server", 30)
def _nan_scores() -> str:
    from ap_gym.backbones import OpenAIBackbone

    tokens = (200, {}, {"tokens": [5]})
    nan = (200, {}, b'{"choices": [{"index": 0, "prompt_logprobs": [null, {"5": {"logprob": NaN}}]}]}')
    server = _Scripted([_MODELS, tokens, tokens, nan])
    client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01)
    client._scoring = "prompt_logprobs"
    client.score([{"role": "user", "content": "x"}], ["look"])
    return "silently wrong|scored NaN"


# ---------------------------------------------------------------- bad input, hangs
@fault("viewer", "damaged episode lines (no benchmark, a string seed, policy_info a list)")
def _view_damaged_lines() -> str:
    run_dir = TMP / "view_damaged"
    shutil.copytree(_view_run(), run_dir, ignore=shutil.ignore_patterns(".view"))
    episodes = next(run_dir.rglob("episodes.jsonl"))
    first = json.loads(episodes.read_text().splitlines()[0])
    bad = [{k: v for k, v in first.items() if k != "benchmark"}, {**first, "seed": "x"},
           {**first, "policy_info": [1]}, {**first, "usage": "lots"}]
    episodes.write_text(episodes.read_text() + "".join(json.dumps(b) + "\n" for b in bad))
    from fastapi.testclient import TestClient

    from ap_gym.view import Viewer, create_app

    client = TestClient(create_app(Viewer([run_dir])), base_url="http://127.0.0.1")
    rows = client.get("/api/run/0/episodes", params={"per_page": 1000}).json()["rows"]
    codes = {client.get(f"/api/run/0/episode/{r['id']}").status_code for r in rows}
    return "handled|shown without the damaged lines" if codes == {200} else f"crash|{codes}"


@fault("viewer", "a huge page number and episode id")
def _view_huge() -> str:
    client = _client()
    codes = [client.get(p).status_code for p in ("/api/run/0/episodes?page=99999999999999999999",
                                                 f"/api/run/0/episode/{10**30}")]
    return f"clear error|HTTP {codes}" if all(400 <= c < 500 for c in codes) else f"crash|HTTP {codes}"


@fault("envs", "reset(options='task') on every env", 120)
def _string_options() -> str:
    import gymnasium as gym

    refused = 0
    for env_id in ("ap_gym/Shop-v0", "ap_gym/TextWorld-v0", "ap_gym/ScienceWorld-v0", "ap_gym/ALFWorld-v0"):
        env = gym.make(env_id)
        try:
            env.reset(options="task")  # type: ignore[arg-type]
        except TypeError as e:
            refused += "reset options are a dict" in str(e)
        finally:
            env.close()
    return "clear error|TypeError naming the form" if refused == 4 else f"crash|{refused}/4 refused clearly"


@fault("envs", "a valid reset and step after a reset that raised")
def _step_after_failed_reset() -> str:
    import gymnasium as gym

    env = gym.make("ap_gym/Shop-v0", split="test")
    with contextlib.suppress(APGymError):
        env.reset(options={"task_id": "nope/1"})
    env.reset(seed=0)
    env.step("search[shirt]")
    env.close()
    return "handled|stepped"


@fault("stores", "a schema_version that is no number")
def _schema_not_a_number() -> str:
    from ap_gym.memory import MemoryDB

    db = MemoryDB(TMP / "schema.sqlite", embedding_dim=3)
    db.set_meta("schema_version", "two")
    db.close()
    MemoryDB(TMP / "schema.sqlite", embedding_dim=3)
    return "crash|opened"


@fault("configs", "a policy option of the wrong type")
def _option_type() -> str:
    from ap_gym.protocol import RunConfig

    RunConfig.from_dict(_config(policies=[{"name": "no_memory", "options": {"agent": {"history_window": "many"}}}]))
    return "crash|accepted"


@fault("backbones", "generate max_new_tokens=1000000 on the tiny model", 60)
def _huge_generation() -> str:
    from ap_gym.backbones import TransformersBackbone
    from ap_gym.backbones.base import GenerationConfig
    from ap_gym.backbones.tiny import tiny_llama

    model, tokenizer = tiny_llama()
    backbone = TransformersBackbone(model, tokenizer=tokenizer, max_generate_s=5)
    backbone._eos = set()  # a model that never ends: only the context and the deadline stop it
    out = backbone.generate([{"role": "user", "content": "hi"}], GenerationConfig(max_new_tokens=1_000_000))
    return f"handled|{out.completion_tokens} tokens, {out.finish_reason}"


@fault("server", "a body of 50 MB", 60)
def _huge_body() -> str:
    response = httpx.post(_serve() + "/chat/completions", content=b'{"messages": "' + b"x" * (50 << 20) + b'"}',
                          headers={"content-type": "application/json"}, timeout=50)
    return f"clear error|HTTP {response.status_code}" if response.status_code == 413 else \
        f"crash|HTTP {response.status_code}"


@fault("server", "a body sent one byte a second", 60)
def _drip_body() -> str:
    host, port = _serve().split("//")[1].split("/")[0].split(":")
    t = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=50) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        answer = b""
        with contextlib.suppress(OSError):
            for _ in range(45):
                s.sendall(b" ")
                s.settimeout(1.0)
                with contextlib.suppress(TimeoutError, socket.timeout):
                    answer = s.recv(4096)
                if answer:
                    break
    took = time.monotonic() - t
    ok = answer.startswith(b"HTTP/1.1 408") and took < 10
    return f"clear error|408 after {took:.0f} s" if ok else f"hang|{answer[:30]!r} after {took:.0f} s"


@fault("server", "prompt_logprobs with negative and out-of-vocabulary token ids")
def _bad_token_ids() -> str:
    codes = [httpx.post(_serve() + "/completions", json={"prompt": [ids], "max_tokens": 1, "prompt_logprobs": 0},
                        timeout=30).status_code for ids in ([-1, 2], [10**9, 2])]
    return f"clear error|HTTP {codes}" if all(400 <= c < 500 for c in codes) else f"crash|HTTP {codes}"


@fault("envs", "a killed TextWorld engine (a native crash)", 120)
def _textworld_engine_killed() -> str:
    return _engine_fault("ap_gym/TextWorld-v0", lambda e: e._engine.pid, "look", "killed")


@fault("envs", "ScienceWorld's JVM heap", 120)
def _jvm_heap() -> str:
    import gymnasium as gym

    env = gym.make("ap_gym/ScienceWorld-v0", split="test")
    try:
        env.reset(seed=0)
        args = env.unwrapped._engine._gateway.java_process.args
    finally:
        env.close()
    heap = [a for a in args if str(a).startswith("-Xmx")]
    return f"handled|{heap[0]}" if heap else "silently wrong|no heap limit"


# ------------------------------------------------------- reliability IV (issue 42)
def _value_error(fn: Callable[[], Any]) -> str:
    """A bad argument refused with a ValueError that says what is expected: a clear error."""
    try:
        fn()
    except ValueError as e:
        return f"clear error|{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return "silently wrong|accepted"


def _scripted(answers: list[Any]) -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.backbones.test_openai import Scripted

    return Scripted(answers)


_CARD = (200, {}, {"data": [{"id": "m", "max_model_len": 4096}]})
_TOO_LONG = (400, {}, {"message": "This model's maximum context length is 4096 tokens. However, you requested 9000"})
for _name, _answers, _expected in [
    ("a 400 for a max_tokens no prompt fits", [_CARD, _TOO_LONG, _CARD, (200, {}, {"tokens": [1] * 200})], "infra"),
    ("a 400 naming a parameter with 'context' in it", [_CARD, (400, {}, {"message": "bad context_length_penalty"}),
                                                       _CARD, (200, {}, {"tokens": [1] * 200})], "infra"),
    ("a 422 rate limit on input tokens", [_CARD, (422, {}, {"message": "too many input tokens per minute"}),
                                          _CARD, (200, {}, {"tokens": [1] * 30})], "infra"),
    ("a 400 from a server that declares no context", [(200, {}, {"data": [{"id": "m"}]}), _TOO_LONG], "infra"),
    ("a prompt that overflows the declared context", [_CARD, _TOO_LONG, _CARD, (200, {}, {"tokens": [1] * 4090})],
     "prompt"),
]:
    def _refusal(answers: list[Any] = _answers, expected: str = _expected) -> str:
        from ap_gym.backbones import GenerationConfig, OpenAIBackbone
        from ap_gym.errors import BackboneError, PromptRejected

        server = _scripted(answers)
        try:
            OpenAIBackbone(server.url, retries=0, backoff_s=0.01).generate(
                [{"role": "user", "content": "go"}], GenerationConfig(max_new_tokens=64))
        except PromptRejected as e:
            return "handled|the prompt's fault" if expected == "prompt" else f"silently wrong|filed as the method's: {e}"
        except BackboneError as e:
            return "handled|infrastructure" if expected == "infra" else f"silently wrong|filed as infrastructure: {e}"
        finally:
            server.close()
        return "silently wrong|no error"

    fault("reliability", _name)(_refusal)


@fault("reliability", "SIGKILL while a memory database is created, then resume", 120)
def _kill_at_creation() -> str:
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ap_gym.memory import MemoryDB
    from tests.memory.test_store import KILL_AT_META

    path = TMP / "created" / "memory.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", KILL_AT_META, str(path)], capture_output=True, timeout=120)
    db = MemoryDB(path, embedding_dim=4)
    ok = db.meta("app") == "ap-gym memory"
    db.close()
    return "handled|resumed" if ok else "data loss|unreadable"


class _Echo:
    def echo(self, text: str) -> str:
        return text


@fault("reliability", "an engine started from a short-lived thread", 120)
def _engine_thread() -> str:
    from ap_gym.envs.engine_process import EngineProcess

    engine = EngineProcess(_Echo, name="Echo", timeout_s=30)
    try:
        thread = threading.Thread(target=engine.new_game)
        thread.start()
        thread.join()
        time.sleep(0.5)
        return "handled|it still answers" if engine.call("echo", "x") == "x" else "silently wrong|another answer"
    finally:
        engine.close(kill=True)


for _name, _where in [("--backbone", "backbone"), ("--embedder", "embedder"), ("backbones:", "backbones")]:
    def _credentials(where: str = _where) -> str:
        from ap_gym.protocol import RunConfig

        url = "http://bob:s3cret@203.0.113.5:8000/v1"
        change = {"backbones": {"a": url}} if where == "backbones" else {where: url}
        try:
            RunConfig.from_dict(_config(**change))
        except APGymError as e:
            return "silently wrong|the password shown" if "s3cret" in str(e) else f"clear error|{str(e)[:100]}"
        return "silently wrong|accepted"

    fault("reliability", f"user:password@ in a URL ({_name})")(_credentials)


@fault("reliability", "an async vector env after a sub-env's engine raised", 120)
def _async_after_failure() -> str:
    import ap_gym
    from ap_gym.errors import EnvInfrastructureError

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import tests.test_vector  # noqa: F401  (registers test_vector/Faulty-v0)

    envs = ap_gym.make_vec("test_vector/Faulty-v0", 2, vectorization_mode="async")
    try:
        envs.reset(seed=0, options={"task_id": "faulty/1"})
        envs.step(("wait", "wait"))
        with contextlib.suppress(EnvInfrastructureError):
            envs.step(("wait", "wait"))
        envs.reset(seed=0, options={"task_id": "faulty/0"})
        return "handled|an infrastructure error, then a reset that works"
    finally:
        envs.close()


for _name, _kwargs in [("make_vec(n=0)", {"num_envs": 0}), ("group_size=0", {"num_envs": 4, "group_size": 0}),
                       ("group_size=-2", {"num_envs": 4, "group_size": -2}),
                       ("tasks=[]", {"num_envs": 2, "group_size": 2, "tasks": []}),
                       ("tasks='dial/1'", {"num_envs": 2, "group_size": 2, "tasks": "dial/1"}),
                       ("max_episode_steps=-1", {"num_envs": 2, "max_episode_steps": -1}),
                       ("admissible_commands='no'", {"num_envs": 1, "admissible_commands": "no"})]:
    def _size(kwargs: dict[str, Any] = _kwargs) -> str:
        import ap_gym

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.helpers import register_dial

        return _value_error(lambda: ap_gym.make_vec(register_dial(), split="train", **kwargs))

    fault("reliability", _name)(_size)


@fault("reliability", "policy_defaults: {agnet: ...}")
def _typo_default() -> str:
    from ap_gym.protocol import RunConfig

    RunConfig.from_dict(_config(policy_defaults={"agnet": {"action_mode": "react"}}))
    return "silently wrong|dropped"


@fault("reliability", "sequence_logprobs with an id outside the vocabulary; an empty completion")
def _bad_ids() -> str:
    from ap_gym.backbones.hf import TransformersBackbone, tiny_llama

    model, tokenizer = tiny_llama(seed=0)
    backbone = TransformersBackbone(model, tokenizer=tokenizer)
    first = _value_error(lambda: backbone.sequence_logprobs([[1, 2]], [[10 ** 7]]))
    second = _value_error(lambda: backbone.token_logprobs([{"role": "user", "content": "hi"}], ""))
    return first if first.startswith("silently") else second


for _name, _module, _text in [("imports: a module that calls sys.exit(0)", "ff_exits", "import sys\nsys.exit(0)\n"),
                              ("imports: a module that loops at import", "ff_loops", "while True:\n    pass\n"),
                              ("imports: a module that takes over ap_gym/TextWorld-v0", "ff_takes",
                               "import gymnasium as gym\nfrom ap_gym.envs.shop import ShopEnv\n"
                               "gym.register('ap_gym/TextWorld-v0', entry_point=ShopEnv)\n"),
                              ("imports: ../../etc/passwd", "../../etc/passwd", "")]:
    def _imports(module: str = _module, text: str = _text) -> str:
        from ap_gym.protocol.config import import_modules

        if text:
            (TMP / f"{module}.py").write_text(text)
            sys.path.insert(0, str(TMP))
        import_modules([module], timeout_s=2)
        return "silently wrong|imported"

    fault("reliability", _name, 30)(_imports)


@fault("reliability", "Ctrl-C in ap-gym demo", 180)
def _ctrl_c() -> str:
    import os
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "ap_gym.cli", "demo", "--backbone", "tiny", "--tasks", "1",
                             "--benchmarks", "textworld", "--out", str(TMP / "demo")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return "crash|a traceback" if "Traceback" in err else f"handled|exit {proc.returncode}"


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._bench import emit  # noqa: E402

# ---------------------------------------------------------------- issue 51's findings
# Each finding of the fifth reliability round, provoked against the real component (a run on
# disk, the index, the report, a scripted server, the CLI), beside the test that holds it.


def _copy_run(name: str) -> Path:
    run_dir = TMP / name
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(_view_run(), run_dir, ignore=shutil.ignore_patterns(".view", "report"))
    return run_dir


def _readers_agree(run_dir: Path, expected: int) -> str:
    """Every reader (the headers, resume's log, the index, the report) sees ``expected``
    episodes: handled; more (a damaged line counted) is silently wrong."""
    from ap_gym.protocol.results import EpisodeLog, load_headers
    from ap_gym.report import write_report
    from ap_gym.view.index import RunIndex

    counts = {"headers": len(load_headers(run_dir))}
    ix = RunIndex(run_dir)
    try:
        counts["index"] = sum(1 for _ in ix.all_rows())
    finally:
        ix.close()
    write_report([run_dir], out=TMP / f"{run_dir.name}-report")
    counts["resume"] = sum(len(EpisodeLog(p).headers) for p in run_dir.rglob("episodes.jsonl"))
    wrong = {k: v for k, v in counts.items() if v != expected}
    return f"silently wrong|{wrong} of {expected}" if wrong else f"handled|every reader counts {expected}"


for _name, _field, _value in [("iteration: Infinity", "iteration", float("inf")), ("iteration: 1e300", "iteration", 1e300),
                              ("num_steps: Infinity", "num_steps", float("inf")),
                              ("wall_time_s: NaN", "wall_time_s", float("nan")),
                              ('"success": "false"', "success", "false")]:
    def _impossible(field: str = _field, value: Any = _value) -> str:
        run_dir = _copy_run("impossible")
        episodes = next(run_dir.rglob("episodes.jsonl"))
        lines = episodes.read_text().splitlines()
        # a hand edit of the line's text: the head comes first, so its field is the first match
        bad, edits = re.subn(rf'"{field}": [^,}}]+', f'"{field}": {json.dumps(value)}', lines[0], count=1)
        if not edits:
            return f"crash|the line has no {field} to edit"
        episodes.write_text("\n".join([bad, *lines[1:]]) + "\n")
        total = sum(len(p.read_text().splitlines()) for p in run_dir.rglob("episodes.jsonl"))
        return _readers_agree(run_dir, total - 1)

    fault("issue51", f"one line with {_name}", 120)(_impossible)


@fault("issue51", "an episode line written twice", 120)
def _written_twice() -> str:
    run_dir = _copy_run("twice")
    episodes = next(run_dir.rglob("episodes.jsonl"))
    lines = episodes.read_text().splitlines()
    total = sum(len(p.read_text().splitlines()) for p in run_dir.rglob("episodes.jsonl"))
    episodes.write_text("\n".join([*lines, lines[0]]) + "\n")
    return _readers_agree(run_dir, total)


@fault("issue51", "a byte that is not UTF-8 in worlds.jsonl")
def _not_utf8() -> str:
    from ap_gym.protocol.results import load_worlds

    where = TMP / "worlds"
    where.mkdir(exist_ok=True)
    (where / "worlds.jsonl").write_bytes(b'{"task_id": "a"\xff}\n')
    return "handled|the line set aside" if load_worlds(where) == {} else "silently wrong|read"


@fault("issue51", "a second writer of a run being written", 120)
def _second_writer() -> str:
    import os

    from ap_gym.paths import exclusive_lock
    from ap_gym.protocol import RunConfig, run

    data = _config(name="locked", benchmarks=["shop"], policies=[{"name": "random"}], train_per_iter=0, heldout=1,
                   max_steps=2)
    with exclusive_lock(TMP / "runs" / ".locked.lock", "run"):
        try:
            run(RunConfig.from_dict(data), progress=False)
        except APGymError as e:
            return f"clear error|{str(e)[:100]}" if f"pid {os.getpid()}" in str(e) else f"crash|no holder named: {e}"
    return "data loss|two writers"


@fault("issue51", "a checkpoint whose weights were cut (a kill inside save_pretrained)", 120)
def _cut_checkpoint() -> str:
    from ap_gym.backbones import make_backbone
    from ap_gym.backbones.hf import tiny_llama

    model, tokenizer = tiny_llama(seed=0)
    where = TMP / "cut-checkpoint"
    shutil.rmtree(where, ignore_errors=True)
    model.save_pretrained(where)
    tokenizer.save_pretrained(where)
    weights = next(where.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    make_backbone(str(where))
    return "silently wrong|loaded"


@fault("issue51", "positive log-probabilities from the exact search's server", 30)
def _positive_logprobs() -> str:
    from ap_gym.backbones import OpenAIBackbone

    answer = (200, {}, {"choices": [{"index": 0, "logprobs": {"top_logprobs": [{"token_id:5": 0.7, "token_id:6": -1.0}]}}]})
    server = _Scripted([_MODELS, answer])
    client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01)
    picked = client._next_logprobs([([1, 2], [5, 6])])
    return f"silently wrong|read {picked}"


for _name, _params, _said in [("a 400-digit number", {"where": json.dumps([["num_steps", "gt", 10 ** 400]])}, "finite"),
                              ("9,990 nested lists", {"where": "[" * 9990 + "]" * 9990}, "nested"),
                              ("1,300 conditions", {"where": json.dumps([["id", "gt", 1]] * 1300, separators=(",", ":"))},
                               "at most"),
                              ("a 30-digit seed", {"seed": "1" * 30}, "digits"), ("seed=abc", {"seed": "abc"}, "whole"),
                              ("where NaN", {"where": '[["num_steps", "gt", NaN]]'}, "NaN")]:
    def _query(params: dict[str, Any] = _params, said: str = _said) -> str:
        from fastapi.testclient import TestClient

        from ap_gym.view import Viewer, create_app

        viewer = Viewer([_view_run()])
        try:
            answer = TestClient(create_app(viewer), base_url="http://127.0.0.1").get("/api/run/0/episodes",
                                                                                     params=params)
        finally:
            viewer.close()
        if answer.status_code == 400 and said in answer.text:
            return f"clear error|400: {answer.json()['detail'][:90]}"
        if answer.status_code >= 500:
            return f"crash|{answer.status_code}"
        return f"silently wrong|{answer.status_code} {answer.text[:80]}"

    fault("issue51", f"the viewer's query: {_name}", 60)(_query)


@fault("issue51", "a FIFO named training.jsonl beside the runs", 30)
def _fifo_log() -> str:
    import os

    from ap_gym.trainlog import TrainingLog
    from ap_gym.view import Viewer

    where = TMP / "fifo-logs"
    shutil.rmtree(where, ignore_errors=True)
    (where / "pipe").mkdir(parents=True)
    os.mkfifo(where / "pipe" / "training.jsonl")
    good = TrainingLog(where / "good" / "training.jsonl", run="good", rule="grpo", config={})
    good.write(update=1, loss=0.5)
    viewer = Viewer([where])
    try:
        logs = viewer.training()["logs"]
    finally:
        viewer.close()
    return f"handled|the FIFO skipped, {len(logs)} log shown" if len(logs) == 1 else f"silently wrong|{len(logs)} logs"


@fault("issue51", ".view/index.sqlite is a directory", 60)
def _index_a_directory() -> str:
    from ap_gym.view.index import RunIndex

    run_dir = _copy_run("index-dir")
    (run_dir / ".view" / "index.sqlite").mkdir(parents=True)
    ix = RunIndex(run_dir)
    try:
        rows = sum(1 for _ in ix.all_rows())
    finally:
        ix.close()
    total = sum(len(p.read_text().splitlines()) for p in run_dir.rglob("episodes.jsonl"))
    return f"handled|indexed elsewhere, {rows} rows" if rows == total else f"silently wrong|{rows} of {total}"


@fault("issue51", "a same-length edit far before the end of a log", 120)
def _same_length_edit() -> str:
    from ap_gym.view.index import RunIndex

    run_dir = _copy_run("same-length")
    log = next(run_dir.rglob("episodes.jsonl"))
    lines = log.read_bytes().splitlines(keepends=True)
    while log.stat().st_size < 64_000:
        with open(log, "ab") as f:
            f.write(b"".join(lines))
    first = RunIndex(run_dir)
    build = first.build_id
    first.close()
    data = bytearray(log.read_bytes())
    middle = slice(len(data) // 2 - 2000, len(data) // 2 + 2000)
    data[middle] = bytes(data[middle]).translate(bytes.maketrans(b"ab", b"ba"))
    log.write_bytes(bytes(data) + lines[0])
    again = RunIndex(run_dir)
    rebuilt = again.build_id != build
    again.close()
    return "handled|the index was built anew" if rebuilt else "silently wrong|stale rows kept"


@fault("issue51", "ap-gym view FILE of a file that is no run or log", 60)
def _view_a_file() -> str:
    from ap_gym.cli import main as cli

    other = TMP / "notes.txt"
    other.write_text("hello\n")
    try:
        code = cli(["view", "--static", str(TMP / "bundle-notes"), str(other)])
    except SystemExit as e:
        code = e.code
    return f"clear error|exit {code}" if code not in (0, None) else "silently wrong|accepted"


for _name, _forged in [("a fractional pid", {"pid": "PID.5", "host": "HOST", "started": "1"}),
                       ("no start time", {"pid": "PID", "host": "HOST"}),
                       ("a host with a trailing dot", {"pid": "PID", "host": "HOST.", "started": None})]:
    def _forged_running(forged: dict[str, Any] = _forged) -> str:
        import os
        import socket

        from ap_gym.protocol.results import run_state

        run_dir = _copy_run("forged")
        (run_dir / "summary.json").unlink(missing_ok=True)
        value = {k: (str(os.getpid()) + ".5" if v == "PID.5" else os.getpid() if v == "PID" else
                     socket.gethostname() + "." if v == "HOST." else socket.gethostname() if v == "HOST" else v)
                 for k, v in forged.items()}
        (run_dir / "running.json").write_text(json.dumps(value))
        state, why = run_state(run_dir)
        return f"handled|{state}: {why[:60]}" if state != "running" else "silently wrong|read as running"

    fault("issue51", f"a forged running.json: {_name}")(_forged_running)


for _name, _value in [("randomise_exposure: true", True), ("randomise_exposure: '0.5'", "0.5")]:
    def _exposure(value: Any = _value) -> str:
        from ap_gym.protocol import RunConfig

        RunConfig.from_dict(_config(audit={"randomise_exposure": value}))
        return "silently wrong|accepted"

    fault("issue51", _name)(_exposure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="one category (configs, stores, results, backbones, server, envs, runs, "
                        "exposure, substitutions, served, viewer, reliability, issue51)")
    parser.add_argument("--json", help="also write every outcome here")
    args = parser.parse_args()
    outcomes = [attempt(c, n, fn, limit) for c, n, fn, limit in FAULTS if not args.only or c == args.only]
    tally = Counter(o.outcome for o in outcomes)
    lines = [f"Tried {len(outcomes)}: handled {tally['handled']}, clear error {tally['clear error']}, crash "
             f"{tally['crash']}, hang {tally['hang']}, data loss {tally['data loss']}, silently wrong "
             f"{tally['silently wrong']}. Target: 0 crashes, 0 hangs, 0 data loss, 0 silently wrong.", "",
             "| category | tried | handled | clear error | crash | hang | data loss | silently wrong |",
             "|---|---|---|---|---|---|---|---|"]
    for category in sorted({o.category for o in outcomes}):
        c = Counter(o.outcome for o in outcomes if o.category == category)
        lines.append(f"| {category} | {sum(c.values())} | {c['handled']} | {c['clear error']} | {c['crash']} | "
                     f"{c['hang']} | {c['data loss']} | {c['silently wrong']} |")
    bad = [o for o in outcomes if o.outcome in ("crash", "hang", "data loss", "silently wrong")]
    if bad:
        lines += ["", "Not handled:", "", *(f"- {o.category}: {o.name}: {o.outcome}: {o.detail}" for o in bad)]
    lines += ["", "Every fault and its outcome:", "", "| category | fault | outcome | seconds |", "|---|---|---|---|"]
    lines += [f"| {o.category} | {o.name} | {o.outcome} | {o.seconds:.1f} |" for o in outcomes]
    emit("faults" + (f"_{args.only}" if args.only else ""),
         "`faults.py`: faults and bad input" + (f" ({args.only} only)" if args.only else ""), "\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
    if "server" in _MEMORY:
        _MEMORY["server"].stop()
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
