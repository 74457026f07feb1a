"""ScienceWorld (Wang et al., 2022) as ``ap_gym/ScienceWorld-v0``.

All 30 task types. Task ids are ``"<task-name>/<variation>"``, e.g. ``"boil/12"``.

The split is the paper's: 150 training instances (5 variations per task type, drawn with
a fixed seed from ScienceWorld's official *train* variations; ``identify-life-stages-2``
has only 4 there, so its fifth comes from the *dev* variations) and 60 held-out
instances (2 per type from the official *test* variations). Official train, dev and
test variations are disjoint, so no variation is in both splits.

Success is ``score == 100``. ScienceWorld's own ``done`` (``isCompleted``) is also true
when the agent fails a task or the score goes negative, so it is never read as
success: a completed episode below 100 is a loss.

Admissible commands are expensive: the engine's valid-action list costs ~70 ms a step
against ~3 ms for the step itself. They are computed only when asked for
(``admissible_commands=True`` at construction or in ``reset`` options). Steps go
straight to the engine's ``step``/``getScore``/``getCompleted``, skipping the Python
wrapper's per-step look, inventory and valid-action calls.

One JVM per env, reused across resets; ``close()`` ends it. If the JVM dies, the step
raises :class:`~ap_gym.errors.EnvInfrastructureError` and the next ``reset`` starts a
new one. Every engine call runs under a watchdog (``engine_timeout_s``, 120 s; loading a
task gets three times that): a JVM that hangs (stopped, deadlocked) is killed when it
runs out, which turns the blocked call into the same error.

Reset options: ``task_id``, ``split``, ``admissible_commands`` and ``walkthrough``
(load with the gold path and put ``info["walkthrough"]``, the engine's gold action
sequence; loading is slower with it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from ap_gym.envs.base import StartResult, StepResult, TextEnv
from ap_gym.errors import EnvInfrastructureError
from ap_gym.paths import atomic_write_json, cache_dir
from ap_gym.text import Grammar

__all__ = ["ScienceWorldEnv", "official_variations", "scienceworld_split"]

log = logging.getLogger(__name__)
# py4j logs a full traceback for every refused connection to a dead JVM; we raise one
# clear EnvInfrastructureError instead.
logging.getLogger("py4j.java_gateway").setLevel(logging.CRITICAL)
logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
TRAIN_PER_TYPE = 5
TEST_PER_TYPE = 2
SPLIT_SEED = 2610_27406


#: The JVM's heap limit (``-Xmx``): without one it takes a quarter of the machine's memory
#: as it likes (2.6 GB RSS was seen). ``AP_GYM_SCIENCEWORLD_HEAP`` overrides it.
JVM_HEAP = "1g"
#: The longest a JVM may take to start and say its port.
LAUNCH_TIMEOUT_S = 120.0


def _launch_gateway(classpath: str = "", die_on_exit: bool = True, cwd: str | None = None, return_proc: bool = True,
                    heap: str | None = None, timeout_s: float | None = None, **_: Any) -> tuple[int, Any]:
    """py4j's ``launch_gateway``, as ScienceWorld calls it, with a heap limit and a deadline
    on the launch (a JVM that never says its port is killed, not waited on forever)."""
    import select
    import shutil
    import subprocess

    from py4j.java_gateway import find_jar_path

    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else \
        (shutil.which("java") or "java")
    heap = heap or os.environ.get("AP_GYM_SCIENCEWORLD_HEAP") or JVM_HEAP
    command = [java, f"-Xmx{heap}", "-classpath", os.pathsep.join([find_jar_path(), classpath]),
               "py4j.GatewayServer", "--die-on-broken-pipe", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=cwd)
    deadline = time.monotonic() + (timeout_s or LAUNCH_TIMEOUT_S)
    stdout = process.stdout
    assert stdout is not None  # stdout=PIPE
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready = select.select([stdout], [], [], max(0.0, left))[0] if left > 0 else []
        chunk = os.read(stdout.fileno(), 64) if ready else b""
        if not chunk:  # the end of its output (it exited), or the deadline passed in silence
            why = "exited" if ready else f"did not start within {timeout_s or LAUNCH_TIMEOUT_S:g} s"
            process.kill()
            process.wait(10)
            raise EnvInfrastructureError(f"ScienceWorld's JVM {why} (heap -Xmx{heap}); check `java -version` "
                                         "and the memory free")
        line += chunk
    port = int(line.split(b"\n")[0])
    # drain what the JVM prints from now on: a full pipe would stop it
    threading.Thread(target=lambda: [None for _ in iter(lambda: stdout.read(65536), b"")],
                     daemon=True, name="ap-gym scienceworld stdout").start()
    return port, process


def _start_engine() -> Any:
    try:
        import scienceworld.scienceworld as sw
        from scienceworld import ScienceWorldEnv as _Engine
    except ImportError as e:  # pragma: no cover - a core dependency
        raise ImportError("ScienceWorld is missing: pip install scienceworld==1.2.3 (needs Java)") from e
    sw.launch_gateway = _launch_gateway  # our launch: a heap limit, a deadline
    try:
        return _Engine("", envStepLimit=10**9)
    except EnvInfrastructureError:
        raise
    except Exception as e:
        raise EnvInfrastructureError(
            f"could not start ScienceWorld's JVM ({e}); check that `java -version` works"
        ) from e


def official_variations() -> dict[str, dict[str, list[int]]]:
    """ScienceWorld's official train/dev/test variation ids per task, cached on disk."""
    path = cache_dir("scienceworld") / "variations-1.2.3.json"
    if path.exists():
        with contextlib.suppress(ValueError, OSError):
            data = json.loads(path.read_text())
            if len(data) == 30:
                return data
    engine = _start_engine()
    try:
        data = {}
        for task in engine.get_task_names():
            engine.load(task, 0, "")
            data[task] = {
                "train": sorted(engine.get_variations_train()),
                "dev": sorted(engine.get_variations_dev()),
                "test": sorted(engine.get_variations_test()),
            }
    finally:
        engine.close()
    atomic_write_json(path, data)
    return data


@cache
def scienceworld_split(seed: int = SPLIT_SEED) -> dict[str, list[str]]:
    """The paper's split: 5 training and 2 held-out variations per task type."""
    variations = official_variations()
    rng = random.Random(seed)
    train: list[str] = []
    test: list[str] = []
    for task in sorted(variations):
        v = variations[task]
        picked = rng.sample(v["train"], min(TRAIN_PER_TYPE, len(v["train"])))
        if len(picked) < TRAIN_PER_TYPE:
            picked += rng.sample(v["dev"], TRAIN_PER_TYPE - len(picked))
        train += [f"{task}/{i}" for i in sorted(picked)]
        test += [f"{task}/{i}" for i in sorted(rng.sample(v["test"], TEST_PER_TYPE))]
    return {"train": train, "test": test}


class _Watchdog:
    """One thread that calls ``on_timeout(target)`` when an armed deadline passes."""

    def __init__(self, on_timeout: Any) -> None:
        self._on_timeout = on_timeout
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._target: Any = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="ap-gym scienceworld watchdog", daemon=True)
        self._thread.start()

    def arm(self, seconds: float, target: Any) -> None:
        with self._cond:
            self._deadline, self._target = time.monotonic() + seconds, target
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = self._target = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                target, self._deadline, self._target = self._target, None, None
                self._cond.release()
                try:
                    self._on_timeout(target)
                finally:
                    self._cond.acquire()


class ScienceWorldEnv(TextEnv):
    """ScienceWorld behind the ap-gym text contract; see the module docstring.

    Args:
        split: ``"train"`` (150 instances) or ``"test"`` (60 held-out instances).
        admissible_commands: compute the valid-action list every step (~30 ms each).
        simplifications: ScienceWorld simplification string, e.g. ``"easy"``; empty by default.
        split_seed: the seed that fixes the split; keep the default to compare with others.
        engine_timeout_s: the longest one engine call may take before the JVM is killed.
        recycle_every: start a new JVM after this many resets (the JVM's memory grows
            ~270 MB over 50 resets; a new one costs ~2 s).
        render_mode: ``"ansi"`` or ``"human"``.

    Example:
        >>> import gymnasium as gym, ap_gym
        >>> env = gym.make("ap_gym/ScienceWorld-v0", split="test")
        >>> obs, info = env.reset(options={"task_id": "boil/" + ...})  # doctest: +SKIP
    """

    benchmark = "scienceworld"
    #: ScienceWorld's action templates; "teleport to" needs the teleportAction simplification,
    #: which ap-gym does not turn on by default, so it is not among them.
    grammar = Grammar.of({"open", "close", "activate", "deactivate", "connect", "disconnect", "use", "look", "read",
                          "move", "pick", "put", "pour", "dunk", "mix", "go", "eat", "flush", "focus", "wait", "wait1",
                          "inventory", "task", "reset"})
    #: the parser's refusal, and its question when a command names several objects (nothing is done yet)
    refused = re.compile(r"No known action matches that input|Ambiguous request", re.I)

    def __init__(
        self,
        *,
        split: str = "train",
        admissible_commands: bool = False,
        simplifications: str = "",
        split_seed: int = SPLIT_SEED,
        engine_timeout_s: float = 120.0,
        recycle_every: int = 100,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(split=split, admissible_commands=admissible_commands, render_mode=render_mode)
        self.simplifications = simplifications
        self.split_seed = split_seed
        self.engine_timeout_s = engine_timeout_s
        self.recycle_every = recycle_every
        self._resets = 0
        self._engine: Any = None
        self._dog: _Watchdog | None = None

    @contextlib.contextmanager
    def _watchdog(self, factor: float = 1.0) -> Any:
        """Kill the JVM if the calls inside take longer than ``engine_timeout_s`` x ``factor``:
        a hung engine then fails like a dead one instead of blocking forever. One watchdog
        thread per env, armed and disarmed per call (a timer thread per step cost ~7 % of
        a step)."""
        if self._dog is None:
            self._dog = _Watchdog(self._kill_hung)
        self._dog.arm(self.engine_timeout_s * factor, self._engine)
        try:
            yield
        finally:
            self._dog.disarm()

    def _kill_hung(self, engine: Any) -> None:
        log.warning("ScienceWorld's JVM did not answer within %.0f s; killing it", self.engine_timeout_s)
        with contextlib.suppress(Exception):
            engine._gateway.java_process.kill()

    # ------------------------------------------------------------- engine
    def _server(self) -> Any:
        if self._engine is not None and not self._alive():
            log.warning("ScienceWorld's JVM had died; starting a new one")
            self._kill_engine()
        if self._engine is None:
            self._engine = _start_engine()
        return self._engine.server

    def _engine_died(self, e: BaseException) -> EnvInfrastructureError:
        self._kill_engine()
        self._abandon()
        return EnvInfrastructureError(
            f"ScienceWorld's JVM stopped answering ({type(e).__name__}: {e}). "
            "The episode is lost; call reset() to start a new JVM."
        )

    def _kill_engine(self) -> None:
        """End the JVM without a word to it: it holds nothing to save, and a polite shutdown
        is one more conversation with a process that may be stopped or dying."""
        engine, self._engine = self._engine, None
        if engine is None:
            return
        with contextlib.suppress(Exception):
            process = engine._gateway.java_process
            process.kill()
            process.wait(timeout=10)
        with contextlib.suppress(Exception):
            # sockets and the callback server are local: closing them needs no answer
            engine._gateway.close(keep_callback_server=True)
            engine._gateway.shutdown_callback_server()

    def close(self) -> None:
        self._kill_engine()
        if self._dog is not None:
            self._dog.stop()
            self._dog = None
        super().close()

    def __del__(self) -> None:
        # at interpreter exit module globals (contextlib among them) may already be None: a
        # plain try keeps the garbage collector's last call silent
        try:  # noqa: SIM105
            self._kill_engine()
        except Exception:  # nothing to tell anyone at exit
            pass

    # ----------------------------------------------------------- abilities
    def walkthrough(self, task_id: str) -> list[str]:
        """ScienceWorld's gold action sequence (the engine loads the task with its gold path,
        which ends the episode in progress)."""
        _, info = self.reset(options={"task_id": task_id, "walkthrough": True})
        self._abandon()
        return list(info["walkthrough"])

    def prepare_suite(self, workers: int = 1, progress: Callable[[int, int], None] | None = None) -> int:
        """List ScienceWorld's official variations once (a JVM, ~30 s), which the split needs."""
        path = cache_dir("scienceworld") / "variations-1.2.3.json"
        fresh = not path.exists()
        official_variations()
        if progress is not None:
            progress(1, 1)
        return int(fresh)

    # -------------------------------------------------------------- hooks
    def _task_ids(self, split: str) -> list[str]:
        return scienceworld_split(self.split_seed)[split]

    def has_task(self, task_id: str) -> bool:
        task, _, var = task_id.rpartition("/")
        variations = official_variations()
        if task not in variations or not var.isdigit():
            return False
        return any(int(var) in ids for ids in variations[task].values())

    def task_family(self, task_id: str) -> str:
        return task_id.rpartition("/")[0]

    def _start(self, task_id: str, options: Mapping[str, Any]) -> StartResult:
        task, _, var = task_id.rpartition("/")
        gold = bool(options.get("walkthrough", False))
        self._resets += 1
        if self.recycle_every and self._resets > self.recycle_every:  # bound the JVM's growth
            self._kill_engine()
            self._resets = 1

        def load(server: Any) -> StartResult:
            server.load(task, int(var), self.simplifications, gold)
            extra: dict[str, Any] = {"variation": int(var)}
            observation = str(server.step("look around"))
            instruction = str(server.getTaskDescription())
            score = _score(server)
            if gold:
                extra["walkthrough"] = [str(a) for a in server.getGoldActionSequence()]
            admissible = self._valid_actions(server) if self._admissible else None
            return StartResult(observation=observation, instruction=instruction, score=score, max_score=100.0,
                               admissible_commands=admissible, extra=extra)

        return self._call(load, factor=3.0, fresh=True)

    def _advance(self, action: str) -> StepResult:
        def step(server: Any) -> StepResult:
            observation = str(server.step(action))
            score = _score(server)
            completed = bool(server.getCompleted())
            admissible = self._valid_actions(server) if self._admissible else None
            won = score >= 100
            return StepResult(observation, float(score), won, not won and (completed or score < 0), admissible)

        return self._call(step)

    def _call(self, fn: Any, factor: float = 1.0, fresh: bool = False) -> Any:
        """``fn(server)`` under the watchdog; a dead or hung JVM becomes an EnvInfrastructureError."""
        try:
            server = self._server() if fresh else self._engine.server
            with self._watchdog(factor):
                return fn(server)
        except EnvInfrastructureError:
            raise
        except Exception as e:
            if _is_py4j_network_error(e) or (self._engine is not None and not self._alive()):
                raise self._engine_died(e) from None
            raise

    def _alive(self) -> bool:
        try:
            return self._engine._gateway.java_process.poll() is None
        except Exception:
            return False

    @staticmethod
    def _valid_actions(server: Any) -> list[str]:
        """The valid actions in one round trip: the JSON form. Iterating the Java list
        costs two py4j round trips per action (hundreds per step; ~4x slower)."""
        return sorted(str(a["action"]) for a in json.loads(server.getValidActionObjectCombinationsJSON())["validActions"])


def _score(server: Any) -> float:
    return float(int(round(100 * server.getScore())))


def _is_py4j_network_error(e: BaseException) -> bool:
    name = type(e).__name__
    return name in {"Py4JNetworkError", "Py4JError"} and "JavaError" not in name
