"""The grounded labeller: claims checked against an engine's facts, one test per error type,
and what it leaves unclassified."""

from __future__ import annotations

import pytest

from ap_gym.report.audit import SourceRecord
from ap_gym.report.grounded import GroundedLabeller, claims_in
from ap_gym.types import WorldFacts

KITCHEN = WorldFacts(
    "alf/1", "pick", where={"mug 1": ("sinkbasin 1",), "cup 1": ("countertop 1",), "knife 1": ("drawer 2",),
                            "key 1": ("drawer 1",)},
    needs={"heat": ("microwave 1",), "cool": ("fridge 1",), "closed": ("drawer 1", "drawer 2", "fridge 1")},
    plan=("go to sinkbasin 1", "take mug 1 from sinkbasin 1", "go to microwave 1", "heat mug 1 with microwave 1",
          "go to cabinet 1", "move mug 1 to cabinet 1"),
    objects=("cabinet 1", "countertop 1", "cup 1", "drawer 1", "drawer 2", "fridge 1", "key 1", "knife 1",
             "microwave 1", "mug 1", "sinkbasin 1"), engine="test")
OTHER = WorldFacts("alf/2", "pick", where={"mug 1": ("cabinet 3",), "key 1": ("shelf 1",)},
                   plan=("go to drawer 1", "open drawer 1", "take key 1 from drawer 1"),
                   objects=("cabinet 3", "drawer 1", "key 1", "mug 1", "shelf 1"), engine="test")
LABEL = GroundedLabeller({"alf/1": KITCHEN, "alf/2": OTHER}, "alfworld")
SOURCE = [SourceRecord("heat a mug and put it in cabinet.", (("open drawer 1", "Nothing happens."),), False, "pick",
                       "alf/1")]


def kinds(text):
    return sorted({r.split(":")[0] for r in LABEL(text, SOURCE).reasons})


@pytest.mark.parametrize(("text", "expected"), [
    ("The mug is usually on the countertop.", ["location"]),
    ("Mugs are kept in the sinkbasin.", []),
    ("Find the knife in a drawer.", []),
    ("Knives are on the countertop or in a cabinet.", ["location"]),
    ("Heat the mug with the stoveburner.", ["precondition"]),
    ("You need the microwave to heat the mug.", []),
    ("Move the mug to the cabinet before heating it.", ["order"]),
    ("First heat the mug, then move the mug to the cabinet.", []),
    ("Opening drawer 1 never works.", ["overgeneralised"]),  # it failed here, but a family plan opens it
    ("The key is always in the drawer.", ["universal"]),  # true here, not in alf/2
    ("The key is in the drawer.", []),
    ("The mug will be in the cabinet when you are done.", []),  # the goal, not the start
])
def test_each_error_type_is_checked_against_the_world(text, expected):
    assert kinds(text) == expected


def test_claims_the_world_cannot_settle_stay_unclassified():
    assert LABEL("The spatula is in the drawer.", SOURCE).flagged is False  # no spatula in this world
    assert LABEL("Be systematic and read each observation.", SOURCE).reasons == ()
    assert LABEL("The mug is on the countertop.", [SourceRecord("x", (), True, "pick", "sw/1")]).flagged is False
    assert LABEL.check("The mug is on the countertop.", []) == []  # no source task: nothing to check against


def test_claims_are_read_from_prose_plans_and_bullets():
    found = claims_in("1. Go to the sinkbasin and take the mug.\n- Cups can be found on countertops or in cabinets.\n"
                      "* Slicing requires a knife.")
    assert [(c.kind, c.x, c.y) for c in found] == [("location", "mug", "sinkbasin"),
                                                     ("location", "cups", "countertops|cabinets"),
                                                     ("precondition", "", "knife")]


def test_world_facts_round_trip_through_json():
    assert WorldFacts.from_dict(KITCHEN.to_dict()) == KITCHEN
    with pytest.raises(ValueError, match="not a world-facts record"):
        WorldFacts.from_dict({"where": {}})
