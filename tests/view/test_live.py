"""The viewer on a run still being written, and its search, sorting, matrix, diff and export
(through the API; the browser tests drive the same through the page)."""

from __future__ import annotations

import json
import shutil

import pytest
from fastapi.testclient import TestClient

from ap_gym.protocol.loop import mark_running
from ap_gym.protocol.results import load_episodes, run_state
from ap_gym.view import Viewer, create_app
from tests.helpers import copy_run

_copy = copy_run


def test_new_episodes_appear_without_a_restart_and_only_the_tail_is_read(view_run, tmp_path):
    run = _copy(view_run, tmp_path)
    episodes = sorted(run.rglob("episodes.jsonl"))[0]
    lines = episodes.read_text().splitlines(keepends=True)
    episodes.write_text("".join(lines[:-3]))  # the run as it was three episodes ago
    (run / "summary.json").unlink(missing_ok=True)
    mark_running(run)  # this process writes it
    viewer = Viewer([run])
    client = TestClient(create_app(viewer), base_url="http://127.0.0.1")
    before = client.get("/api/run/0/status").json()
    assert before["live"] and before["episodes"] == len(load_episodes(run))
    with episodes.open("a") as f:
        f.write(lines[-3])
        f.write(lines[-2][:40])  # a line still being written: not read yet
    assert viewer.catch_up()
    assert client.get("/api/run/0/status").json()["episodes"] == before["episodes"] + 1
    with episodes.open("a") as f:
        f.write(lines[-2][40:])
        f.write(lines[-1])
    assert viewer.catch_up()
    assert client.get("/api/run/0/status").json()["episodes"] == before["episodes"] + 3
    rows = client.get("/api/run/0/episodes", params={"per_page": 1000}).json()["rows"]
    assert all(client.get(f"/api/run/0/episode/{r['id']}").status_code == 200 for r in rows[-3:])
    assert not viewer.catch_up()  # nothing new
    viewer.close()


def test_a_killed_run_is_stopped_not_live_for_ever(view_run, tmp_path):
    """Without summary.json a run is live only while the process named in running.json runs
    (issue 43: a killed run showed "live" for ever)."""
    import json as _json
    import os
    import socket
    import subprocess
    import sys

    run = _copy(view_run, tmp_path)
    assert run_state(run)[0] == "finished"
    (run / "summary.json").unlink()
    assert run_state(run) == ("stopped", "no summary.json and no process writing it: run the same command again "
                                         "to resume")
    mark_running(run)
    assert run_state(run)[0] == "running"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a process that was writing it and is gone
    (run / "running.json").write_text(_json.dumps({"pid": child.pid, "host": socket.gethostname(), "started": "1"}))
    state, why = run_state(run)
    assert state == "stopped" and f"process {child.pid}" in why and "gone" in why
    # a live pid that is another process (the pid reused after the writer died) is not the writer
    (run / "running.json").write_text(_json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": "1"}))
    assert run_state(run)[0] == "stopped"
    (run / "running.json").write_text(_json.dumps({"pid": 1, "host": "another-host", "started": "1"}))
    assert run_state(run)[0] == "running"  # another machine's process: not checkable, said so
    viewer = Viewer([run])
    try:
        status = TestClient(create_app(viewer), base_url="http://127.0.0.1").get("/api/run/0/status").json()
        assert status["state"] == "running" and "another-host" in status["why"]
    finally:
        viewer.close()


def test_episodes_sort_server_side(view_run):
    viewer = Viewer([view_run])
    client = TestClient(create_app(viewer), base_url="http://127.0.0.1")
    page = client.get("/api/run/0/episodes", params={"sort": "num_steps", "desc": "true", "per_page": 1000}).json()
    steps = [r["num_steps"] for r in page["rows"]]
    assert steps == sorted(steps, reverse=True) and len(steps) == page["total"]
    asc = client.get("/api/run/0/episodes", params={"sort": "task_id", "per_page": 5, "phase": "eval"}).json()
    assert [r["task_id"] for r in asc["rows"]] == sorted(r["task_id"] for r in asc["rows"])
    bad = client.get("/api/run/0/episodes", params={"sort": "file"})
    assert bad.status_code == 400 and "sortable" in bad.json()["detail"]
    viewer.close()


def test_the_matrix_counts_held_out_successes_per_task_and_policy(view_run):
    viewer = Viewer([view_run])
    matrix = viewer.index(0).matrix()
    lines = [x for x in load_episodes(view_run) if x.header.phase == "eval" and x.header.termination != "infrastructure_failure"]
    last = max(x.header.iteration for x in lines)
    final = [x for x in lines if x.header.iteration == last]
    for row in matrix["rows"]:
        for policy, cell in row["cells"].items():
            mine = [x for x in final if x.header.task_id == row["task_id"] and x.header.policy == policy]
            assert cell == {"n": len(mine), "won": sum(x.header.success for x in mine)}
    split = viewer.index(0).matrix(split_seeds=True)
    assert all(" seed" in c for c in split["columns"]) and len(split["columns"]) >= len(matrix["columns"])
    with pytest.raises(ValueError, match="no benchmark"):
        viewer.index(0).matrix("nethack")
    viewer.close()


def test_two_runs_configs_diff(view_run, tmp_path):
    other = _copy(view_run, tmp_path, "other")
    meta = json.loads((other / "config.json").read_text())
    meta["config"]["heldout"] = 99
    meta["config"]["seeds"] = [7]
    meta["config"]["only_here"] = None  # a key one side lacks: absent there, never "null / null"
    (other / "config.json").write_text(json.dumps(meta))
    viewer = Viewer([view_run, other])
    client = TestClient(create_app(viewer), base_url="http://127.0.0.1")
    diff = client.get("/api/diff", params={"a": 0, "b": 1}).json()
    assert {d["key"] for d in diff["differences"]} >= {"heldout", "seeds"} and diff["same"] > 5
    assert next(d for d in diff["differences"] if d["key"] == "heldout")["b"] == 99
    only = next(d for d in diff["differences"] if d["key"] == "only_here")
    assert "a" not in only and only["b"] is None
    viewer.close()


def test_search_finds_a_step_and_an_export_is_the_line(view_run):
    viewer = Viewer([view_run])
    viewer.catch_up()
    line = next(x for x in load_episodes(view_run) if x.steps)
    word = next(w for w in line.steps[0].action.split() if w.isalpha() and len(w) > 2) \
        if any(w.isalpha() and len(w) > 2 for w in line.steps[0].action.split()) else line.header.task_id.split("/")[0]
    client = TestClient(create_app(viewer), base_url="http://127.0.0.1")
    found = client.get("/api/run/0/search", params={"q": word}).json()
    assert found["status"]["ready"] and found["hits"]
    assert all("[" in h["snippet"] for h in found["hits"]) and all(h["row"]["id"] == h["episode"] for h in found["hits"])
    one = client.get("/api/run/0/search", params={"q": word, "limit": 1}).json()
    assert len(one["hits"]) == 1 and one["total"] == found["total"] >= len(found["hits"])  # the page says "1 of N"
    assert client.get("/api/run/0/search", params={"q": "zzqqxx-nothing"}).json()["hits"] == []
    assert client.get("/api/run/0/search", params={"q": '"( AND OR *'}).status_code == 200  # no syntax errors
    exported = client.get(f"/api/run/0/episode/{found['hits'][0]['episode']}/export")
    assert exported.status_code == 200 and "attachment" in exported.headers["content-disposition"]
    assert "steps" in exported.json()
    viewer.close()


def test_a_misfiled_line_and_a_deleted_run_are_answered_clearly(view_run, tmp_path):
    """Issue 42 item 5: a line naming another policy than its directory broke the report
    route (500) and --static (a raw KeyError); a live viewer whose run directory was deleted
    answered 500 and printed a traceback when stopped."""
    from ap_gym.view import write_static

    run = tmp_path / "run"
    shutil.copytree(view_run, run, ignore=shutil.ignore_patterns(".view"))
    episodes = sorted(run.rglob("episodes.jsonl"))[0]
    lines = episodes.read_text().splitlines()
    edited = json.loads(lines[0])
    edited["head"]["policy"] = "ghost"
    episodes.write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    viewer = Viewer([run])
    client = TestClient(create_app(viewer), base_url="http://127.0.0.1")
    assert client.get("/api/run/0/report").status_code == 200
    assert write_static([run], tmp_path / "bundle").exists()
    shutil.rmtree(run)
    for route in ("overview", "report", "episodes", "status", "provenance"):
        answer = client.get(f"/api/run/0/{route}")
        assert answer.status_code == 404 and "no longer exists" in answer.text, (route, answer.text[:200])
    viewer.close()
