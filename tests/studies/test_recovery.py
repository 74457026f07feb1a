"""The audit recovers a planted truth and stays silent on a confounded null (issue 28)."""

from __future__ import annotations

from ap_gym.studies.recovery import Truth, coverage, simulate, stratified_truth

CONFOUNDED = (0.05, 0.05, 0.5, 0.5)  # errors that follow the task family


def test_the_intervals_cover_the_planted_truth_at_their_nominal_rate():
    """Copying planted, admission depending on the flag; 80 seeds through the real stores."""
    result = coverage(Truth(invocations=300), range(80))
    for name in ("alpha", "gap", "beta", "eta"):
        assert 0.90 <= result[name]["coverage"] <= 0.99, (name, result[name])
    truth = Truth()
    assert abs(result["gap"]["mean"] - (truth.alpha(0) - truth.base_rates[0])) < 0.03


def test_on_a_confounded_null_the_raw_gap_shows_and_the_stratified_one_does_not():
    null = Truth(base_rates=CONFOUNDED, copy=0.0, invocations=2000)
    row = simulate(null, seed=1).estimates()
    assert row["gap"].excludes_zero() and row["gap"].value > 0.1  # confounding alone makes a raw "gap"
    assert row["stratified_gap"].covers(0.0) and abs(row["stratified_gap"].value) < 0.05
    over_seeds = coverage(Truth(base_rates=CONFOUNDED, copy=0.0, invocations=300), range(60))
    assert over_seeds["stratified_gap"]["coverage"] >= 0.9 and over_seeds["gap"]["excludes_zero"] >= 0.8


def test_with_copying_planted_the_stratified_gap_excludes_zero():
    planted = Truth(base_rates=CONFOUNDED, copy=0.5, compliance=0.6, invocations=2000)
    row = simulate(planted, seed=1)
    estimate = row.estimates()["stratified_gap"]
    assert estimate.excludes_zero() and estimate.covers(stratified_truth(planted, row))


def test_admission_that_follows_the_flag_biases_the_gap_among_stored_abstractions():
    """The paper's gap counts stored abstractions only; with a filter that admits flagged
    outputs less often, it is not alpha - beta, while the invocation gap is."""
    truth = Truth(admit_flagged=0.1, admit_clean=0.9, invocations=2000)
    row = simulate(truth, seed=2)
    assert row.estimates()["gap"].covers(truth.gap(0))
    assert not row.estimates()["gap"].covers(row.gap)  # the stored-only gap lies outside


#: The confounded nulls the family-stratified gap cannot handle (issue 39), and one it can.
NULLS = {
    "by family": Truth(base_rates=CONFOUNDED, copy=0.0, randomise=0.5, invocations=400),
    "within a family": Truth(base_rates=(0.1,) * 4, copy=0.0, hard_share=0.5, hard_rate=0.6, randomise=0.5,
                             invocations=400),
    "drift": Truth(base_rates=(0.05,) * 4, copy=0.0, drift=0.6, randomise=0.5, invocations=400),
}


def test_the_stratified_gap_fails_on_a_within_family_null():
    """Harder tasks of a family retrieve other hard tasks' abstractions: no copying at all,
    yet the family-stratified gap excludes 0 in most seeds (the report must not claim it
    stays at 0 on a confounded null)."""
    result = coverage(NULLS["within a family"], range(40))
    assert result["stratified_gap"]["excludes_zero"] >= 0.5 and result["stratified_gap"]["mean"] > 0.1


def test_the_randomised_gap_holds_zero_on_every_confounded_null():
    for name, null in NULLS.items():
        result = coverage(null, range(60))
        assert result["truth"]["randomised_gap"] == 0.0
        assert result["randomised_gap"]["excludes_zero"] <= 0.12, (name, result["randomised_gap"])


def test_the_randomised_gap_finds_a_planted_effect_through_the_confounding():
    planted = Truth(base_rates=(0.1,) * 4, copy=0.9, compliance=0.8, hard_share=0.5, randomise=0.5, invocations=1000)
    result = coverage(planted, range(20))
    assert result["randomised_gap"]["excludes_zero"] >= 0.9
    assert result["randomised_gap"]["coverage"] >= 0.85 and \
        abs(result["randomised_gap"]["mean"] - result["truth"]["randomised_gap"]) < 0.05
