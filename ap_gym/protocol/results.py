"""The results format: what a run writes, and the only module that reads it back.

A run directory holds ``config.json`` (the resolved config, package version, backbones),
``prompts.json``, ``summary.json`` (once the grid ends; while it runs, ``running.json``
names the process writing it: :func:`run_state`) and, per setting (benchmark x [backbone x] policy x
seed), ``<benchmark>/[<backbone>/]<policy>/seed<k>/episodes.jsonl``: one line per
episode, a typed, versioned record.

A line of schema 2 (:data:`SCHEMA_VERSION`) is ``{"schema": 2, "head": {...}, "steps":
[...]}``: ``head`` is the :class:`EpisodeHeader` (where the episode sits in the protocol,
then everything of the :class:`~ap_gym.types.Episode` but its steps, with their count),
``steps`` its :class:`~ap_gym.types.Step` s, each holding its trace. The head comes
first, so :func:`parse_header` reads it without parsing the steps (most of a line's
bytes: prompts). Lines of schema 1 (ap-gym's format before the schema was versioned: one
flat object, trace fields inside each step) are read and converted; a line of any other
schema is refused with the version named (:class:`SchemaError`).

Everything else (the report, the viewer's index, the studies, the benchmarks) reads
results through this module and gets typed objects back; none of them reads a line's
JSON by key. ``ap-gym report`` and ``ap-gym view`` never import the runner.

A line cut short by a kill is dropped on resume; a damaged line elsewhere is moved to
``episodes.jsonl.bad`` with a warning, and every valid line around it is kept.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ap_gym.errors import APGymError
from ap_gym.paths import atomic_write_text
from ap_gym.types import Decisions, Episode, Step, Termination, Usage

__all__ = [
    "BENCHMARK",
    "EPISODES",
    "RUNNING",
    "SCHEMA_VERSION",
    "WORLDS",
    "WorldLog",
    "EpisodeHeader",
    "EpisodeLine",
    "EpisodeLog",
    "Rates",
    "SchemaError",
    "load_abstraction_vectors",
    "run_state",
    "load_abstractions",
    "load_benchmark",
    "load_config",
    "load_episodes",
    "load_headers",
    "load_record_keys",
    "load_records",
    "load_stand_ins",
    "load_worlds",
    "misfiled",
    "parse_header",
    "parse_line",
    "read_log",
    "read_at",
    "scan",
    "setting_dirs",
    "summarise",
]

log = logging.getLogger(__name__)

EPISODES = "episodes.jsonl"
#: Per setting: which benchmark ran and what stood in for it (``stand_in``).
BENCHMARK = "benchmark.json"
#: Per setting of a memory design: what the engine knows of each training task's world
#: (:class:`~ap_gym.types.WorldFacts`, one line a task), for the audit's grounded labeller.
WORLDS = "worlds.jsonl"
PHASES = ("train", "eval")
#: The schema this ap-gym writes; :data:`SCHEMAS_READ` the ones it reads.
SCHEMA_VERSION = 2
SCHEMAS_READ = (1, 2)


class SchemaError(APGymError, ValueError):
    """A results line of a schema this ap-gym does not read (written by a newer one)."""


class DamagedLine(ValueError):
    """A line that is not an episode record of any schema (cut, edited, not JSON)."""


@dataclass(frozen=True)
class EpisodeHeader:
    """An episode line without its steps: where the episode sits in the protocol (phase,
    iteration, index, benchmark, [backbone,] policy label, seed, attempts), then what the
    episode came to. What the report, the summary and the viewer's index read."""

    phase: str
    iteration: int
    index: int
    benchmark: str
    policy: str
    seed: int
    attempts: int
    task_id: str
    task_family: str
    instruction: str
    success: bool
    score: float | None
    max_score: float | None
    termination: Termination
    num_steps: int
    parse_failures: int = 0
    wall_time_s: float = 0.0
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    training: bool = False
    policy_info: Mapping[str, Any] = field(default_factory=dict)
    initial_observation: str = ""
    backbone: str | None = None
    schema: int = SCHEMA_VERSION

    @property
    def setting(self) -> str:
        """``<benchmark>/[<backbone>/]<policy>/seed<k>``: a setting's name in summaries and reports."""
        middle = f"{self.backbone}/" if self.backbone else ""
        return f"{self.benchmark}/{middle}{self.policy}/seed{self.seed}"

    @property
    def infrastructure_failure(self) -> bool:
        return self.termination is Termination.INFRA

    @property
    def decisions(self) -> Decisions:
        """The policy's decisions, typed (:class:`~ap_gym.types.Decisions`): what readers use."""
        return Decisions.of(self.policy_info)

    @property
    def outcome(self) -> str:
        """``success``, ``failure`` or ``infrastructure_failure``."""
        if self.infrastructure_failure:
            return Termination.INFRA.value
        return "success" if self.success else "failure"

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens of every LLM call of the episode."""
        return self.usage.tokens

    def to_dict(self) -> dict[str, Any]:
        out = {"phase": self.phase, "iteration": self.iteration, "index": self.index, "benchmark": self.benchmark}
        if self.backbone is not None:  # a run with several backbones: the line names its own
            out["backbone"] = self.backbone
        out.update(policy=self.policy, seed=self.seed, attempts=self.attempts, task_id=self.task_id,
                   task_family=self.task_family, instruction=self.instruction,
                   initial_observation=self.initial_observation, success=self.success, score=self.score,
                   max_score=self.max_score, termination=self.termination.value, num_steps=self.num_steps,
                   parse_failures=self.parse_failures, wall_time_s=self.wall_time_s, usage=self.usage.to_dict(),
                   error=self.error, training=self.training, policy_info=dict(self.policy_info))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], schema: int = SCHEMA_VERSION) -> EpisodeHeader:
        """A head as written; a missing, mistyped or impossible field (a count that is not a
        whole number in range, a score that is not finite, ``"false"`` for a boolean) is a
        :class:`DamagedLine`, quarantined like any other damage."""
        try:
            score, max_score, backbone = d.get("score"), d.get("max_score"), d.get("backbone")
            # a policy's decisions and the usage are secondary: damaged, they read as empty
            info, usage = d.get("policy_info"), d.get("usage")
            info = info if isinstance(info, Mapping) else {}
            usage = _usage(usage) if isinstance(usage, Mapping) else Usage()
            texts = (d["phase"], d["benchmark"], d["policy"], d["task_id"])
            if not all(isinstance(t, str) for t in texts):
                raise TypeError("phase, benchmark, policy and task_id are text")
            return cls(
                phase=d["phase"], iteration=_whole(d["iteration"], "iteration", -1), index=_whole(d["index"], "index"),
                benchmark=d["benchmark"], policy=d["policy"], seed=_whole(d["seed"], "seed", -_MAX_WHOLE),
                attempts=_whole(d.get("attempts", 1), "attempts", 1), task_id=d["task_id"],
                task_family=str(d.get("task_family") or ""), instruction=str(d.get("instruction") or ""),
                success=_flag(d["success"], "success"), score=_finite(score, "score"),
                max_score=_finite(max_score, "max_score"), termination=Termination(d["termination"]),
                num_steps=_whole(d.get("num_steps") or 0, "num_steps"),
                parse_failures=_whole(d.get("parse_failures") or 0, "parse_failures"),
                wall_time_s=_finite(d.get("wall_time_s") or 0.0, "wall_time_s", low=0.0) or 0.0,
                usage=usage, error=d.get("error"), training=_flag(d.get("training", False), "training"),
                policy_info=dict(info), initial_observation=str(d.get("initial_observation") or ""),
                backbone=str(backbone) if backbone else None, schema=schema)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise DamagedLine(f"not an episode head ({type(e).__name__}: {e})") from None


#: The largest whole number a results field may hold (what JSON readers and SQLite keep exactly).
_MAX_WHOLE = 2**53


def _whole(value: Any, name: str, low: int = 0, high: int = _MAX_WHOLE) -> int:
    """A count or index as written: a whole number in ``[low, high]`` (``3.0`` is 3; a
    boolean, a string, ``Infinity`` or ``1e300`` is damage)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} is {value!r}, not a number")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f"{name} is {value!r}, not a whole number")
    if not low <= value <= high:
        raise ValueError(f"{name} is {value!r}, outside {low}..{high}")
    return int(value)


def _finite(value: Any, name: str, low: float = -math.inf) -> float | None:
    """A score or a duration: a finite number (at least ``low``) or absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} is {value!r}, not a number")
    if not math.isfinite(value) or value < low or abs(value) > 1e15:
        raise ValueError(f"{name} is {value!r}, not a finite number in range")
    return float(value)


def _flag(value: Any, name: str) -> bool:
    """A boolean as written: ``true`` or ``false`` (0 and 1 too); the string ``"false"`` is
    not false-y text read as true, it is damage."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} is {value!r}, not true or false")


def _usage(d: Mapping[str, Any]) -> Usage:
    """A usage record; a part of the wrong type reads as empty."""
    try:
        return Usage.from_dict(d)
    except (TypeError, ValueError, AttributeError):
        return Usage()


@dataclass(frozen=True)
class EpisodeLine:
    """One line of ``episodes.jsonl``: its :class:`EpisodeHeader` and the episode's steps."""

    header: EpisodeHeader
    steps: tuple[Step, ...] = ()

    @classmethod
    def of(cls, phase: str, iteration: int, index: int, benchmark: str, policy: str, seed: int, attempts: int,
           episode: Episode, backbone: str | None = None) -> EpisodeLine:
        """The line of ``episode``, played at this place of the protocol."""
        head = {"phase": phase, "iteration": iteration, "index": index, "benchmark": benchmark, "policy": policy,
                "seed": seed, "attempts": attempts, "backbone": backbone, **episode.header_dict()}
        head["seed"] = seed
        return cls(EpisodeHeader.from_dict(head), episode.steps)

    @property
    def episode(self) -> Episode:
        """The :class:`~ap_gym.types.Episode` this line records."""
        h = self.header
        return Episode(task_id=h.task_id, task_family=h.task_family, instruction=h.instruction,
                       initial_observation=h.initial_observation, steps=self.steps, success=h.success,
                       score=h.score, max_score=h.max_score, termination=h.termination, wall_time_s=h.wall_time_s,
                       usage=h.usage, error=h.error, seed=h.seed, policy_info=dict(h.policy_info),
                       training=h.training)

    def to_dict(self) -> dict[str, Any]:
        """The line as written: ``{"schema", "head", "steps"}``, the head first."""
        return {"schema": SCHEMA_VERSION, "head": self.header.to_dict(), "steps": [s.to_dict() for s in self.steps]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def record_fields() -> dict[str, list[str]]:
    """The keys an episode line holds, read off its declaration (:class:`EpisodeHeader`,
    :class:`~ap_gym.types.Step`, :class:`~ap_gym.types.StepTrace`, :class:`~ap_gym.types.Usage`,
    with ``llm_calls``, which ``Usage`` writes as a total): what the viewer's page may read,
    sent in its boot script (a test holds the page's scripts to it)."""
    import dataclasses

    from ap_gym.types import Step, StepTrace, Usage

    return {"head": [f.name for f in dataclasses.fields(EpisodeHeader) if f.name != "schema"],
            "step": [f.name for f in dataclasses.fields(Step)],
            "trace": [f.name for f in dataclasses.fields(StepTrace)],
            "usage": ["llm_calls", *(f.name for f in dataclasses.fields(Usage))]}


# ------------------------------------------------------------------ reading
_HEAD = re.compile(rb'\A\s*\{\s*"schema"\s*:\s*(-?\d+)\s*,\s*"head"\s*:\s*')
_FIRST_CHUNK = 1 << 16
_DECODER = json.JSONDecoder()


def _version(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DamagedLine(f"its schema is {value!r}, not a version number")
    if value not in SCHEMAS_READ:
        raise SchemaError(f"results schema {value} is not one this ap-gym {_package_version()} reads (it reads "
                          f"{', '.join(map(str, SCHEMAS_READ))}): the run was written by another ap-gym; read it "
                          "with that version, or re-run it")
    return value


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:  # from the installed metadata: importing the package's face would load the envs
        return version("ap-gym")
    except PackageNotFoundError:
        return "(not installed)"


#: The trace fields of a schema-1 step (held flat in the step then).
_V1_TRACE = ("prompt", "response", "parse_failure", "reasoning", "candidates", "reduction", "logprob", "messages")


def _from_v1(x: Mapping[str, Any]) -> EpisodeLine:
    """A schema-1 line (one flat object, trace fields inside each step) as a typed line."""
    steps = x.get("steps", [])
    if not isinstance(steps, list):
        raise DamagedLine("its steps are not a list")
    try:
        typed = tuple(Step.from_dict({**{k: v for k, v in s.items() if k not in _V1_TRACE},
                                      "trace": {k: s[k] for k in _V1_TRACE if k in s}}) for s in steps)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DamagedLine(f"a step is damaged ({type(e).__name__}: {e})") from None
    return EpisodeLine(EpisodeHeader.from_dict(x, schema=1), typed)


def _loads(raw: str | bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise DamagedLine(f"not JSON ({e})") from None


def parse_line(raw: str | bytes) -> EpisodeLine:
    """One results line, whole.

    Raises:
        SchemaError: a line of a schema this ap-gym does not read.
        DamagedLine: anything else that is not an episode record.
    """
    x = _loads(raw)
    if not isinstance(x, dict):
        raise DamagedLine(f"a JSON {type(x).__name__}, not an episode record")
    if "schema" not in x:
        if "phase" in x and "task_id" in x:
            return _from_v1(x)
        raise DamagedLine("it names no schema and is not a schema-1 episode line")
    _version(x["schema"])
    head, steps = x.get("head"), x.get("steps")
    if not isinstance(head, dict) or not isinstance(steps, list):
        raise DamagedLine("its head is not an object or its steps not a list")
    try:
        typed = tuple(Step.from_dict(s) for s in steps)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DamagedLine(f"a step is damaged ({type(e).__name__}: {e})") from None
    return EpisodeLine(EpisodeHeader.from_dict(head, schema=int(x["schema"])), typed)


def parse_header(raw: bytes) -> EpisodeHeader:
    """A results line's header, read without parsing its steps (schema 2: only the bytes of
    its head are decoded and parsed; a schema-1 line is parsed whole)."""
    match = _HEAD.match(raw)
    if match is None:
        return parse_line(raw).header
    version = _version(int(match[1]))
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    text, start, size = "", match.end(), _FIRST_CHUNK
    while True:  # the head is a few kB: decode more of the line only when it is longer
        chunk = raw[start:start + size]
        try:
            text += decoder.decode(chunk, final=start + size >= len(raw))
        except UnicodeDecodeError as e:
            raise DamagedLine(f"not UTF-8 ({e})") from None
        start += size
        try:
            head, _ = _DECODER.raw_decode(text)
        except ValueError:
            if start >= len(raw):
                raise DamagedLine("its head is cut short or not JSON") from None
            size *= 4
            continue
        if not isinstance(head, dict):
            raise DamagedLine("its head is not an object")
        return EpisodeHeader.from_dict(head, schema=version)


def scan(path: Path) -> Iterator[tuple[int, int, EpisodeHeader | None]]:
    """``(offset, length, header)`` of every line of a results file, in order: the header is
    ``None`` for a damaged line and for the tail of a line cut by a kill. Reads the file
    once; parses only each line's head.

    Raises:
        SchemaError: a line of a schema this ap-gym does not read.
    """
    offset = 0
    with open(path, "rb") as f:
        for raw in f:
            length = len(raw)
            if raw.strip():
                try:
                    header: EpisodeHeader | None = parse_header(raw.rstrip(b"\r\n"))
                except DamagedLine:
                    header = None
                yield offset, length, header
            offset += length


def read_at(path: Path, offset: int, length: int) -> EpisodeLine:
    """The line at ``offset`` (from :func:`scan`), whole."""
    with open(path, "rb") as f:
        f.seek(offset)
        return parse_line(f.read(length))


def read_log(path: Path, *, headers: bool = False) -> tuple[list[Any], list[tuple[int, str]]]:
    """The records of a results file (:class:`EpisodeLine` s, or their headers only when
    ``headers``) and its damaged lines ``(line number, text)``.

    A last line without its newline is parsed whole even for headers: if it does not parse,
    it was cut by a kill (its head may be whole while its steps are not), and it is neither.

    Raises:
        SchemaError: a line of a schema this ap-gym does not read.
    """
    good: list[Any] = []
    bad: list[tuple[int, str]] = []
    data = path.read_bytes()
    raws = data.split(b"\n")
    for number, raw in enumerate(raws, 1):
        if not raw.strip():
            continue
        tail = number == len(raws) and not data.endswith(b"\n")
        try:
            if tail:
                line = parse_line(raw)
                good.append(line.header if headers else line)
            else:
                good.append(parse_header(raw) if headers else parse_line(raw))
        except DamagedLine:
            if not tail:
                bad.append((number, raw.decode("utf-8", errors="replace")))
    return good, bad


class EpisodeLog:
    """``episodes.jsonl`` of one setting: appended line by line, flushed, re-read on resume.

    On resume every line is parsed whole (a line whose steps are damaged is moved aside and
    its episode played again), but only each line's header (what resume asks about) and its
    bytes (what a rewrite keeps) are kept.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: list[tuple[EpisodeHeader, bytes]] = []
        if path.exists():
            bad = self._read()
            if bad:
                quarantine = path.with_name(path.name + ".bad")
                with open(quarantine, "ab") as f:
                    f.writelines(raw + b"\n" for _, raw in bad)
                log.warning("%s: %d damaged line(s) (numbers %s) moved to %s; every valid line is kept",
                            path, len(bad), ", ".join(str(n) for n, _ in bad[:10]), quarantine)
            self._rewrite()

    def _read(self) -> list[tuple[int, bytes]]:
        data = self.path.read_bytes()
        raws = data.split(b"\n")
        bad: list[tuple[int, bytes]] = []
        seen: set[tuple[Any, ...]] = set()
        for number, raw in enumerate(raws, 1):
            if not raw.strip():
                continue
            try:
                header = parse_line(raw).header
                if episode_key(header) in seen:  # a copy of an earlier line: set aside with the damage
                    bad.append((number, raw))
                    continue
                seen.add(episode_key(header))
                self._lines.append((header, raw))
            except DamagedLine:
                if not (number == len(raws) and not data.endswith(b"\n")):  # not a kill's cut tail
                    bad.append((number, raw))
        return bad

    @property
    def headers(self) -> list[EpisodeHeader]:
        return [h for h, _ in self._lines]

    def _rewrite(self) -> None:
        atomic_write_text(self.path, "".join(raw.decode("utf-8") + "\n" for _, raw in self._lines))

    def append(self, line: EpisodeLine) -> None:
        raw = line.to_json().encode("utf-8")
        self._lines.append((line.header, raw))
        with open(self.path, "ab") as f:
            f.write(raw + b"\n")
            f.flush()

    def drop(self, phase: str, iteration: int) -> None:
        before = len(self._lines)
        self._lines = [(h, raw) for h, raw in self._lines if not (h.phase == phase and h.iteration == iteration)]
        if len(self._lines) != before:
            self._rewrite()

    def count(self, phase: str, iteration: int) -> int:
        return sum(1 for h, _ in self._lines if h.phase == phase and h.iteration == iteration)

    def done(self, phase: str, iteration: int) -> dict[str, EpisodeHeader]:
        return {h.task_id: h for h, _ in self._lines if h.phase == phase and h.iteration == iteration}


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


def _order(h: EpisodeHeader) -> tuple[Any, ...]:
    return (h.benchmark, h.backbone or "", h.policy, h.seed, h.iteration, h.phase, h.index)


def misfiled(header: EpisodeHeader, setting: str) -> bool:
    """Whether a line says it belongs to another setting than the directory it is in (an
    edited or copied line): read as damaged, never filed under a policy the run lacks."""
    return header.setting != setting


def episode_key(h: EpisodeHeader) -> tuple[Any, ...]:
    """Where an episode sits in its run: one line per key (a second line of a key is a copy)."""
    return (h.benchmark, h.backbone or "", h.policy, h.seed, h.phase, h.iteration, h.index)


def _load(run_dir: str | Path, headers: bool) -> list[Any]:
    found = []
    for directory in setting_dirs(run_dir):
        good, bad = read_log(directory / EPISODES, headers=headers)
        setting = directory.relative_to(run_dir).as_posix()
        kept = [x for x in good if not misfiled(x if headers else x.header, setting)]
        seen: set[tuple[Any, ...]] = set()
        unique = []
        for x in kept:  # a line written twice (an edit, a second writer) counts once: the first
            key = episode_key(x if headers else x.header)
            if key not in seen:
                seen.add(key)
                unique.append(x)
        if bad or len(unique) < len(good):
            log.warning("%s: skipped %d damaged line(s), %d that name another setting than %s and %d copies of a "
                        "line before them", directory / EPISODES, len(bad), len(good) - len(kept), setting,
                        len(kept) - len(unique))
        found += unique
    return sorted(found, key=lambda x: _order(x if headers else x.header))


def load_episodes(run_dir: str | Path) -> list[EpisodeLine]:
    """Every episode line of a run (all settings), whole, in a stable order; damaged lines
    are skipped with a warning.

    Raises:
        SchemaError: a line of a schema this ap-gym does not read.
    """
    return _load(run_dir, headers=False)


def load_headers(run_dir: str | Path) -> list[EpisodeHeader]:
    """Every episode line's header (no steps parsed), in :func:`load_episodes`' order."""
    return _load(run_dir, headers=True)


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
    def of(cls, headers: Iterable[EpisodeHeader]) -> Rates:
        n = infra = wins = 0
        for h in headers:
            n += 1
            if h.infrastructure_failure:
                infra += 1
            elif h.success:
                wins += 1
        return cls(n, infra, wins)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(run_dir: str | Path) -> dict[str, Any]:
    """Per setting and iteration: held-out success, score, LLM calls, steps (no timings,
    so an interrupted and an uninterrupted run summarise identically).

    Infrastructure failures are counted, and success is given both ways (:class:`Rates`):
    over the valid episodes (``success_rate``, the rate the other means use) and with every
    infrastructure failure counted as a failure (``success_rate_infra_as_failure``).
    """
    groups: dict[tuple[str, int], list[EpisodeHeader]] = {}
    for h in load_headers(run_dir):
        if h.phase == "eval":
            groups.setdefault((h.setting, h.iteration), []).append(h)
    settings: dict[str, Any] = {}
    for (key, it), eps in groups.items():
        valid = [e for e in eps if not e.infrastructure_failure]
        rates = Rates.of(eps)
        entry = {
            "iteration": it,
            "episodes": rates.episodes,
            "infrastructure_failures": rates.infrastructure_failures,
            "success_rate": rates.rate,
            "success_rate_infra_as_failure": rates.rate_all,
            "mean_llm_calls": _mean([e.usage.llm_calls for e in valid]),
            "mean_acting_calls": _mean([e.usage.calls_for("acting") for e in valid]),
            "mean_synthesis_calls": _mean([e.usage.llm_calls - e.usage.calls_for("acting") for e in valid]),
            "mean_tokens": _mean([e.usage.tokens for e in valid]),
            "mean_steps": _mean([e.num_steps for e in valid]),
            "successes": sorted(e.task_id for e in valid if e.success),
        }
        settings.setdefault(key, []).append(entry)
    return {"settings": settings,
            "final": {k: {kk: max(v, key=lambda e: e["iteration"])[kk]
                          for kk in ("iteration", "episodes", "infrastructure_failures", "success_rate",
                                     "success_rate_infra_as_failure", "mean_llm_calls", "mean_tokens", "mean_steps")}
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


class WorldLog:
    """A setting's ``worlds.jsonl``: each task's :class:`~ap_gym.types.WorldFacts`, written
    once, the first time a training episode of the task ends (appended and flushed, so a
    killed run keeps what it wrote; a torn last line is skipped on reading)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.known = set(load_worlds(self.path.parent))

    def add(self, env: Any, task_id: str) -> None:
        """Ask ``env`` (a :class:`~ap_gym.envs.TextEnv`) for ``task_id``'s facts, once; an
        engine that cannot say (``None``, no ``world_facts``) or fails is skipped."""
        if task_id in self.known:
            return
        self.known.add(task_id)
        ask = getattr(env, "world_facts", None)
        try:
            facts = ask(task_id) if callable(ask) else None
        except Exception as e:  # the audit loses a check, the run loses nothing
            log.warning("no world facts for %s: %s", task_id, e)
            return
        if facts is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(facts.to_dict()) + "\n")


def load_worlds(setting_dir: str | Path) -> dict[str, Any]:
    """Task id -> :class:`~ap_gym.types.WorldFacts` of a setting (``{}`` without a
    ``worlds.jsonl``; damaged lines are skipped)."""
    from ap_gym.types import WorldFacts

    out: dict[str, Any] = {}
    with contextlib.suppress(OSError):
        for raw in (Path(setting_dir) / WORLDS).read_bytes().splitlines():
            # a line that is not UTF-8 or not JSON is damage: skipped, never a stopped resume
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                facts = WorldFacts.from_dict(json.loads(raw.decode("utf-8")))
                out[facts.task_id] = facts
    return out


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


#: Written by the process running a grid while it runs (pid, host, start), removed when it
#: stops: a run without ``summary.json`` is being written only if that process still runs.
RUNNING = "running.json"


def run_state(run_dir: str | Path) -> tuple[str, str]:
    """Whether a run is ``finished``, ``running`` or ``stopped``, and how that is known.

    A run killed mid-grid has no ``summary.json`` either: only its own process, named in
    ``running.json``, tells a run still being written from one that will not be."""
    import socket

    from ap_gym.processes import process_alive, process_started

    run_dir = Path(run_dir)
    if (run_dir / "summary.json").exists():
        return "finished", "summary.json is written"
    try:
        info = json.loads((run_dir / RUNNING).read_text(encoding="utf-8"))
        pid, host, started = info["pid"], info["host"], info.get("started")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or not isinstance(host, str) or not host:
            raise ValueError(f"pid {pid!r} on host {host!r}")
    except FileNotFoundError:
        return "stopped", "no summary.json and no process writing it: run the same command again to resume"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "stopped", f"{RUNNING} is unreadable and there is no summary.json: run the same command again to resume"
    if host.rstrip(".").lower() != socket.gethostname().rstrip(".").lower():
        return "running", f"written by process {pid} on {host}, which this machine cannot check"
    # on this machine the run's OS lock says it: held while its writer lives, gone with it
    from ap_gym.paths import lock_held

    held = lock_held(run_dir.parent / f".{run_dir.name}.lock")
    if held is not None:
        return ("running", f"process {pid} is writing it") if held else ("stopped", (
            f"process {pid}, which was writing it, is gone (killed?): run the same command again to resume"))
    if process_alive(pid) and started is not None and started == process_started(pid):
        return "running", f"process {pid} is writing it"
    return "stopped", (f"process {pid}, which was writing it, is gone (killed?): run the same command again to "
                       "resume")
