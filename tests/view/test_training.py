"""The Training page's data: every training log under the paths given, read as written."""

from __future__ import annotations

import json

import pytest

from ap_gym.trainlog import TrainingLog
from ap_gym.view import Viewer
from ap_gym.view.training import find_logs, training_logs


def _log(path, rule, n, **extra):
    log = TrainingLog(path, run=f"r/{rule}", rule=rule, config={"lr": 1e-5})
    for u in range(1, n + 1):
        log.write(update=u, reward=u / n, loss=None if u == 2 else -u / 10, episodes=4, **extra)
    return path


def test_logs_are_found_under_runs_directories_and_files(tmp_path):
    a = _log(tmp_path / "x" / "grpo" / "training.jsonl", "grpo", 3)
    b = _log(tmp_path / "y.jsonl", "rebn", 2)
    (tmp_path / "x" / "other").mkdir()
    (tmp_path / "x" / "other" / "training.jsonl").write_text('{"not": "a training log"}\n{"update": 1}\n')
    (tmp_path / "x" / ".view").mkdir()
    _log(tmp_path / "x" / ".view" / "training.jsonl", "hidden", 1)  # the viewer's own folder is not searched
    assert find_logs([tmp_path / "x", b, tmp_path / "x" / "grpo"]) == [a, b]  # each once, headers checked


def test_the_data_are_the_files_lines_with_episodes_played(tmp_path):
    path = _log(tmp_path / "l" / "training.jsonl", "gigpo", 4)
    (log,) = training_logs([tmp_path / "l"])["logs"]
    lines = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    assert [r["update"] for r in log["rows"]] == [x["update"] for x in lines]
    assert [r["loss"] for r in log["rows"]] == [x["loss"] for x in lines]  # None stays missing, not 0
    assert [r["episodes_seen"] for r in log["rows"]] == [4.0, 8.0, 12.0, 16.0]
    assert log["metrics"] == ["episodes", "episodes_seen", "loss", "reward"] and log["name"] == "r/gigpo"
    assert log["config"] == {"lr": 1e-5}


def test_a_directory_of_logs_alone_is_a_viewer_and_anything_else_is_refused(tmp_path):
    _log(tmp_path / "learning" / "grpo" / "training.jsonl", "grpo", 2)
    viewer = Viewer([tmp_path / "learning"])
    try:
        assert viewer.runs() == [] and len(viewer.training()["logs"]) == 1
    finally:
        viewer.close()
    (tmp_path / "empty").mkdir()
    with pytest.raises((FileNotFoundError, ValueError)):
        Viewer([tmp_path / "empty"])


def test_the_log_refuses_non_numbers_and_reads_the_older_header_key(tmp_path):
    log = TrainingLog(tmp_path / "t.jsonl", run="r")
    with pytest.raises(ValueError, match="loss=nan"):
        log.write(update=1, loss=float("nan"))
    with pytest.raises(ValueError, match="not a finite number"):
        log.write(update=1, reward=True)
    old = tmp_path / "old" / "training.jsonl"  # written before the header's key was renamed "format"
    old.parent.mkdir()
    old.write_text('{"schema": "ap-gym-training/1", "run": "old", "rule": "grpo"}\n{"update": 1, "reward": 0.5}\n')
    assert TrainingLog.header(old)["run"] == "old" and TrainingLog.read(old) == [{"update": 1, "reward": 0.5}]
    assert find_logs([tmp_path / "old"]) == [old]


def test_a_log_whose_rule_is_a_number_or_a_fifo_named_like_a_log_hides_nothing(tmp_path):
    """One log whose header's rule was a number gave /api/training a 500 (every log hidden); a
    FIFO named training.jsonl hung `ap-gym view`."""
    import os

    from fastapi.testclient import TestClient

    from ap_gym.view.app import create_app

    _log(tmp_path / "runs" / "good" / "training.jsonl", "grpo", 2)
    odd = tmp_path / "runs" / "odd" / "training.jsonl"
    odd.parent.mkdir(parents=True)
    odd.write_text(json.dumps({"format": "ap-gym-training/1", "run": "odd", "rule": 7, "config": [1]}) + "\n"
                   + json.dumps({"update": 1, "loss": 0.5}) + "\n")
    (tmp_path / "runs" / "pipe").mkdir()
    os.mkfifo(tmp_path / "runs" / "pipe" / "training.jsonl")
    viewer = Viewer([tmp_path / "runs"])
    try:
        answer = TestClient(create_app(viewer), base_url="http://127.0.0.1").get("/api/training")
        assert answer.status_code == 200
        names = sorted(log["name"] for log in answer.json()["logs"])
        assert names == ["odd (7)", "r/grpo"]
    finally:
        viewer.close()


def test_a_file_that_is_not_a_training_log_is_refused_with_what_view_takes(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(ValueError, match="neither a run directory nor a training log"):
        Viewer([other])
