"""What several test modules share: a tiny text env, small run configs, kill-and-resume.

Test modules import from here, never from each other.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ap_gym.envs.base import StartResult, StepResult, TextEnv
from ap_gym.processes import process_alive

__all__ = ["CHOOSE", "TINY_AGENT", "Counter", "Dial", "register_dial", "ap_config", "clean_run", "config", "eval_results", "kill_resume_and_compare",
           "labeller_for", "process_alive", "stop_run"]

#: Options that keep the tiny backbone's episodes short.
TINY_AGENT = {"agent": {"action_mode": "generate", "generation": {"max_new_tokens": 3}},
              "memory": {"synthesis": {"max_new_tokens": 6}}}
#: The agent choosing among admissible commands (scoring), with a short history.
CHOOSE = {"agent": {"action_mode": "choose", "history_window": 4}, "memory": {"synthesis": {"max_new_tokens": 6}}}


class Counter(TextEnv):
    """Say 'add' three times to win; 'quit' loses."""

    benchmark = "counter"

    def _task_ids(self, split):
        return {"train": ["c/1", "c/2"], "test": ["c/3"]}[split]

    def task_family(self, task_id):
        return "c"

    def _start(self, task_id, options):
        self.n = 0
        return StartResult("You see a counter at 0.", "Count to three.", 0.0, 3.0, ["add", "quit"])

    def _advance(self, action):
        if action == "add":
            self.n += 1
            return StepResult(f"The counter shows {self.n}.", float(self.n), won=self.n >= 3,
                              admissible_commands=["add", "quit"])
        if action == "quit":
            return StepResult("You gave up.", float(self.n), lost=True)
        return StepResult("Nothing happens.", float(self.n), admissible_commands=["add", "quit"])


def config(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    """A small run on the tiny backbone: TextWorld, 2 iterations of 3 training tasks, 3 held-out."""
    base = {
        "name": "t", "benchmarks": ["textworld"], "backbone": "tiny", "out": str(tmp_path),
        "policies": [{"name": "no_memory", "options": {"agent": TINY_AGENT["agent"]}},
                     {"name": "anti_persistence", "options": TINY_AGENT},
                     {"name": "abstraction", "options": TINY_AGENT}],
        "seeds": [0], "iterations": 2, "train_per_iter": 3, "heldout": 3, "max_steps": 3, "workers": 1,
    }
    base.update(kw)
    return base


def ap_config(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    """:func:`config` with Anti-Persistence alone, choosing among admissible commands."""
    return config(tmp_path, policies=[{"name": "anti_persistence", "options": CHOOSE}], **kw)


def eval_results(run_dir: Path) -> dict:
    """Held-out episodes by (policy, iteration, task): actions, success, mode."""
    from ap_gym.protocol.results import load_episodes

    return {(x.header.policy, x.header.iteration, x.header.task_id): ([s.action for s in x.steps], x.header.success,
                                                          x.header.policy_info.get("mode"))
            for x in load_episodes(run_dir) if x.header.phase == "eval"}


def _kill_when(path: Path, proc: subprocess.Popen, predicate, stalled_s: float = 900,
               sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` once ``predicate`` holds of the run's episode lines. No deadline while the
    run goes on (a busy machine made a fixed 240 s too short for a Ray run): the run ends by
    itself, and only a run whose results file has not changed for ``stalled_s`` is a failure."""
    seen, changed = None, time.monotonic()
    while True:
        if path.exists():
            from ap_gym.protocol.results import parse_line

            st = path.stat()
            if (st.st_size, st.st_mtime_ns) != seen:
                seen, changed = (st.st_size, st.st_mtime_ns), time.monotonic()
            lines = [parse_line(x) for x in path.read_text().splitlines() if x.strip().endswith("}")]
            if predicate(lines):
                os.kill(proc.pid, sig)
                proc.wait(120)
                return
        if proc.poll() is not None:
            raise AssertionError("the run finished before it could be killed")
        if time.monotonic() - changed > stalled_s:
            proc.kill()
            raise AssertionError(f"the run wrote nothing for {stalled_s:.0f} s before its kill point: stalled")
        time.sleep(0.05)


def stop_run(tmp_path: Path, data: dict, kill_at, sig: int = signal.SIGKILL) -> tuple[subprocess.Popen, list[str]]:
    """Run ``data`` (out: tmp_path/killed) with the CLI and send ``sig`` when ``kill_at(lines)``;
    the stopped process (stderr piped) and the command that resumes it."""
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(data))
    cmd = [sys.executable, "-m", "ap_gym.cli", "run", str(cfg_file)]
    proc = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _kill_when(tmp_path / "killed/t/textworld/anti_persistence/seed0/episodes.jsonl", proc, kill_at, sig=sig)
    assert not (tmp_path / "killed/t/summary.json").exists()
    return proc, cmd


def clean_run(out: Path, data: dict, clean_overrides: dict | None = None) -> Path:
    """``data`` run in-process, uninterrupted, into ``out`` (what a resumed run must equal)."""
    from ap_gym.protocol import RunConfig, run

    return run(RunConfig.from_dict({**data, **(clean_overrides or {}), "out": str(out)}), progress=False)


def kill_resume_and_compare(tmp_path: Path, data: dict, kill_at, clean_overrides: dict | None = None,
                            sig: int = signal.SIGKILL, clean: Path | None = None) -> subprocess.Popen:
    """Run ``data`` (out: tmp_path/killed) with the CLI, send ``sig`` when ``kill_at(lines)``,
    run it again, and check it ends as a clean in-process run does (``clean``, a
    :func:`clean_run` of the same config, else one run here). Returns the stopped process
    (its stderr is piped)."""
    proc, cmd = stop_run(tmp_path, data, kill_at, sig)
    subprocess.run(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    resumed = json.loads((tmp_path / "killed/t/summary.json").read_text())
    clean = clean or clean_run(tmp_path / "clean", data, clean_overrides)
    assert resumed == json.loads((clean / "summary.json").read_text())
    assert eval_results(tmp_path / "killed/t") == eval_results(clean)
    return proc


def labeller_for(benchmark: str):
    """The audit's rule labeller with the grammar the benchmark's env declares."""
    from ap_gym.envs import env_class, resolve_benchmark
    from ap_gym.report.audit import EnvironmentLabeller

    return EnvironmentLabeller(env_class(resolve_benchmark(benchmark)).grammar)


def synthetic_run(root: Path, name: str, outcomes: dict[str, list[bool]], *, benchmark: str | tuple[str, ...] = "shop",
                  seeds: tuple[int, ...] = (0,), backbone: str = "tiny-llama(seed=0)",
                  options: dict[str, dict[str, Any]] | None = None,
                  policy_info: dict[str, dict[str, Any]] | None = None) -> Path:
    """A run directory in the results format, written directly: for each policy label, its
    held-out outcomes (one episode per entry) in every seed, at iteration 0 (``options``:
    a label's policy options)."""
    from ap_gym.paths import atomic_write_json
    from ap_gym.protocol import RunConfig
    from ap_gym.protocol.results import EPISODES, EpisodeLine
    from ap_gym.types import Episode, Termination

    run_dir = root / name
    labels = list(outcomes)
    benches = [benchmark] if isinstance(benchmark, str) else list(benchmark)
    config = RunConfig.from_dict({"name": name, "benchmarks": benches, "backbone": "tiny", "out": str(root),
                                  "policies": [{"name": "anti_persistence", "label": label,
                                                **({"options": options[label]} if label in (options or {}) else {})}
                                               for label in labels],
                                  "seeds": list(seeds), "iterations": 1})
    atomic_write_json(run_dir / "config.json", {"config": config.to_dict(), "backbone": {"identity": backbone}})
    for bench in benches:
        for label, wins in outcomes.items():
            for seed in seeds:
                directory = run_dir / bench / label / f"seed{seed}"
                directory.mkdir(parents=True)
                lines = []
                for i, won in enumerate(wins):
                    episode = Episode(f"{bench}/{i}", "f", "do it", "", (), won, 100.0 * won, 100.0,
                                      Termination.WON if won else Termination.LOST, seed=seed,
                                      policy_info=(policy_info or {}).get(label, {}))
                    lines.append(EpisodeLine.of("eval", 0, i, bench, label, seed, 1, episode).to_json())
                (directory / EPISODES).write_text("\n".join(lines) + "\n")
    return run_dir


class Dial(TextEnv):
    """Turn the dial to the number on the card; the card's number depends on the seed, so
    equal seeds give equal starts and different seeds (mostly) different ones."""

    benchmark = "dial"

    def _task_ids(self, split):
        return [f"dial/{i}" for i in range(4)] if split == "train" else ["dial/9"]

    def task_family(self, task_id):
        return "dial"

    def _start(self, task_id, options):
        self.code = int(self.np_random.integers(10))
        self.turns = 0
        limit = int(task_id.split("/")[1]) + 1
        self.limit = limit
        return StartResult(f"{task_id}: the card says {self.code}.  \n", "Turn the dial to the card's number.",
                           score=0.0, max_score=4.0, admissible_commands=[f"turn {i}" for i in range(10)])

    def _advance(self, action):
        self.turns += 1
        if action == f"turn {self.code}":
            return StepResult("Click. It opens.", 4.0, won=True)
        if self.turns >= self.limit:
            return StepResult("It jams.", 0.0, lost=True)
        return StepResult(f"Nothing (turn {self.turns}).", 0.0)


def register_dial() -> str:
    """Register :class:`Dial` as ``test_vector/Dial-v0`` (once); returns the id."""
    import gymnasium as gym

    if "test_vector/Dial-v0" not in gym.registry:
        gym.register("test_vector/Dial-v0", entry_point=Dial, max_episode_steps=20)
    return "test_vector/Dial-v0"


def copy_run(run: Path, tmp_path: Path, name: str = "run") -> Path:
    """A copy of ``run`` under ``tmp_path`` without its view index (a test may change it)."""
    import shutil

    out = tmp_path / name
    shutil.copytree(run, out, ignore=shutil.ignore_patterns(".view"))
    return out


def viewer_js() -> str:
    """The viewer page's scripts as one text, in the order index.html loads them (core, each
    page, boot): what a test that reads the page's source reads."""
    from pathlib import Path as _Path

    static = _Path(__file__).resolve().parents[1] / "ap_gym" / "view" / "static"
    html = (static / "index.html").read_text()
    return "\n".join((static / src.removeprefix("static/")).read_text()
                     for src in re.findall(r'<script src="(static/js/[^"]+)"', html))
