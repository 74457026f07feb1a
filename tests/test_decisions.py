"""The record's decisions are declared once (``ap_gym.types.Decisions``): every key a built-in
policy writes is declared, every one the viewer's page reads is too, readers get typed values,
and the page's field list is the declaration's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ap_gym.types import DECISION_FIELDS, Decisions, declare_decision
from tests.helpers import viewer_js

ROOT = Path(__file__).resolve().parents[1]


def test_damaged_decisions_read_as_absent_and_undeclared_keys_as_extra():
    d = Decisions.of({"mode": 3, "synthesis_skipped": "no", "retrieved_records": [1, "2", 3.5, 4],
                      "utilities": [1], "my_design_note": "x", "synthesis_calls": True})
    assert d.mode is None and d.synthesis_skipped is None and d.utilities is None and d.synthesis_calls is None
    assert d.retrieved_records == (1, 4) and d.extra == {"my_design_note": "x"}


def test_a_design_declares_its_own_decision_and_the_page_gets_its_note():
    from ap_gym.view.app import boot_script

    declare_decision("test_only_choice", "what the test design chose")
    try:
        assert '"test_only_choice": "what the test design chose"' in boot_script("server")
        with pytest.raises(ValueError, match="declared already"):
            declare_decision("mode", "something else")
    finally:
        DECISION_FIELDS.pop("test_only_choice")


def test_the_page_reads_only_declared_decisions():
    """app.js read 13 decision keys by name: a renamed key would have shown '-' silently."""
    app = viewer_js()
    read = set(re.findall(r"\binfo\.(\w+)", app)) | set(re.findall(r"policy_info\??\.(\w+)", app))
    listed = set(re.findall(r'"(\w+)"', app.split("const shown = [", 1)[1].split("]", 1)[0]))
    assert read and listed
    assert not (read | listed) - set(DECISION_FIELDS), (read | listed) - set(DECISION_FIELDS)


@pytest.mark.slow
def test_every_decision_a_built_in_policy_writes_is_declared(tmp_path):
    from ap_gym.protocol import RunConfig, load_headers, run
    from tests.helpers import TINY_AGENT, config

    names = ["no_memory", "trajectory", "abstraction", "joint", "reflexion", "autorefine", "anti_persistence"]
    policies = [{"name": n, "options": TINY_AGENT if n != "no_memory" else {"agent": TINY_AGENT["agent"]}}
                for n in names]
    policies += [{"name": "abstraction", "label": "judged", "options": {**TINY_AGENT, "admission": "llm"}},
                 {"name": "random"}, {"name": "walkthrough"}, {"name": "rule_household", "label": "rule"}]
    data = config(tmp_path, policies=policies, benchmarks=["shop"], iterations=1, train_per_iter=3, heldout=1,
                  audit={"randomise_exposure": 0.5})
    heads = load_headers(run(RunConfig.from_dict(data), progress=False))
    written = {k for h in heads for k in h.policy_info}
    assert {"mode", "guidance", "retrieved_records", "action_mode"} <= written
    assert not written - set(DECISION_FIELDS), f"undeclared decision keys: {written - set(DECISION_FIELDS)}"
    assert all(not h.decisions.extra for h in heads)


def _function(app: str, name: str) -> str:
    start = app.index(f"function {name}(")
    following = re.search(r"\n(async )?function ", app[start + 10:])
    return app[start:start + 10 + following.start()] if following else app[start:]


def test_the_page_reads_only_declared_record_fields():
    """Issue 49: app.js read the line's fields by property (17 reads) that no declaration
    backed, so a renamed field would show 'undefined'. Every read of a head, step, trace or
    usage field is one :func:`record_fields` declares, and the boot script sends that list."""
    from ap_gym.protocol.results import record_fields
    from ap_gym.view.app import boot_script

    declared = record_fields()
    assert "task_id" in declared["head"] and "observation" in declared["step"] and "prompt" in declared["trace"]
    assert f"window.APGYM_RECORD = {json.dumps(declared)};" in boot_script("server")
    app = viewer_js()
    episode = _function(app, "viewEpisode")
    reads = {
        "head": set(re.findall(r"\.line\.head\.(\w+)", app)) | set(re.findall(r"\bx\.(\w+)", episode)),
        "step": set(re.findall(r"\bstep\.(\w+)", _function(app, "stepView")))
        | set(re.findall(r"\bs[ab]\.(\w+)", _function(app, "viewCompare"))),
        "trace": set(re.findall(r"\bt\.(\w+)", _function(app, "stepView"))),
        "usage": set(re.findall(r"\busage\??\.(\w+)", app)),
    }
    assert all(reads[k] for k in ("head", "step", "trace", "usage")), reads
    drift = {k: sorted(v - set(declared[k])) for k, v in reads.items() if v - set(declared[k])}
    assert not drift, f"app.js reads fields the record does not declare: {drift}"


def test_the_search_readers_fields_are_the_records():
    """The search's fast reader (msgspec, a subset for speed) names fields of the record by
    hand: a field renamed in the declaration would be skipped there silently. Each it names is
    one the declaration has."""
    import msgspec

    from ap_gym.protocol.results import record_fields
    from ap_gym.view import search

    declared = record_fields()
    named = {"head": set(search._Head.__struct_fields__), "step": set(search._Step.__struct_fields__),
             "trace": set(search._Trace.__struct_fields__)}
    drift = {k: sorted(v - set(declared[k])) for k, v in named.items() if v - set(declared[k])}
    assert not drift, f"the search's fast reader names fields the record does not declare: {drift}"
    assert set(search._Info.__struct_fields__) <= set(DECISION_FIELDS)
    assert set(search._Line.__struct_fields__) == {"schema", "head", "steps"}
    assert issubclass(search._Line, msgspec.Struct)


def test_report_and_view_read_decisions_by_attribute_only():
    """Issue 49's done-when: no policy_info[...] or policy_info.get(...) in report/ or view/;
    nor the mapping handed to a helper that reads it by string (report/tables.py's action-mode
    column did). The search's fast reader names the line's wire key in its msgspec struct."""
    package = ROOT / "ap_gym"
    found = []
    for folder in ("report", "view"):
        for path in sorted((package / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if "policy_info" in line and path.name != "search.py":
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
    search = (package / "view" / "search.py").read_text()
    assert not re.search(r"policy_info\s*(\[|\.get\()", search)


def test_the_records_head_declares_every_field_of_an_episode_and_carries_it_whole():
    """EpisodeHeader re-declares Episode's fields for the record (issue 49): a field added to
    one and not the other would be dropped on the way to disk. Every Episode field but its
    steps is a head field, header_dict writes only head fields, and an episode survives the
    line and back whole."""
    import dataclasses

    from ap_gym.protocol.results import EpisodeHeader, EpisodeLine, parse_line
    from ap_gym.types import Episode, Step, StepTrace, Termination, Usage

    head = {f.name for f in dataclasses.fields(EpisodeHeader)}
    kept = {f.name for f in dataclasses.fields(Episode)} - {"steps"}
    assert kept <= head, f"Episode fields the record's head lacks: {sorted(kept - head)}"
    episode = Episode(task_id="t/1", task_family="t", instruction="do it", initial_observation="a room",
                      steps=(Step("look", "a room", 0.5, 0.5, 0.25, StepTrace(prompt="p", response="look")),),
                      success=True, score=1.0, max_score=2.0, termination=Termination.WON, wall_time_s=1.5,
                      usage=Usage({"acting": 2}, {"acting": 30}, {"acting": 3}, 1), error=None, seed=4,
                      policy_info={"mode": "strategic"}, training=True)
    assert set(episode.header_dict()) <= head
    line = EpisodeLine.of("train", 1, 0, "shop", "anti_persistence", 4, 1, episode)
    assert parse_line(line.to_json()).episode == episode
