"""The policy registry: declared needs decide what a policy gets; specs rebuild policies."""

from __future__ import annotations

import pytest

from ap_gym.policies import BasePolicy, get_policy, make_policy, register_policy, spec_of
from ap_gym.protocol import RunConfig
from ap_gym.protocol.setting import Resources, build_policy


@register_policy("test_seeded", needs=("seed",))
class Seeded(BasePolicy):
    """A policy that needs only a seed."""

    def __init__(self, seed: int, greeting: str = "hi") -> None:
        super().__init__()
        self.seed, self.greeting = seed, greeting

    def act(self, observation, info):
        self.record_step()
        return self.greeting


def test_the_protocol_passes_exactly_what_a_policy_declares(tmp_path):
    config = RunConfig.from_dict({"benchmarks": ["textworld"], "policies": [
        {"name": "test_seeded", "options": {"greeting": "hello"}}, {"name": "random", "options": {"seed": 9}}]})
    resources = Resources()
    seeded = build_policy(config.policies[0], config, tmp_path / "m.sqlite", 4, resources)
    assert (seeded.seed, seeded.greeting) == (4, "hello")
    assert build_policy(config.policies[1], config, tmp_path / "m.sqlite", 4, resources).seed == 9  # options win
    assert not resources._backbones and not resources._embedders  # nothing loaded that nobody needs
    assert get_policy("test_seeded").needs == {"seed"} and not get_policy("test_seeded").stateful
    assert get_policy("anti_persistence").stateful and get_policy("anti_persistence").learns


def test_a_spec_rebuilds_the_policy():
    policy = make_policy("test_seeded", seed=3, greeting="yo")
    spec = spec_of(policy)
    assert spec == {"name": "test_seeded", "options": {"seed": 3, "greeting": "yo"}}
    again = make_policy(spec["name"], **spec["options"])
    assert (again.seed, again.greeting) == (3, "yo") and again.spec() == spec


def test_memory_policy_specs_name_their_objects(tiny_backbone, embedder, tmp_path):
    policy = make_policy("anti_persistence", tiny_backbone, embedder=embedder, db_path=tmp_path / "m.sqlite",
                         fixed_mode="corrective", memory={"budget": 3})
    spec = policy.spec()
    assert spec["name"] == "anti_persistence" and spec["options"]["fixed_mode"] == "corrective"
    assert spec["options"]["backbone"] == tiny_backbone.identity and spec["options"]["memory"] == {"budget": 3}
    policy.close()


def test_bad_registrations_and_names_are_refused():
    with pytest.raises(ValueError, match="unknown needs"):
        register_policy("x", needs=("gpu",))
    with pytest.raises(ValueError, match="must support snapshots"):
        register_policy("x", supports=("training",))
    with pytest.raises(ValueError, match="unknown policy 'nope'.*register_policy"):
        make_policy("nope")


def test_a_taken_name_is_refused_and_the_same_object_is_welcome_again():
    from ap_gym.policies import RandomPolicy

    with pytest.raises(ValueError, match=r"'trajectory' is taken by ap_gym\.policies\.trajectory:TrajectoryMemory"):
        register_policy("trajectory")(Seeded)
    register_policy("random", needs=("seed",))(RandomPolicy)  # a module imported twice: nothing changes
    assert get_policy("random").factory is RandomPolicy and get_policy("trajectory").factory.__name__ == \
        "TrajectoryMemory"


def test_a_new_design_is_one_class_and_its_retrieval_reaches_the_record(tiny_backbone, embedder, tmp_path):
    """One dataclass, one decorator: a policy with options, whose retrieved records are in
    the episode's decision record (what the viewer links) without a word from the design."""
    from dataclasses import dataclass

    import ap_gym
    from ap_gym.policies import register_design
    from tests.helpers import TINY_AGENT, Counter

    @register_design("test_recent_two")
    @dataclass(frozen=True)
    class RecentTwo:
        """Shows the two most similar records as plain text."""

        k: int = 2

        def guidance(self, task):
            hits = task.memory.retrieve_records(task.vec, self.k)
            return [("Recent", task.records_text([r for r, _ in hits]))] if hits else []

        def learn(self, task, episode, record_id):
            pass

    info = get_policy("test_recent_two")
    assert info.stateful and info.learns and info.description == "Shows the two most similar records as plain text."
    with pytest.raises(ValueError, match="unknown option"):
        info.check_options({"kk": 1})
    policy = make_policy("test_recent_two", tiny_backbone, embedder=embedder, db_path=tmp_path / "m.sqlite", k=1,
                         agent=TINY_AGENT["agent"])
    env = Counter()
    first = ap_gym.run_episode(env, policy.train(), task_id="c/1", max_steps=2)
    second = ap_gym.run_episode(env, policy, task_id="c/2", max_steps=2)
    assert first.policy_info["retrieved_records"] == [] and len(second.policy_info["retrieved_records"]) == 1
    assert second.policy_info["similarities"][0] > 0.5 and "## Recent" in second.policy_info["guidance"]
    assert policy.spec()["options"]["k"] == 1
    policy.close()
