from __future__ import annotations

import json
import shutil

import pytest

from ap_gym.protocol.results import (
    load_episodes,
    load_record_keys,
    setting_dirs,
    setting_key,
    summarise,
)
from ap_gym.report.stats import wilson
from ap_gym.view import Viewer, create_app, write_static
from ap_gym.view.index import RunIndex


def test_the_index_agrees_with_the_jsonl(view_run):
    ix = RunIndex(view_run)
    lines = load_episodes(view_run)
    rows = list(ix.all_rows())
    assert len(rows) == len(lines)
    summary = summarise(view_run)["settings"]
    for s in ix.settings():
        expected = next(e for e in summary[s["setting"]] if e["iteration"] == s["iteration"])
        assert s["episodes"] == expected["episodes"]
        assert s["success_rate"] == pytest.approx(expected["success_rate"])
        assert s["llm_calls"] == pytest.approx(expected["mean_llm_calls"])
    # filters are exact, pages cover every match once
    ap_eval = [x for x in lines if x["policy"] == "anti_persistence" and x["phase"] == "eval"]
    page0 = ix.episodes({"policy": "anti_persistence", "phase": "eval"}, page=0, per_page=5)
    page1 = ix.episodes({"policy": "anti_persistence", "phase": "eval"}, page=1, per_page=5)
    assert page0.total == len(ap_eval)
    ids = [r["id"] for r in page0.rows + page1.rows]
    assert len(ids) == len(set(ids)) == min(10, len(ap_eval))
    with pytest.raises(ValueError, match="unknown filter"):
        ix.episodes({"colour": "red"})
    # an episode is read back whole from its byte range
    for row in rows[:: max(1, len(rows) // 7)]:
        ep = ix.episode(row["id"])
        match = [x for x in lines if setting_key(x) == row["setting"] and x["phase"] == row["phase"]
                 and x["iteration"] == row["iteration"] and x["task_id"] == row["task_id"]]
        assert match == [{k: v for k, v in ep["line"].items()}]
    ix.close()


def test_retrieved_records_link_to_the_training_episode_they_came_from(view_run):
    ix = RunIndex(view_run)
    linked = 0
    for row in ix.all_rows():
        ep = ix.episode(row["id"])
        for link in ep["retrieved"]:
            assert link["episode"] is not None
            source = ix.episode(link["episode"])
            keys = {rid: (task, it) for rid, task, it in load_record_keys(view_run / row["setting"])}
            assert (source["line"]["task_id"], source["line"]["iteration"]) == keys[link["record"]]
            assert source["row"]["phase"] == "train" and source["row"]["setting"] == row["setting"]
            linked += 1
    assert linked > 0
    prov = {p["setting"]: p for p in ix.provenance()}
    stored = prov["shop/abstraction/seed0"]["abstractions"]
    assert stored and all(s["episode"] is not None for a in stored for s in a["sources"])
    seen = [a for a in stored if a["seen_by"]]
    assert seen
    for a in seen[:3]:
        for e in a["seen_by"][:3]:
            assert a["id"] in ix.episode(e)["line"]["policy_info"]["abstractions_in_prompt"]
    ix.close()


def test_the_index_is_reused_until_the_run_changes_and_survives_damage(view_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(view_run, run, ignore=shutil.ignore_patterns(".view"))
    RunIndex(run).close()
    index = run / ".view" / "index.sqlite"
    built = index.stat().st_mtime_ns
    RunIndex(run).close()
    assert index.stat().st_mtime_ns == built  # reused
    log = next(setting_dirs(run)) / "episodes.jsonl"
    text = log.read_text().splitlines(keepends=True)
    log.write_text(text[0] + "{not json\n" + "".join(text[1:]))
    ix = RunIndex(run)
    assert index.stat().st_mtime_ns != built  # rebuilt, the damaged line left out
    assert sum(1 for _ in ix.all_rows()) == len(load_episodes(run))
    ix.close()
    index.write_bytes(b"garbage")  # a damaged index is only a cache
    RunIndex(run).close()


def test_a_run_that_cannot_hold_its_index_is_indexed_in_the_cache(view_run, tmp_path, monkeypatch):
    """A read-only run (or one where ``.view`` is taken) is indexed under AP_GYM_CACHE."""
    monkeypatch.setenv("AP_GYM_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "ro"
    shutil.copytree(view_run, run, ignore=shutil.ignore_patterns(".view"))
    (run / ".view").write_text("not a directory")
    ix = RunIndex(run)
    assert str(ix.path).startswith(str(tmp_path / "cache"))
    assert sum(1 for _ in ix.all_rows()) == len(load_episodes(run))
    ix.close()


def test_wilson_interval():
    assert wilson(0, 0) is None
    lo, hi = wilson(0, 3)
    assert lo == 0.0 and 0.4 < hi < 0.7
    lo, hi = wilson(5, 10)
    assert lo < 0.5 < hi


def test_the_api_answers_and_refuses_clearly(view_run):
    from fastapi.testclient import TestClient

    viewer = Viewer([view_run])
    client = TestClient(create_app(viewer))
    assert client.get("/api/runs").json()[0]["path"] == str(view_run)
    ov = client.get("/api/run/0/overview").json()
    assert {c["panel"] for c in ov["curves"]} == {"shop @ tiny-llama(seed=0)"} or ov["curves"]
    page = client.get("/api/run/0/episodes", params={"phase": "eval", "per_page": 2}).json()
    assert len(page["rows"]) == 2 and page["total"] == sum(1 for x in load_episodes(view_run) if x["phase"] == "eval")
    assert client.get("/api/run/0/episode/999999").status_code == 404
    assert client.get("/api/run/5/overview").status_code == 404
    bad = client.get("/api/run/0/episodes", params={"colour": "red"})
    assert bad.status_code == 400 and "unknown filter" in bad.json()["detail"]
    report = client.get("/api/run/0/report").json()
    assert {"stats", "audit"} <= {t["name"] for t in report["tables"]}
    assert client.get("/").status_code == 200 and "app.js" in client.get("/").text
    assert client.get("/static/vendor/uPlot.iife.min.js").status_code == 200
    viewer.close()


def test_the_static_bundle_holds_every_episode(view_run, tmp_path):
    page = write_static([view_run], tmp_path / "bundle")
    data = page.parent / "data" / "run0"
    lines = load_episodes(view_run)
    assert len(list((data / "episode").glob("*.js"))) == len(lines)
    text = (data / "episodes.js").read_text()
    rows = json.loads(text[text.index(",") + 1: text.rindex(")")])
    assert len(rows) == len(lines)
    with pytest.raises(FileExistsError):
        write_static([view_run], tmp_path)  # a directory that is not a bundle is never cleared
    write_static([view_run], tmp_path / "bundle")  # a bundle is rewritten in place


def test_the_index_reads_heads_exactly_as_a_full_parse_would(view_run):
    """The index parses each line without its steps; the head must equal the full
    line minus ``steps``, and lines that are cut or not episodes are left out."""
    from ap_gym.view.index import _head

    path = next(setting_dirs(view_run)) / "episodes.jsonl"
    for raw in path.read_bytes().splitlines(keepends=True):
        full = json.loads(raw)
        full.pop("steps")
        assert _head(raw) == full
    raw = path.read_bytes().splitlines(keepends=True)[0]
    assert _head(raw[: len(raw) // 2]) is None  # a line cut by a kill
    assert _head(b'{"phase": "train"}\n') is None
    tricky = json.dumps({"phase": "eval", "task_id": "t", "policy_info": {"note": 'a "steps": [ inside'},
                         "steps": [{"action": ', "steps": [', "observation": "x"}]}).encode() + b"\n"
    assert _head(tricky) == {"phase": "eval", "task_id": "t", "policy_info": {"note": 'a "steps": [ inside'}}
