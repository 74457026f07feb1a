"""The results format: damaged lines never hide valid ones; reading results needs no runner."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ap_gym.protocol.results import EpisodeLine, EpisodeLog, load_episodes, parse_line, summarise
from ap_gym.types import Episode, Termination


def _line(index: int, success: bool = False) -> EpisodeLine:
    episode = Episode(task_id=f"t{index}", task_family="f", instruction="i", initial_observation="o", steps=(),
                      success=success, score=None, max_score=None,
                      termination=Termination.WON if success else Termination.STEP_LIMIT, seed=0)
    return EpisodeLine.of("eval", 0, index, "bench", "p", 0, 1, episode)


def test_a_damaged_middle_line_is_quarantined_and_every_valid_line_kept(tmp_path, caplog):
    directory = tmp_path / "bench" / "p" / "seed0"
    directory.mkdir(parents=True)
    path = directory / "episodes.jsonl"
    log = EpisodeLog(path)
    for i in range(5):
        log.append(_line(i, success=i == 4))
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:40] + "\x00garbage"  # damaged in the middle
    path.write_text("\n".join(lines) + "\n" + '{"phase": "ev')  # and a tail cut by a kill
    assert [x.header.index for x in load_episodes(tmp_path)] == [0, 1, 3, 4]
    assert summarise(tmp_path)["final"]["bench/p/seed0"]["success_rate"] == 0.25
    resumed = EpisodeLog(path)
    assert [h.index for h in resumed.headers] == [0, 1, 3, 4]
    assert "damaged" in caplog.text and "episodes.jsonl.bad" in caplog.text
    assert (directory / "episodes.jsonl.bad").read_text().startswith(lines[2][:40])
    assert [parse_line(x).header.index for x in path.read_text().splitlines()] == [0, 1, 3, 4]


def test_reading_results_does_not_import_the_runner():
    code = ("import sys, ap_gym.protocol.results as r; "
            "print(any(m.startswith(('ap_gym.protocol.loop', 'ap_gym.protocol.executors')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_setting_with_no_valid_episode_reports_no_rate(tmp_path):
    directory = tmp_path / "bench" / "p" / "seed0"
    directory.mkdir(parents=True)
    log = EpisodeLog(directory / "episodes.jsonl")
    for i in range(3):
        episode = Episode(task_id=f"t{i}", task_family="f", instruction="", initial_observation="", steps=(),
                          success=False, score=None, max_score=None, termination=Termination.INFRA, seed=0)
        log.append(EpisodeLine.of("eval", 0, i, "bench", "p", 0, 3, episode))
    entry = summarise(tmp_path)["settings"]["bench/p/seed0"][0]
    assert entry["infrastructure_failures"] == 3 and entry["success_rate"] is None and entry["mean_steps"] is None


def test_infrastructure_failures_are_counted_and_success_given_both_ways(tmp_path):
    directory = tmp_path / "bench" / "p" / "seed0"
    directory.mkdir(parents=True)
    log = EpisodeLog(directory / "episodes.jsonl")
    for i in range(4):  # 2 valid (1 success), 2 infrastructure failures
        termination = Termination.INFRA if i >= 2 else (Termination.WON if i == 0 else Termination.STEP_LIMIT)
        episode = Episode(task_id=f"t{i}", task_family="f", instruction="", initial_observation="", steps=(),
                          success=i == 0, score=None, max_score=None, termination=termination, seed=0)
        log.append(EpisodeLine.of("eval", 0, i, "bench", "p", 0, 1, episode))
    final = summarise(tmp_path)["final"]["bench/p/seed0"]
    assert final["episodes"] == 4 and final["infrastructure_failures"] == 2
    assert final["success_rate"] == 0.5 and final["success_rate_infra_as_failure"] == 0.25


def _big_line(steps: int = 2_000) -> EpisodeLine:
    from ap_gym.types import Step, StepTrace

    prompt = "You are in a kitchen. " * 250  # ~5 kB a step: 2,000 steps are a 10 MB line
    episode = Episode(task_id="t", task_family="f", instruction="i", initial_observation="o",
                      steps=tuple(Step("look", "A kitchen.", 0.0, trace=StepTrace(prompt=prompt)) for _ in range(steps)),
                      success=True, score=1.0, max_score=1.0, termination=Termination.WON, seed=0)
    return EpisodeLine.of("eval", 0, 0, "bench", "p", 0, 1, episode)


def test_a_header_is_read_without_parsing_the_steps():
    """A 10 MB line whose steps are not even JSON still gives its header: the header read
    never parses them; the whole-line read refuses the same line."""
    import pytest

    from ap_gym.protocol.results import DamagedLine, parse_header

    raw = _big_line().to_json().encode()
    assert len(raw) > 10_000_000
    broken = raw[: raw.index(b'"steps": [') + 10] + b"{not json" + raw[-2_000_000:]
    header = parse_header(broken)
    assert header.num_steps == 2_000 and header.success and header.schema == 2
    with pytest.raises(DamagedLine):
        parse_line(broken)
    assert parse_header(raw) == parse_line(raw).header


def test_every_line_names_its_schema_and_an_unknown_one_is_refused(tmp_path):
    import pytest

    from ap_gym.protocol.results import SCHEMA_VERSION, SchemaError, load_headers

    line = _line(0)
    assert json.loads(line.to_json())["schema"] == SCHEMA_VERSION
    directory = tmp_path / "bench" / "p" / "seed0"
    directory.mkdir(parents=True)
    future = {**line.to_dict(), "schema": 99}
    (directory / "episodes.jsonl").write_text(json.dumps(future) + "\n")
    for read in (load_episodes, load_headers):
        with pytest.raises(SchemaError, match="schema 99"):
            read(tmp_path)
    with pytest.raises(SchemaError, match="schema 99"):
        EpisodeLog(directory / "episodes.jsonl")  # a resume refuses it too, rather than overwrite it


def test_a_run_of_the_earlier_format_still_loads(tmp_path):
    """Schema 1 (before the schema was versioned): one flat object, trace fields in each step."""
    from ap_gym.protocol.results import load_headers

    v1 = {"phase": "eval", "iteration": 0, "index": 0, "benchmark": "bench", "policy": "p", "seed": 0, "attempts": 1,
          "task_id": "t0", "task_family": "f", "instruction": "i", "initial_observation": "o", "success": True,
          "score": 1.0, "max_score": 1.0, "termination": "won", "num_steps": 1, "parse_failures": 1,
          "wall_time_s": 0.5, "usage": {"llm_calls": 1, "calls": {"acting": 1}, "prompt_tokens": {"acting": 7},
                                        "completion_tokens": {"acting": 2}, "embedding_calls": 0},
          "error": None, "training": False, "policy_info": {"mode": "none"},
          "steps": [{"action": "look", "observation": "A room.", "reward": 1.0, "score": 1.0, "prompt": "P",
                     "response": "look!", "parse_failure": True, "reasoning": None,
                     "candidates": [["look", -0.5]], "reduction": "sum"}]}
    directory = tmp_path / "bench" / "p" / "seed0"
    directory.mkdir(parents=True)
    (directory / "episodes.jsonl").write_text(json.dumps(v1) + "\n")
    (line,) = load_episodes(tmp_path)
    assert line.header.schema == 1 and line.header.policy_info == {"mode": "none"} and line.header.tokens == 9
    step = line.steps[0]
    assert (step.action, step.trace.prompt, step.trace.parse_failure, step.trace.candidates) == \
        ("look", "P", True, (("look", -0.5),))
    assert line.episode.parse_failures == 1 and load_headers(tmp_path) == [line.header]
    assert summarise(tmp_path)["final"]["bench/p/seed0"]["success_rate"] == 1.0


def test_a_line_round_trips_through_the_one_reader():
    line = _line(3, success=True)
    assert parse_line(line.to_json()) == line
    assert line.episode == parse_line(line.to_json()).episode


#: Keys only an episode record has: read by string key anywhere but the results module (and
#: the record's own definition in ap_gym.types), they are a second reader of the format.
RECORD_ONLY_KEYS = {"termination", "num_steps", "parse_failures", "wall_time_s", "policy_info",
                    "initial_observation", "attempts", "head", "trace", "schema"}


def _string_key_reads(path):
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop") \
                and node.args and isinstance(node.args[0], ast.Constant):
            key = node.args[0].value
        else:
            continue
        if key in RECORD_ONLY_KEYS:
            yield f"{path}:{node.lineno}: [{key!r}]"


def test_no_module_reads_the_record_by_key_but_the_results_module():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    package = root / "ap_gym"
    found = [hit for path in sorted(package.rglob("*.py")) + sorted((root / "benchmarks").rglob("*.py"))
             # trainlog.py reads its own format's header, whose key was once also called "schema"
             if path.relative_to(root).as_posix() not in ("ap_gym/protocol/results.py", "ap_gym/types.py",
                                                          "ap_gym/trainlog.py")
             for hit in _string_key_reads(path)]
    # the viewer's page reads the API's JSON by property, never by a record key in brackets
    from tests.helpers import viewer_js

    script = viewer_js()
    found += [f"app.js: [{m!r}]" for m in re.findall(r"\[\s*[\"'](\w+)[\"']\s*\]", script) if m in RECORD_ONLY_KEYS]
    assert not found, "episode records read outside ap_gym.protocol.results:\n" + "\n".join(found)


def _tiny_run(tmp_path):
    directory = tmp_path / "bench" / "p" / "seed0"
    directory.mkdir(parents=True)
    log = EpisodeLog(directory / "episodes.jsonl")
    for i in range(4):
        log.append(_line(i, success=i % 2 == 0))
    return tmp_path


@pytest.mark.parametrize(("field", "value"), [
    ("iteration", float("inf")), ("iteration", 1e300), ("num_steps", float("inf")), ("index", -3),
    ("wall_time_s", float("nan")), ("score", float("inf")), ("success", "false"), ("training", "yes"),
    ("seed", True), ("attempts", 0), ("iteration", 2.5),
])
def test_an_impossible_number_or_a_boolean_as_text_is_damage_not_a_crash_or_a_value(tmp_path, field, value):
    """One line with ``Infinity``, ``1e300``, NaN or ``"false"`` made a whole run unreadable
    (OverflowError, IntegrityError) or counted a failure as a success: it is a damaged line,
    set aside, and every other line reads."""
    import json

    from ap_gym.protocol.results import DamagedLine, EpisodeLog, load_headers, parse_line

    run_dir = _tiny_run(tmp_path)
    episodes = next(run_dir.glob("*/*/seed0/episodes.jsonl"))
    lines = episodes.read_text().splitlines()
    first = json.loads(lines[0])
    first["head"][field] = value
    bad = json.dumps(first)  # Python writes Infinity and NaN as JSON readers of them do
    with pytest.raises(DamagedLine):
        parse_line(bad)
    episodes.write_text("\n".join([bad, *lines[1:]]) + "\n")
    assert len(load_headers(run_dir)) == len(lines) - 1
    log = EpisodeLog(episodes)  # resume: set aside, the rest kept
    assert len(log.headers) == len(lines) - 1 and episodes.with_name("episodes.jsonl.bad").exists()


def test_a_line_written_twice_counts_once(tmp_path):
    from ap_gym.protocol.results import EpisodeLog, load_headers

    run_dir = _tiny_run(tmp_path)
    episodes = next(run_dir.glob("*/*/seed0/episodes.jsonl"))
    lines = episodes.read_text().splitlines()
    episodes.write_text("\n".join([*lines, lines[0]]) + "\n")
    assert len(load_headers(run_dir)) == len(lines)
    assert len(EpisodeLog(episodes).headers) == len(lines)


def test_a_worlds_file_with_bytes_that_are_not_utf8_loses_only_that_line(tmp_path):
    from ap_gym.protocol.results import load_worlds

    (tmp_path / "worlds.jsonl").write_bytes(b'{"task_id": "a"\xff}\n')
    assert load_worlds(tmp_path) == {}


@pytest.mark.parametrize("forged", [
    {"pid": "PID.5", "host": "HOST", "started": "1"}, {"pid": "PID", "host": "HOST"},
    {"pid": "PID", "host": "HOST.", "started": None}, {"pid": True, "host": "HOST", "started": "1"},
])
def test_a_forged_running_json_does_not_read_as_running(tmp_path, forged):
    """A fractional pid, no start time or a host with a trailing dot read as 'running'."""
    import os
    import socket

    from ap_gym.protocol.results import run_state

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data = {k: (os.getpid() + 0.5 if v == "PID.5" else os.getpid() if v == "PID" else socket.gethostname()
                + ("." if v == "HOST." else "") if isinstance(v, str) and v.startswith("HOST") else v)
            for k, v in forged.items()}
    (run_dir / "running.json").write_text(json.dumps(data))
    assert run_state(run_dir)[0] == "stopped", data


def test_a_runs_lock_tells_a_live_writer_from_a_dead_one(tmp_path):
    import os
    import socket

    from ap_gym.paths import exclusive_lock
    from ap_gym.protocol.loop import mark_running
    from ap_gym.protocol.results import run_state

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with exclusive_lock(tmp_path / ".run.lock", "run"):
        mark_running(run_dir)
        assert run_state(run_dir)[0] == "running"
    assert run_state(run_dir)[0] == "stopped"  # the lock is free: its writer is gone, whatever the pid says
    assert json.loads((run_dir / "running.json").read_text())["pid"] == os.getpid()
    assert socket.gethostname()
