from __future__ import annotations

import json
import shutil

import pytest

from ap_gym.protocol.results import (
    load_episodes,
    load_record_keys,
    setting_dirs,
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
    ap_eval = [x for x in lines if x.header.policy == "anti_persistence" and x.header.phase == "eval"]
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
        match = [x for x in lines if x.header.setting == row["setting"] and x.header.phase == row["phase"]
                 and x.header.iteration == row["iteration"] and x.header.task_id == row["task_id"]]
        assert [x.to_dict() for x in match] == [ep["line"]]
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
            assert (source["line"]["head"]["task_id"], source["line"]["head"]["iteration"]) == keys[link["record"]]
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
            assert a["id"] in ix.episode(e)["line"]["head"]["policy_info"]["abstractions_in_prompt"]
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
    client = TestClient(create_app(viewer), base_url="http://127.0.0.1")
    assert client.get("/api/runs").json()[0]["path"] == str(view_run)
    for huge in ("/api/run/0/episodes?page=99999999999999999999", f"/api/run/0/episode/{10**30}",
                 "/api/run/0/episodes?per_page=100000000"):
        assert client.get(huge).status_code == 422  # refused with a reason, not a 500
    ov = client.get("/api/run/0/overview").json()
    assert {c["panel"] for c in ov["curves"]} == {"shop @ tiny-llama(seed=0)"} or ov["curves"]
    page = client.get("/api/run/0/episodes", params={"phase": "eval", "per_page": 2}).json()
    assert len(page["rows"]) == 2 and page["total"] == sum(1 for x in load_episodes(view_run) if x.header.phase == "eval")
    assert client.get("/api/run/0/episode/999999").status_code == 404
    assert client.get("/api/run/5/overview").status_code == 404
    bad = client.get("/api/run/0/episodes", params={"colour": "red"})
    assert bad.status_code == 400 and "unknown filter" in bad.json()["detail"]
    report = client.get("/api/run/0/report").json()
    assert {"stats", "audit"} <= {t["name"] for t in report["tables"]}
    assert client.get("/").status_code == 200 and "static/js/core.js" in client.get("/").text
    assert client.get("/static/vendor/uPlot.iife.min.js").status_code == 200
    viewer.close()


def test_the_viewer_answers_only_its_own_host_name(view_run):
    """DNS rebinding: a page on evil.example whose name now points at 127.0.0.1 sends its
    own name in Host; the loopback viewer refuses it."""
    from fastapi.testclient import TestClient

    viewer = Viewer([view_run])
    assert TestClient(create_app(viewer), base_url="http://evil.example").get("/api/runs").status_code == 421
    assert TestClient(create_app(viewer), base_url="http://localhost:8000").get("/api/runs").status_code == 200
    viewer.close()


def test_a_viewer_with_a_key_answers_only_with_it(view_run):
    from fastapi.testclient import TestClient

    viewer = Viewer([view_run])
    client = TestClient(create_app(viewer, api_key="s3cret", hosts=None), base_url="http://10.1.2.3")
    assert client.get("/api/runs").status_code == 401
    assert client.get("/?key=wrong", follow_redirects=False).status_code == 401
    assert client.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    opened = client.get("/?key=s3cret", follow_redirects=False)
    assert opened.status_code == 303 and "httponly" in opened.headers["set-cookie"].lower()
    assert client.get("/api/runs").status_code == 200  # the cookie from then on
    viewer.close()


def test_serving_beyond_loopback_needs_a_key(view_run):
    from ap_gym.view import serve

    with pytest.raises(ValueError, match="needs|give a key"):
        serve([view_run], host="0.0.0.0")


def test_static_never_overwrites_a_directory_it_did_not_write(view_run, tmp_path):
    site = tmp_path / "site"
    (site / "data").mkdir(parents=True)
    (site / "index.html").write_text("<h1>mine</h1>")
    (site / "data" / "precious.csv").write_text("a,b\n1,2\n")
    with pytest.raises(FileExistsError, match="not a viewer bundle"):
        write_static([view_run], site)
    assert (site / "index.html").read_text() == "<h1>mine</h1>" and (site / "data" / "precious.csv").exists()
    bundle = tmp_path / "bundle"
    write_static([view_run], bundle)
    write_static([view_run], bundle)  # a bundle it wrote: rewritten in place
    assert (bundle / "index.html").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_static([view_run], empty).exists()


def test_the_static_bundle_holds_every_episode(view_run, tmp_path):
    page = write_static([view_run], tmp_path / "bundle")
    data = page.parent / "data" / "run0"
    lines = load_episodes(view_run)
    packed = "".join(p.read_text() for p in data.glob("episodes-*.js"))
    assert packed.count("APGYM_PUT(") == len(lines)  # every episode, packed into a few files
    assert len(list(page.parent.rglob("*.js"))) <= 50
    text = (data / "episodes.js").read_text()
    rows = json.loads(text[text.index(",") + 1: text.rindex(")")])
    assert len(rows) == len(lines)
    with pytest.raises(FileExistsError):
        write_static([view_run], tmp_path)  # a directory that is not a bundle is never cleared
    write_static([view_run], tmp_path / "bundle")  # a bundle is rewritten in place


def test_the_index_reads_heads_exactly_as_a_full_parse_would(view_run, tmp_path):
    """The index reads each line's head without its steps; the head must equal the full
    line's, and a line cut by a kill (its head whole, its steps not) is not read as done."""
    from ap_gym.protocol.results import parse_header, parse_line, read_log

    raws = (next(setting_dirs(view_run)) / "episodes.jsonl").read_bytes().splitlines()
    for raw in raws:
        assert parse_header(raw) == parse_line(raw).header
    path = tmp_path / "episodes.jsonl"
    path.write_bytes(b"\n".join(raws) + b"\n" + raws[0][: len(raws[0]) - 20])  # a tail cut inside its steps
    assert parse_header(raws[0][: len(raws[0]) - 20]) == parse_header(raws[0])  # the head alone is whole
    for headers in (True, False):
        good, bad = read_log(path, headers=headers)
        assert len(good) == len(raws) and not bad


def test_a_damaged_run_is_shown_without_its_damaged_lines(view_run, tmp_path):
    """Lines edited by hand or cut (no benchmark, a string seed, policy_info a list, usage
    strings) are left out with a warning; the rest of the run is shown."""
    import shutil

    from fastapi.testclient import TestClient

    run = tmp_path / "damaged"
    shutil.copytree(view_run, run, ignore=shutil.ignore_patterns(".view"))
    episodes = sorted(run.rglob("episodes.jsonl"))[0]
    lines = episodes.read_text().splitlines()
    good = len(lines)
    bad = []
    for k, change in enumerate(({"benchmark": None}, {"seed": "zero"}, {"policy_info": [1, 2]}, {"usage": "lots"},
                                {"policy_info": {"abstractions_in_prompt": "x", "rejected_abstractions": [1, "a"]}})):
        x = json.loads(lines[0])
        x["head"]["index"] = 10_000 + k  # each its own episode (a copy of line 0's key would count once)
        for key, value in change.items():
            if value is None:
                x["head"].pop(key)
            else:
                x["head"][key] = value
        bad.append(json.dumps(x))
    episodes.write_text("\n".join(lines + bad) + "\n")
    viewer = Viewer([run])
    client = TestClient(create_app(viewer), base_url="http://127.0.0.1")
    total = client.get("/api/run/0/episodes", params={"per_page": 1}).json()["total"]
    all_lines = sum(len(p.read_text().splitlines()) for p in run.rglob("episodes.jsonl"))
    # no benchmark, a seed that is no number: left out; a policy_info or usage of the wrong
    # type reads as empty, and the episode is shown
    assert total == all_lines - 2 and good
    for row in client.get("/api/run/0/episodes", params={"per_page": 1000}).json()["rows"]:
        assert client.get(f"/api/run/0/episode/{row['id']}").status_code == 200
    viewer.close()


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"config": [1]}'])
def test_a_damaged_config_json_is_named_as_damaged(view_run, tmp_path, text):
    import shutil

    run = tmp_path / "damaged"
    shutil.copytree(view_run, run, ignore=shutil.ignore_patterns(".view"))
    (run / "config.json").write_text(text)
    with pytest.raises(ValueError, match="damaged"):
        Viewer([run])


def test_built_conditions_and_groups_agree_with_the_jsonl(view_run):
    """The filter builder's conditions and the group-by (issue 43), checked against the
    episodes as the results module reads them, not against the index."""
    from collections import Counter

    from ap_gym.view.index import parse_conditions

    ix = RunIndex(view_run)
    heads = [x.header for x in load_episodes(view_run)]
    where = json.dumps([["num_steps", "ge", "2"], ["task_id", "contains", heads[0].task_id[1:-1].upper()]])
    expected = [h for h in heads if h.num_steps >= 2 and heads[0].task_id[1:-1].lower() in h.task_id.lower()]
    page = ix.episodes({"phase": "eval"}, per_page=500, where=where)
    assert page.total == sum(h.phase == "eval" for h in expected) > 0
    groups = ix.groups(["policy", "success"], {}, where=where)
    counted = Counter((h.policy, h.success) for h in expected)
    assert {(g["key"]["policy"], g["key"]["success"]): g["episodes"] for g in groups} == counted
    for g in ix.groups(["policy"], {"phase": "eval"}):
        mine = [h for h in heads if h.phase == "eval" and h.policy == g["key"]["policy"] and not h.infrastructure_failure]
        assert g["successes"] == sum(h.success for h in mine) and g["success_ci"] == wilson(g["successes"], len(mine))
    # % and _ are literal in "contains"; a number for a numeric column; unknown names refused
    assert ix.episodes({}, where=json.dumps([["task_id", "contains", "%"]])).total == \
        sum("%" in h.task_id for h in heads)
    for bad, said in ((["wall_s", "gt", "soon"], "numeric"), (["file", "eq", "x"], "unknown column"),
                      (["score", "~", "1"], "unknown operator"), ("[1, 2]", "not \\[column")):
        with pytest.raises(ValueError, match=said):
            parse_conditions(json.dumps([bad]) if isinstance(bad, list) else bad)
    with pytest.raises(ValueError, match="group by"):
        ix.groups(["file"], {})
    ix.close()


def test_a_directory_in_the_index_files_place_sends_the_index_to_the_cache(view_run, tmp_path, monkeypatch):
    """`.view/index.sqlite` as a directory gave a raw IsADirectoryError; the index is a cache."""
    from tests.helpers import copy_run

    monkeypatch.setenv("AP_GYM_CACHE", str(tmp_path / "cache"))
    run = copy_run(view_run, tmp_path)
    (run / ".view" / "index.sqlite").mkdir(parents=True)
    ix = RunIndex(run)
    try:
        assert ix.path.is_file() and str(tmp_path / "cache") in str(ix.path)
        assert len(list(ix.all_rows())) == len(load_episodes(run))
    finally:
        ix.close()


@pytest.mark.parametrize(("params", "said"), [
    ({"where": json.dumps([["num_steps", "gt", 10**400]])}, "finite number"),
    ({"where": "[" * 9990 + "]" * 9990}, "nested too deeply"),
    ({"where": json.dumps([["id", "gt", 1]] * 1300, separators=(",", ":"))}, "at most 64"),
    ({"seed": "1" * 30}, "at most 15 digits"),
    ({"seed": "abc"}, "seed is a whole number"),
    ({"where": '[["num_steps", "gt", NaN]]'}, "NaN matches no row"),
])
def test_the_viewers_query_is_bounded_and_refused_with_a_400_that_says_the_limit(view_run, params, said):
    """Each of these gave a 500 (or, for NaN, silently no rows)."""
    from fastapi.testclient import TestClient

    viewer = Viewer([view_run])
    try:
        answer = TestClient(create_app(viewer), base_url="http://127.0.0.1").get("/api/run/0/episodes",
                                                                                 params=params)
        assert answer.status_code == 400, answer.text[:300]
        assert said in answer.json()["detail"], answer.json()
    finally:
        viewer.close()


def test_lineage_knows_a_randomised_run_from_its_config_not_from_usable_units(tmp_path):
    """Lineage said "this run did not randomise exposure" for a run with randomise_exposure 0.5:
    it decided from the count of usable units (calls whose task retrieved a flagged abstraction)."""
    from ap_gym.protocol import RunConfig, run
    from tests.helpers import TINY_AGENT, config

    data = config(tmp_path, policies=[{"name": "abstraction", "options": TINY_AGENT}], benchmarks=["shop"],
                  iterations=1, train_per_iter=4, heldout=1, audit={"randomise_exposure": 0.5})
    out = run(RunConfig.from_dict(data), progress=False)
    ix = RunIndex(out)
    try:
        audits = [json.loads(r[0]) for r in ix.conn.execute("SELECT row FROM audits")]
    finally:
        ix.close()
    assert audits and all(a["randomise_exposure"] == 0.5 for a in audits)
    assert all(a["coins"] >= a["randomised_units"] for a in audits)


def test_index_html_loads_every_page_script_once():
    """The page is classic scripts, one per page (a bundle opens from file://, where module
    scripts are refused): a page file index.html does not load would be dead code, and the
    page would fail only when its route is opened."""
    import re

    from ap_gym.view.app import STATIC

    loaded = re.findall(r'<script src="static/(js/[^"]+)"', (STATIC / "index.html").read_text())
    files = sorted(p.relative_to(STATIC).as_posix() for p in (STATIC / "js").rglob("*.js"))
    assert sorted(loaded) == files and len(set(loaded)) == len(loaded)
    assert loaded[0] == "js/core.js" and loaded[-1] == "js/boot.js"  # the client first, the start last


def test_a_line_written_twice_counts_once_in_the_index_as_in_every_reader(view_run, tmp_path):
    """The index counted a copied line twice (4 of 3 in faults.py --only issue51) while the
    headers, resume and the report counted it once: at a build and at a catch-up alike."""
    from ap_gym.protocol.results import EPISODES, load_headers, setting_dirs
    from tests.helpers import copy_run

    run = copy_run(view_run, tmp_path)
    log = next(setting_dirs(run)) / EPISODES
    lines = log.read_bytes().splitlines(keepends=True)
    expected = len(load_headers(run))
    ix = RunIndex(run)
    try:
        assert sum(1 for _ in ix.all_rows()) == expected
        with open(log, "ab") as f:  # a second writer's copy, caught up
            f.write(lines[0])
        ix.refresh()
        assert sum(1 for _ in ix.all_rows()) == expected == len(load_headers(run))
    finally:
        ix.close()
    rebuilt = RunIndex(run, rebuild=True)  # and at a build
    try:
        assert sum(1 for _ in rebuilt.all_rows()) == expected
    finally:
        rebuilt.close()
