"""The results format: damaged lines never hide valid ones; reading results needs no runner."""

from __future__ import annotations

import json
import subprocess
import sys

from ap_gym.protocol.results import EpisodeLine, EpisodeLog, load_episodes, summarise
from ap_gym.types import Episode, Termination


def _line(index: int, success: bool = False) -> EpisodeLine:
    episode = Episode(task_id=f"t{index}", task_family="f", instruction="i", initial_observation="o", steps=(),
                      success=success, score=None, max_score=None,
                      termination=Termination.WON if success else Termination.STEP_LIMIT, seed=0)
    return EpisodeLine("eval", 0, index, "bench", "p", 0, 1, episode.to_dict())


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
    assert [x["index"] for x in load_episodes(tmp_path)] == [0, 1, 3, 4]
    assert summarise(tmp_path)["final"]["bench/p/seed0"]["success_rate"] == 0.25
    resumed = EpisodeLog(path)
    assert [x["index"] for x in resumed.lines] == [0, 1, 3, 4]
    assert "damaged" in caplog.text and "episodes.jsonl.bad" in caplog.text
    assert (directory / "episodes.jsonl.bad").read_text().startswith(lines[2][:40])
    assert [json.loads(x)["index"] for x in path.read_text().splitlines()] == [0, 1, 3, 4]


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
        log.append(EpisodeLine("eval", 0, i, "bench", "p", 0, 3, episode.to_dict()))
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
        log.append(EpisodeLine("eval", 0, i, "bench", "p", 0, 1, episode.to_dict()))
    final = summarise(tmp_path)["final"]["bench/p/seed0"]
    assert final["episodes"] == 4 and final["infrastructure_failures"] == 2
    assert final["success_rate"] == 0.5 and final["success_rate_infra_as_failure"] == 0.25
