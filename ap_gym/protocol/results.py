"""The results format: what a run writes, and the only module that reads it back.

A run directory holds ``config.json`` (the resolved config, package version, backbones),
``prompts.json``, ``summary.json`` and, per setting (benchmark x [backbone x] policy x
seed), ``<benchmark>/[<backbone>/]<policy>/seed<k>/episodes.jsonl``: one :class:`EpisodeLine` per episode,
its position in the protocol (phase, iteration, index) followed by everything the
:class:`~ap_gym.types.Episode` carries. ``ap-gym report`` and ``ap-gym view`` read runs
through this module and never import the runner.

A line cut short by a kill is dropped on resume; a damaged line elsewhere is moved to
``episodes.jsonl.bad`` with a warning, and every valid line around it is kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ap_gym.paths import atomic_write_text
from ap_gym.types import Termination

__all__ = [
    "BENCHMARK",
    "EPISODES",
    "EpisodeLine",
    "EpisodeLog",
    "Rates",
    "load_abstraction_vectors",
    "load_abstractions",
    "load_benchmark",
    "load_config",
    "load_episodes",
    "load_record_keys",
    "load_records",
    "load_stand_ins",
    "read_lines",
    "setting_dirs",
    "setting_key",
    "summarise",
]

log = logging.getLogger(__name__)

EPISODES = "episodes.jsonl"
#: Per setting: which benchmark ran and what stood in for it (``stand_in``).
BENCHMARK = "benchmark.json"
PHASES = ("train", "eval")


@dataclass(frozen=True)
class EpisodeLine:
    """One line of ``episodes.jsonl``: where the episode sits in the protocol, then the episode."""

    phase: str
    iteration: int
    index: int
    benchmark: str
    policy: str
    seed: int
    attempts: int
    episode: Mapping[str, Any]
    backbone: str | None = None

    def to_dict(self) -> dict[str, Any]:
        where = {"phase": self.phase, "iteration": self.iteration, "index": self.index, "benchmark": self.benchmark}
        if self.backbone is not None:  # a run with several backbones: the line names its own
            where["backbone"] = self.backbone
        return {**where, "policy": self.policy, "seed": self.seed, "attempts": self.attempts, **self.episode}


def setting_key(line: Mapping[str, Any]) -> str:
    """``<benchmark>/[<backbone>/]<policy>/seed<k>``: a setting's name in summaries and reports."""
    middle = f"{line['backbone']}/" if line.get("backbone") else ""
    return f"{line['benchmark']}/{middle}{line['policy']}/seed{line['seed']}"


def read_lines(path: Path) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """The valid lines of a JSONL file and the damaged ones ``(line number, text)``.

    A last line without its newline that does not parse was cut by a kill: it is neither.
    """
    good: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    raws = text.split("\n")
    for number, raw in enumerate(raws, 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            if not isinstance(line, dict) or "phase" not in line or "task_id" not in line:
                raise ValueError("not an episode line")
        except ValueError:
            if number == len(raws) and not text.endswith("\n"):
                continue  # the tail of a line cut by a kill
            bad.append((number, raw))
        else:
            good.append(line)
    return good, bad


class EpisodeLog:
    """``episodes.jsonl`` of one setting: appended line by line, flushed, re-read on resume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[dict[str, Any]] = []
        if path.exists():
            self.lines, bad = read_lines(path)
            if bad:
                quarantine = path.with_name(path.name + ".bad")
                with open(quarantine, "a", encoding="utf-8") as f:
                    f.writelines(raw + "\n" for _, raw in bad)
                log.warning("%s: %d damaged line(s) (numbers %s) moved to %s; every valid line is kept",
                            path, len(bad), ", ".join(str(n) for n, _ in bad[:10]), quarantine)
            self._rewrite()

    def _rewrite(self) -> None:
        atomic_write_text(self.path, "".join(json.dumps(x) + "\n" for x in self.lines))

    def append(self, line: EpisodeLine) -> None:
        data = line.to_dict()
        self.lines.append(data)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(data) + "\n")
            f.flush()

    def drop(self, phase: str, iteration: int) -> None:
        before = len(self.lines)
        self.lines = [x for x in self.lines if not (x["phase"] == phase and x["iteration"] == iteration)]
        if len(self.lines) != before:
            self._rewrite()

    def count(self, phase: str, iteration: int) -> int:
        return sum(1 for x in self.lines if x["phase"] == phase and x["iteration"] == iteration)

    def done(self, phase: str, iteration: int) -> dict[str, dict[str, Any]]:
        return {x["task_id"]: x for x in self.lines if x["phase"] == phase and x["iteration"] == iteration}


def setting_dirs(run_dir: str | Path) -> Iterator[Path]:
    """Every setting directory of a run (``<benchmark>/[<backbone>/]<policy>/seed<k>``), sorted."""
    run_dir = Path(run_dir)
    found = set(run_dir.glob(f"*/*/seed*/{EPISODES}")) | set(run_dir.glob(f"*/*/*/seed*/{EPISODES}"))
    for path in sorted(found):
        yield path.parent


def load_benchmark(setting_dir: str | Path) -> dict[str, Any]:
    """A setting's ``benchmark.json``: ``benchmark``, ``env_id``, ``stand_in`` (what stood in
    for the published benchmark, or ``None``) and ``grammar`` (the env's declared command
    grammar, or ``None``); ``{}`` when it is missing or unreadable."""
    with contextlib.suppress(OSError, ValueError):
        meta = json.loads((Path(setting_dir) / BENCHMARK).read_text())
        if isinstance(meta, dict):
            return meta
    return {}


def load_stand_ins(run_dir: str | Path) -> dict[str, str]:
    """Benchmark -> what stood in for the published one in this run (from each setting's
    ``benchmark.json``); benchmarks that were the real thing are absent."""
    found: dict[str, str] = {}
    for directory in setting_dirs(run_dir):
        meta = load_benchmark(directory)
        if meta.get("stand_in") and isinstance(meta.get("benchmark"), str):
            found[meta["benchmark"]] = str(meta["stand_in"])
    return found


def load_config(run_dir: str | Path) -> dict[str, Any]:
    """``config.json`` of a run: ``config`` (the run config), ``ap_gym_version``, ``backbone``."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not an ap-gym run directory (no config.json)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is damaged (not JSON: {e}); restore it from a copy") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path} is damaged (a JSON {type(meta).__name__}, not an object); restore it from a copy")
    if not isinstance(meta.get("config", {}), dict):
        raise ValueError(f"{path} is damaged (its 'config' is not an object); restore it from a copy")
    return meta


def load_episodes(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every episode line of a run (all settings), in a stable order; damaged lines are skipped."""
    lines = []
    for directory in setting_dirs(run_dir):
        good, bad = read_lines(directory / EPISODES)
        if bad:
            log.warning("%s: skipped %d damaged line(s)", directory / EPISODES, len(bad))
        lines += good
    return sorted(lines, key=lambda x: (x["benchmark"], x.get("backbone") or "", x["policy"], x["seed"], x["iteration"],
                                        x["phase"], x["index"]))


@dataclass(frozen=True)
class Rates:
    """Success over a set of episodes, counted once for every reader (summary, report, viewer).

    Only infrastructure failures are not the method's doing: ``rate`` leaves them out,
    ``rate_all`` counts them as failures. A failure of the method's own making (a prompt
    the model refused, ``prompt_rejected``) is a failure in both. With no valid episode
    there is no rate (``None``), never 0.0.
    """

    episodes: int
    infrastructure_failures: int
    successes: int

    @property
    def valid(self) -> int:
        return self.episodes - self.infrastructure_failures

    @property
    def rate(self) -> float | None:
        return self.successes / self.valid if self.valid else None

    @property
    def rate_all(self) -> float | None:
        return self.successes / self.episodes if self.episodes else None

    @classmethod
    def of(cls, lines: Iterable[Mapping[str, Any]]) -> Rates:
        n = infra = wins = 0
        for x in lines:
            n += 1
            if x.get("termination") == Termination.INFRA.value:
                infra += 1
            elif x.get("success"):
                wins += 1
        return cls(n, infra, wins)


def summarise(run_dir: str | Path) -> dict[str, Any]:
    """Per setting and iteration: held-out success, score, LLM calls, steps (no timings,
    so an interrupted and an uninterrupted run summarise identically).

    Infrastructure failures are counted, and success is given both ways (:class:`Rates`):
    over the valid episodes (``success_rate``, the rate the other means use) and with every
    infrastructure failure counted as a failure (``success_rate_infra_as_failure``).
    """
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for x in load_episodes(run_dir):
        if x["phase"] == "eval":
            groups.setdefault((setting_key(x), x["iteration"]), []).append(x)
    settings: dict[str, Any] = {}
    for (key, it), eps in groups.items():
        valid = [e for e in eps if e["termination"] != Termination.INFRA.value]
        n, rates = len(valid), Rates.of(eps)
        calls = [e["usage"]["calls"] for e in valid]

        def mean(total: float, n: int = n) -> float | None:
            return total / n if n else None

        entry = {
            "iteration": it,
            "episodes": rates.episodes,
            "infrastructure_failures": rates.infrastructure_failures,
            "success_rate": rates.rate,
            "success_rate_infra_as_failure": rates.rate_all,
            "mean_llm_calls": mean(sum(e["usage"]["llm_calls"] for e in valid)),
            "mean_acting_calls": mean(sum(c.get("acting", 0) for c in calls)),
            "mean_synthesis_calls": mean(sum(sum(v for k, v in c.items() if k != "acting") for c in calls)),
            "mean_steps": mean(sum(e["num_steps"] for e in valid)),
            "successes": sorted(e["task_id"] for e in valid if e["success"]),
        }
        settings.setdefault(key, []).append(entry)
    return {"settings": settings,
            "final": {k: {kk: max(v, key=lambda e: e["iteration"])[kk]
                          for kk in ("iteration", "episodes", "infrastructure_failures", "success_rate",
                                     "success_rate_infra_as_failure", "mean_llm_calls", "mean_steps")}
                      for k, v in settings.items()}}


def _read_memory(setting_dir: str | Path, read: Any, empty: Any) -> Any:
    """``read(db)`` on a setting's memory opened read-only, or ``empty`` when it has none."""
    from ap_gym.memory import MemoryDB

    path = Path(setting_dir) / "memory.sqlite"
    if not path.exists():
        return empty
    db = MemoryDB(path, readonly=True)
    try:
        return read(db)
    finally:
        db.close()


def load_abstractions(setting_dir: str | Path) -> list[Any]:
    """The abstractions a setting's memory stored (inactive ones too), read-only; ``[]``
    when it has no memory. The audit reads them through here, never through the stores."""
    from ap_gym.memory import AbstractionStore

    return _read_memory(setting_dir, lambda db: AbstractionStore(db).all(include_inactive=True), [])


def load_abstraction_vectors(setting_dir: str | Path, ids: Any) -> dict[int, Any]:
    """The embeddings of stored abstractions by id (read-only): what a skills file carries so
    that the frozen layer retrieves skills as abstraction memory did."""
    from ap_gym.memory import AbstractionStore

    ids = sorted(set(ids))
    if not ids:
        return {}
    return _read_memory(setting_dir, lambda db: dict(zip(ids, AbstractionStore(db).embeddings(ids), strict=True)), {})


def load_records(setting_dir: str | Path, ids: Any) -> dict[int, Any]:
    """Stored trajectory records by id (read-only): the provenance the audit checks against."""
    from ap_gym.memory import TrajectoryStore

    ids = sorted(set(ids))
    if not ids:
        return {}
    return _read_memory(setting_dir, lambda db: {r.id: r for r in TrajectoryStore(db).get(ids)}, {})


def load_record_keys(setting_dir: str | Path) -> list[tuple[int, str, int]]:
    """``(record id, task id, iteration)`` of every stored trajectory record (read-only):
    how the viewer links a retrieved record back to the training episode it came from."""
    return _read_memory(setting_dir, lambda db: [
        (int(i), str(t), int(it))
        for i, t, it in db.execute("SELECT id, task_id, iteration FROM trajectories ORDER BY id").fetchall()], [])
