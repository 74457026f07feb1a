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
