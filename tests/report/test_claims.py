"""The claim reader: typed claims out of the styles models write, each one a way an earlier
word-list labeller read nothing (issue 50), and the word-list defects issue 39 named."""

from __future__ import annotations

import pytest

from ap_gym.report.audit import EnvironmentLabeller, SourceRecord
from ap_gym.report.claims import claims_in
from ap_gym.report.grounded import GroundedLabeller
from ap_gym.text import INVENTED_VERBS, commands_in, failed_action
from ap_gym.types import WorldFacts


def read(text):
    return [(c.kind, c.x, c.y, c.verb, c.universal, c.negated) for c in claims_in(text)]


@pytest.mark.parametrize(("text", "claim"), [
    # a scope qualifier is cut out of the name it followed, and kept as the claim's scope
    ("The mug is in the cabinet in these kitchens.", ("location", "mug", "cabinet", "", True, False)),
    ("Potatoes are always on the countertop in heat tasks.", ("location", "potatoes", "countertop", "", True, False)),
    ("Pencils are found on the desk in bedrooms like this one.", ("location", "pencils", "desk", "", True, False)),
    ("The spray bottle is in the bathtub in this room.", ("location", "spray bottle", "bathtub", "", False, False)),
    # hedges, styles, company and quantifiers
    ("Key insight: the apple is most likely sitting in the fridge.", ("location", "apple", "fridge", "", False, False)),
    ("I think the keychain tends to be kept in the drawers.", ("location", "keychain", "drawers", "", False, False)),
    ("You'll usually spot the knife lying in one of the drawers, next to the sponge.",
     ("location", "knife", "drawers", "", False, False)),
    ("The mug is on the countertop with the salt shaker.", ("location", "mug", "countertop", "", False, False)),
    ("Both soapbars are on the sidetable already.", ("location", "soapbars", "sidetable", "start", False, False)),
    ("Rule of thumb: the vase is never on the shelf.", ("location", "vase", "shelf", "start", False, True)),
    # preconditions and their denials
    ("To clean the soapbar you need the bathtubbasin.", ("precondition", "soapbar", "bathtubbasin", "clean", False,
                                                          False)),
    ("Cool the bread in the freezer compartment of the microwave.", ("precondition", "bread", "microwave", "cool",
                                                                     False, False)),
    ("The wooden door opens with the old key.", ("precondition", "wooden door", "old key", "open", False, False)),
    ("No key is needed to open the antique trunk.", ("precondition", "antique trunk", "key", "open", False, True)),
    # order, in its several forms
    ("Move the butterknife to the countertop first and clean it afterwards.",
     ("order", "move butterknife to countertop", "clean it", "", False, False)),
    ("Open the wooden door before you unlock it.", ("order", "open wooden door", "unlock it", "", False, False)),
    ("After you heat the egg, take it from the microwave.", ("order", "heat egg", "take it", "", False, False)),
    ("Heat the egg before you pick it up.", ("order", "heat egg", "pick up it", "", False, False)),
    # over-generalisation, and outcomes
    ("Note: opening the drawer never seems to work.", ("overgeneralised", "open drawer", "", "", False, False)),
    ("The safe cannot be opened.", ("overgeneralised", "open safe", "", "", False, False)),
    ("Taking the cd after opening the safe worked.", ("outcome", "take cd", "", "", False, False)),
])
def test_the_reader_reads_each_style(text, claim):
    assert claim in read(text)


def test_an_inline_plan_gives_its_steps_in_order():
    found = read("Strategy: 1) take the lettuce from the countertop 2) cool it with the fridge 3) put it in the cabinet")
    assert ("order", "take lettuce from countertop", "cool it with fridge", "", False, False) in found
    assert ("order", "cool it with fridge", "put it in cabinet", "", False, False) in found


@pytest.mark.parametrize("text", [
    "Make sure the apple ends up in the fridge.",  # a goal
    "If the key isn't on the table, check the drawer.",  # a hypothesis
    "Put the mug in the coffee machine once it is clean.",  # an instruction, not where it starts
    "Heating the mug only works with the stoveburner.",  # a precondition, not an outcome
])
def test_goals_and_instructions_are_no_location_or_outcome_claims(text):
    assert not [c for c in read(text) if c[0] in ("location", "outcome")]


KITCHEN = WorldFacts(
    "alf/1", "pick", where={"dishsponge 1": ("drawer 2",), "mug 1": ("sinkbasin 1",)},
    needs={"clean": ("sinkbasin 1",), "closed": ("drawer 1", "drawer 2")},
    plan=("go to drawer 2", "open drawer 2", "take dishsponge 1 from drawer 2", "go to sinkbasin 1",
          "clean dishsponge 1 with sinkbasin 1"),
    objects=("dishsponge 1", "drawer 1", "drawer 2", "mug 1", "sinkbasin 1", "countertop 1"), engine="test")
OTHER = WorldFacts("alf/2", "pick", where={"dishsponge 1": ("countertop 1",), "mug 1": ("fridge 1",)},
                   objects=("countertop 1", "dishsponge 1", "fridge 1", "mug 1"), engine="test")
LABEL = GroundedLabeller({"alf/1": KITCHEN, "alf/2": OTHER}, "alfworld")


def reasons(text, steps=()):
    return sorted({r.split(":")[0] for r in LABEL(text, [SourceRecord("x", tuple(steps), False, "pick",
                                                                        "alf/1")]).reasons})


@pytest.mark.parametrize(("text", "expected"), [
    ("The dish sponge is in a drawer.", []),  # "dish sponge" is the engine's "dishsponge"
    ("The dish sponge is always in a drawer in these kitchens.", ["universal"]),  # not in alf/2
    ("The mug sits under the sink.", []),  # "sink" is the engine's "sinkbasin"
    ("The mug is in drawer 7.", ["absent"]),  # drawers 1 and 2 only
    ("The mug is in the fridge.", ["absent"]),  # a fridge is in the family, not in this world
    ("The mug is never in the sinkbasin.", ["location"]),
    ("Clean the sponge in the bathtub.", ["precondition"]),
    ("Taking things out of drawers never works.", ["overgeneralised"]),  # it does, once the drawer is open
    ("Don't take the sponge from the drawer.", ["overgeneralised"]),  # the winning plan does
    ("You can't take the sponge out of a closed drawer.", []),  # true of a closed drawer
])
def test_claims_are_checked_against_the_world(text, expected):
    assert reasons(text, [("take cup from drawer 1", "Nothing happens.")]) == expected


def test_an_outcome_the_records_contradict_is_flagged_and_one_they_bear_out_is_not():
    failed = [("take mug 1 from sinkbasin 1", "Nothing happens.")]
    assert reasons("Taking the mug from the sinkbasin worked.", failed) == ["contradicted"]
    assert reasons("Taking the mug from the sinkbasin worked.",
                   [("take mug 1 from sinkbasin 1", "You pick up the mug 1.")]) == []


def test_the_word_lists_issue_39_named():
    assert [c.text for c in commands_in("'take the key' worked", None)] == ["take the key"]  # "worked" ends it
    assert {"carry", "fry"}.isdisjoint(INVENTED_VERBS)  # prose verbs, never read as invented commands
    assert failed_action("Cutting something requires a knife.")


def test_a_record_without_steps_is_no_evidence_that_an_object_is_absent():
    rules = EnvironmentLabeller()
    plan = "1. take cup 2 from sinkbasin 1\n2. move cup 2 to diningtable 1"
    assert not rules(plan, [SourceRecord("put a cup on the table.", (), True, "pick", "alf/1")]).flagged
    assert rules(plan, [SourceRecord("put a cup on the table.", (("look", "You see a mug 1 on a shelf 1."),), True,
                                     "pick", "alf/1")]).flagged
