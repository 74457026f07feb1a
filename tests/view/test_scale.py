"""What lets the viewer open a large run at once: the index persisted and caught up (never
rebuilt for appended lines), the report kept and computed without holding the other pages,
and the search index's fast reader, which must agree with the full parse it replaces."""

from __future__ import annotations

import json
import threading

import pytest

from ap_gym.protocol.results import EPISODES, parse_header, setting_dirs
from ap_gym.view import Viewer, create_app
from ap_gym.view import search as search_module
from ap_gym.view.index import RunIndex
from ap_gym.view.search import _documents, _documents_full
from tests.helpers import copy_run


def _rows(ix):
    """The index's rows without their ids (a catch-up numbers appended lines after the rest)."""
    return sorted(json.dumps({k: v for k, v in r.items() if k != "id"}, sort_keys=True) for r in ix.all_rows())


_copy = copy_run


def _renumbered(lines: list[bytes], start: int = 10_000) -> list[bytes]:
    """Copies of episode lines as other episodes (a new index each): a copy of a line's own
    key is the same episode written twice, which every reader counts once."""
    out = []
    for k, raw in enumerate(lines):
        x = json.loads(raw)
        x["head"]["index"] = start + k
        out.append((json.dumps(x) + "\n").encode())
    return out


def test_an_index_is_caught_up_not_rebuilt_when_the_run_grew(view_run, tmp_path):
    run = _copy(view_run, tmp_path)
    first = RunIndex(run)
    build, before = first.build_id, first.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    first.close()
    log = next(setting_dirs(run)) / EPISODES
    lines = log.read_bytes().splitlines(keepends=True)
    with open(log, "ab") as f:  # the run went on (a resume, more seeds): new episodes' lines appended
        f.write(b"".join(_renumbered(lines[:3])))
    again = RunIndex(run)  # a new process: no prior build in it
    assert again.build_id == build  # caught up in place: the search index keeps what it read
    assert again.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == before + 3
    fresh = RunIndex(_copy(run, tmp_path, "fresh"), rebuild=True)
    assert _rows(again) == _rows(fresh)
    for r in again.all_rows():  # every episode, the appended ones too, opens from its own bytes
        head = again.episode(r["id"])["line"]["head"]
        assert (head["task_id"], head["index"], head["phase"]) == (r["task_id"], r["idx"], r["phase"])
    again.close()
    fresh.close()


def test_an_edited_or_shrunk_file_is_indexed_anew_not_caught_up(view_run, tmp_path):
    """Offsets past an edit are not where the index put them: only an appended file is caught up."""
    run = _copy(view_run, tmp_path)
    first = RunIndex(run)
    build = first.build_id
    first.close()
    log = next(setting_dirs(run)) / EPISODES
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(lines[0] + b"{not json\n" + b"".join(lines[1:]))  # grew, but not at its end
    ix = RunIndex(run)
    assert ix.build_id != build
    for r in ix.all_rows():  # every row opens its own line
        assert ix.episode(r["id"])["line"]["head"]["task_id"] == r["task_id"]
    ix.close()


def test_a_same_length_edit_far_before_the_end_is_seen(view_run, tmp_path):
    """Only the last 4 kB were checked once: an edit of the same length further back, then an
    append, kept the stale rows for good. The indexed region's sample sees it."""
    TAIL_BYTES, SAMPLES = 4096, 64  # noqa: N806 (ap_gym.view.index's; literal, so the test runs on the old index)
    run = _copy(view_run, tmp_path)
    log = next(setting_dirs(run)) / EPISODES
    lines = log.read_bytes().splitlines(keepends=True)
    while log.stat().st_size < 4 * TAIL_BYTES:  # large enough for a middle that neither end covers
        with open(log, "ab") as f:
            f.write(b"".join(lines))
    first = RunIndex(run)
    build = first.build_id
    first.close()
    data = bytearray(log.read_bytes())
    spacing = len(data) // (SAMPLES + 1)
    middle = slice(len(data) // 2 - spacing, len(data) // 2 + spacing)
    assert middle.start > TAIL_BYTES and middle.stop < len(data) - TAIL_BYTES
    data[middle] = bytes(data[middle]).translate(bytes.maketrans(b"ab", b"ba"))  # same length, other bytes
    log.write_bytes(bytes(data) + lines[0])  # and the run went on
    ix = RunIndex(run)
    assert ix.build_id != build  # built anew, not caught up over the edit
    ix.close()


def test_a_full_disk_keeps_the_index_in_memory_with_a_warning(view_run, tmp_path, monkeypatch, caplog):
    """The index is a cache: a full disk (ENOSPC where it is written) gave a raw SQLite or OS
    error in view and view --static; now the index goes to memory and says so."""
    import errno
    import logging

    from ap_gym.view import index as index_module

    run = _copy(view_run, tmp_path)
    real = index_module.tempfile.mkstemp

    def full(*args, dir=None, **kwargs):  # noqa: A002 (mkstemp's own name)
        if dir is not None and str(dir).startswith(str(run)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(index_module.tempfile, "mkstemp", full)
    with caplog.at_level(logging.WARNING, logger=index_module.log.name):
        ix = RunIndex(run)
    try:
        assert not str(ix.path).startswith(str(run))
        assert "disk is full" in caplog.text and str(ix.path.parent) in caplog.text
        fresh = RunIndex(_copy(view_run, tmp_path, "fresh"), rebuild=True)
        assert _rows(ix) == _rows(fresh)  # the same index, only elsewhere
        fresh.close()
    finally:
        ix.close()


def test_a_setting_whose_memory_changed_is_read_again(view_run, tmp_path):
    run = _copy(view_run, tmp_path)
    RunIndex(run).close()
    setting = next(d for d in setting_dirs(run) if d.parent.name == "abstraction")
    ix = RunIndex(run)
    stamp = ix.conn.execute("SELECT memory FROM files WHERE file=?",
                            (setting.relative_to(run).as_posix(),)).fetchone()[0]
    before = [p for p in ix.provenance() if p["setting"] == ix.conn.execute(
        "SELECT setting FROM episodes WHERE file=?", (setting.relative_to(run).as_posix(),)).fetchone()[0]]
    ix.close()
    assert before and before[0]["abstractions"]
    (setting / "memory.sqlite").unlink()  # the memory changed (here: went), no episode appended
    ix = RunIndex(run)
    assert ix.conn.execute("SELECT memory FROM files WHERE file=?",
                           (setting.relative_to(run).as_posix(),)).fetchone()[0] != stamp
    after = [p for p in ix.provenance() if p["setting"] == before[0]["setting"]]
    assert after != before  # read again, not kept from the first look
    ix.close()


def test_two_viewers_catching_up_one_run_index_each_line_once(view_run, tmp_path):
    run = _copy(view_run, tmp_path)
    a, b = RunIndex(run), RunIndex(run)
    log = next(setting_dirs(run)) / EPISODES
    with open(log, "ab") as f:
        f.write(log.read_bytes().splitlines(keepends=True)[0])
    barrier = threading.Barrier(2)

    def catch_up(ix):
        barrier.wait()
        ix.refresh()

    threads = [threading.Thread(target=catch_up, args=(ix,)) for ix in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh = RunIndex(_copy(run, tmp_path, "fresh"), rebuild=True)
    count = "SELECT COUNT(*) FROM episodes"
    assert a.conn.execute(count).fetchone()[0] == fresh.conn.execute(count).fetchone()[0]
    for ix in (a, b, fresh):
        ix.close()


def test_the_report_is_kept_beside_the_index_and_redone_when_the_run_changes(view_run, tmp_path, monkeypatch):
    import ap_gym.view.reports as view  # where the viewer computes its report

    run = _copy(view_run, tmp_path)
    tables = Viewer([run]).report(0)
    assert (run / ".view" / "report.json").exists()

    def refuse(run):
        raise AssertionError("the kept report should have been read")

    monkeypatch.setattr(view, "_report", refuse)
    assert Viewer([run]).report(0) == tables  # another process: read, not computed
    log = next(setting_dirs(run)) / EPISODES
    with open(log, "ab") as f:
        f.write(log.read_bytes().splitlines(keepends=True)[0])
    with pytest.raises(AssertionError, match="kept report"):
        Viewer([run]).report(0)  # the run changed: computed again


def test_the_other_pages_answer_while_the_report_is_computed(view_run, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    import ap_gym.view.reports as view  # where the viewer computes its report

    run = _copy(view_run, tmp_path)
    started, release = threading.Event(), threading.Event()
    real = view._report

    def slow(path):
        started.set()
        assert release.wait(60)
        return real(path)

    monkeypatch.setattr(view, "_report", slow)
    viewer = Viewer([run])
    client = TestClient(create_app(viewer), base_url="http://127.0.0.1")
    answers = {}
    worker = threading.Thread(target=lambda: answers.setdefault("report", client.get("/api/run/0/report")))
    worker.start()
    assert started.wait(60)
    try:  # the report is being computed: the episode list still answers
        page = client.get("/api/run/0/episodes", params={"phase": "eval"})
        assert page.status_code == 200 and page.json()["total"] > 0
    finally:
        release.set()
        worker.join(60)
    assert answers["report"].status_code == 200


def _variants(raw: bytes) -> list[bytes]:
    """A line and damaged versions of it: each field the documents come from removed or
    given another type, the trace's typed parts broken, another schema."""
    x = json.loads(raw)
    out = [raw]

    def put(change):
        y = json.loads(raw)
        change(y)
        out.append(json.dumps(y).encode())

    step_changes = [
        lambda s: s.pop("action"), lambda s: s.pop("observation"), lambda s: s.pop("reward"),
        lambda s: s.update(action=7), lambda s: s.update(observation=None), lambda s: s.update(reward="1.5"),
        lambda s: s.update(reward=None), lambda s: s.update(reward=True), lambda s: s.update(seconds="x"),
        lambda s: s.update(trace=[1]), lambda s: s.update(trace=0), lambda s: s.update(trace={}),
        lambda s: s.update(trace={"candidates": [["look", "high"]]}),
        lambda s: s.update(trace={"candidates": [["look", -1.5], [3, -2]]}),
        lambda s: s.update(trace={"messages": [{"role": "user"}]}),
        lambda s: s.update(trace={"messages": ["hi"]}), lambda s: s.update(trace={"prompt": 5}),
        lambda s: s.update(extra={"anything": 1}),
    ]
    if x.get("steps"):
        for change in step_changes:
            put(lambda y, c=change: c(y["steps"][0]))
    put(lambda y: y.update(steps="none"))
    put(lambda y: y.update(steps=[]))
    put(lambda y: y.update(steps=[1]))
    put(lambda y: y["head"].update(instruction=None))
    put(lambda y: y["head"].update(instruction=""))
    put(lambda y: y["head"].pop("instruction"))
    put(lambda y: y["head"].update(policy_info=[1]))
    put(lambda y: y["head"].update(policy_info={"guidance": "Check the fridge first."}))
    put(lambda y: y["head"].update(policy_info={"guidance": ["not", "text"]}))
    put(lambda y: y.update(schema=3))
    out.append(raw[:-20])  # cut short
    out.append(raw.replace(b'"reward": 0.0', b'"reward": NaN', 1))
    return out


def test_the_fast_search_reader_agrees_with_the_full_parse(view_run):
    """On every line of a real run and on damaged versions of them: the same documents, or
    none, as :func:`parse_line` gives (for every line whose head the run index accepts)."""
    compared = fallbacks = 0
    for directory in setting_dirs(view_run):
        for raw in (directory / EPISODES).read_bytes().splitlines():
            for variant in _variants(raw):
                try:
                    parse_header(variant)
                except ValueError:
                    continue  # not an episode the index lists: search never reads it
                assert _documents(variant, 1) == _documents_full(variant, 1), variant[:300]
                compared += 1
                fallbacks += not _documents_full(variant, 1)
    assert compared > 200 and fallbacks > 10  # damaged lines were among them


def test_the_search_index_reads_every_episode(view_run, tmp_path):
    run = _copy(view_run, tmp_path)
    viewer = Viewer([run])
    viewer.catch_up()
    ix, search = viewer.index(0), viewer.search_index(0)
    total = ix.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    assert search.status() == {"indexed": total, "episodes": total, "ready": True}
    stored = search._write.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
    expected = 0
    for r in ix.conn.execute("SELECT id, file, offset, length FROM episodes"):
        expected += len(search_module.documents_at(run / r["file"] / EPISODES, r["id"], r["offset"], r["length"]))
    assert stored == expected > total
    viewer.close()


def test_a_live_viewer_reads_a_run_into_search_without_a_poll_between_batches(view_run, tmp_path, monkeypatch):
    """The search index was extended by one batch per poll (2,000 episodes every 2 s: 100 s
    for a 100k-episode run before search was ready); batches now follow one another."""
    import time

    from ap_gym.view.search import SearchIndex

    monkeypatch.setattr(SearchIndex.__init__, "__defaults__", (2,))  # two episodes a batch: many batches
    run = _copy(view_run, tmp_path)
    viewer = Viewer([run], live=True, poll_s=3600)  # a poll per batch would never finish here
    try:
        for _ in range(1200):
            if 0 in viewer._search and viewer._search[0].status()["ready"]:
                break
            time.sleep(0.1)
        status = viewer.search_index(0).status()
        assert status["ready"] and status["indexed"] > 20, status
    finally:
        viewer.close()


def test_a_large_runs_report_is_computed_in_a_child_and_is_the_same(view_run, tmp_path, monkeypatch):
    """The child process (which keeps the report's parsing off the pages' GIL) gives the very
    tables the viewer's own process gives."""
    import ap_gym.view.reports as view  # where the viewer computes its report

    run = _copy(view_run, tmp_path)
    monkeypatch.setattr(view, "REPORT_CHILD_EPISODES", 0)
    assert Viewer([run]).report(0) == json.loads(json.dumps(view._report(run)))
