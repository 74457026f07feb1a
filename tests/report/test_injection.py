"""The measuring apparatus validated by injection (benchmarks/injection.py, small): the
audit recovers the injected share, abstraction memory reproduces wrong rules, and
Anti-Persistence does not carry them forward. It doubles as the policy-level test of
AutoRefine's evolution and pruning and of Reflexion's handling of successes, which a
random tiny model never exercises (it never wins)."""

from __future__ import annotations

import pytest

from ap_gym.backbones.scripted import CompliantBackbone, guidance_rules


@pytest.fixture(scope="module")
def injection():
    from ap_gym import injection

    return injection


@pytest.fixture(scope="module")
def outcomes(injection, embedder, tmp_path_factory):
    work = tmp_path_factory.mktemp("injection")
    return {name: injection.study(name, share=0.3, rules=10, iterations=1, train_per_iter=60, heldout=15,
                                  error_rate=0.05, embedder=embedder, workdir=work)
            for name in ("random", "walkthrough", "no_memory", "abstraction", "anti_persistence", "autorefine",
                         "reflexion")}


def test_the_audit_recovers_the_injected_share(outcomes, injection):
    seeded = outcomes["abstraction"]
    assert (seeded.seeded, seeded.seeded_flagged) == (10, 3)
    low, high = injection.wilson(seeded.seeded_flagged, seeded.seeded)
    assert low <= 0.3 <= high


def test_abstraction_memory_reproduces_the_errors(outcomes):
    a = outcomes["abstraction"]
    k_exposed, n_exposed = map(int, a.new_flagged_exposed.split("/"))
    k_unexposed, n_unexposed = map(int, a.new_flagged_unexposed.split("/"))
    assert n_exposed > 0 and k_exposed / n_exposed > (k_unexposed / n_unexposed if n_unexposed else 0) + 0.5
    assert a.heldout_bought_at_once > outcomes["no_memory"].heldout_bought_at_once + 0.5
    assert a.alpha > 0.5 and a.q > 0 and a.eta == 1.0


def test_anti_persistence_does_not_carry_them_forward(outcomes):
    ap, none = outcomes["anti_persistence"], outcomes["no_memory"]
    assert ap.new_abstractions == 0 and ap.heldout_wrong_guidance == 0
    assert ap.heldout_bought_at_once <= none.heldout_bought_at_once + 0.05
    assert ap.heldout_success >= none.heldout_success - 0.05


def test_autorefine_prunes_the_wrong_rules_and_evolves_skills(outcomes, injection, embedder, tmp_path):
    r = outcomes["autorefine"]
    assert r.extra["deactivated"] >= 1 and r.active_wrong_seeded_at_end == 0
    # evolution needs a family with both successes and failures: no wrong rules, a clumsy actor
    clean = injection.study("autorefine", share=0.0, rules=10, iterations=1, train_per_iter=40, heldout=5,
                            error_rate=0.1, embedder=embedder, workdir=tmp_path)
    assert 0 < clean.extra["train_success"] < 1
    assert clean.extra["skills_evolved"] >= 1 and "skill" in clean.extra["kinds_written"]


def test_the_floors_lie_below_and_above_the_designs(outcomes):
    designs = [outcomes[n] for n in ("no_memory", "abstraction", "anti_persistence", "autorefine", "reflexion")]
    assert outcomes["walkthrough"].heldout_success == 1.0
    assert outcomes["random"].heldout_success <= min(o.heldout_success for o in designs)
    assert outcomes["walkthrough"].heldout_success >= max(o.heldout_success for o in designs)
    # the contrast the demo shows: reproduced errors in abstraction memory, none in Anti-Persistence
    assert outcomes["abstraction"].heldout_bought_at_once > outcomes["anti_persistence"].heldout_bought_at_once + 0.5
    assert set(outcomes["abstraction"].curve) == {-1, 0}


def test_run_study_writes_a_labelled_report_and_curves(injection, tmp_path):
    injection.run_study(tmp_path, rules=6, iterations=1, train_per_iter=5, heldout=4,
                        policies=("no_memory", "anti_persistence"), progress=False)
    text = (tmp_path / "report.md").read_text()
    assert injection.LABEL in text and "| anti_persistence |" in text
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_reflexion_reflects_on_failures_only(outcomes):
    r = outcomes["reflexion"]
    assert r.extra["train_success"] > 0.5  # the walkthrough wins: successes happen
    assert r.new_abstractions == r.extra["failed_training_episodes"] and r.extra["kinds_written"] in ([], ["reflection"])


def test_the_compliant_backbone_follows_recommended_admissible_commands_only():
    backbone = CompliantBackbone({"buy boots": ["search[boots]", "click[b0abc12345]", "click[9]", "click[buy now]"]},
                                 synthesise=lambda prompt: "", error_rate=0.0)

    def act(guidance, admissible, issued=()):
        system = "You are an agent.\n\nYour task: buy boots\n\n## Rules\n" + guidance
        turns = [{"role": "system", "content": system}]
        for command in issued:
            turns += [{"role": "user", "content": "page"}, {"role": "assistant", "content": command}]
        turns.append({"role": "user", "content": "page\n\nAdmissible commands: " + ", ".join(admissible)})
        return backbone.act(turns)

    item = ["click[9]", "click[buy now]"]
    issued = ["search[boots]", "click[b0abc12345]"]
    assert act("Buy at once: 'click[buy now]'.", item, issued) == "click[buy now]"
    assert act("Never 'click[buy now]' early.", item, issued) == "click[9]"
    assert act("[1] Task: x\n> click[buy now]\n  Thank you", item, issued) == "click[9]"  # a record, not a rule
    assert act("Use 'click[10]'.", item, issued) == "click[9]"  # not admissible: the walkthrough goes on
    assert guidance_rules("## Rules\n- a rule\n[1] Task: t\n> cmd\n  obs") == "## Rules\n- a rule"
