from __future__ import annotations

import hashlib

import gymnasium as gym
import pytest

import ap_gym
from ap_gym.policies import MODES, AntiPersistence, MemoryPolicy, make_policy
from ap_gym.policies.anti_persistence import MODE_HEADERS
from ap_gym.types import Termination
from tests.helpers import Counter

MEMORY = ["trajectory", "abstraction", "joint", "reflexion", "autorefine", "anti_persistence"]
GEN = {"action_mode": "generate", "generation": {"max_new_tokens": 4}}
SYN = {"synthesis": {"max_new_tokens": 12}}


class Tasks(Counter):
    """Counter tasks with distinct instructions, so retrieval has something to rank."""

    TASKS = {f"c/{i}": f"Count to three in room {i}." for i in range(1, 9)}

    def _task_ids(self, split):
        ids = list(self.TASKS)
        return ids[:6] if split == "train" else ids[6:]

    def _start(self, task_id, options):
        start = super()._start(task_id, options)
        return type(start)(start.observation, self.TASKS[task_id], start.score, start.max_score, start.admissible_commands)


def make(name, tiny_backbone, embedder, tmp_path, **kw):
    return make_policy(name, tiny_backbone, embedder=embedder, agent=GEN, memory=SYN,
                       db_path=tmp_path / f"{name}.sqlite", **kw)


def train(policy, n, max_steps=3):
    policy.train()
    env = gym.wrappers.TimeLimit(Tasks(), 50)
    return [ap_gym.run_episode(env, policy, task_id=f"c/{1 + i % 6}", max_steps=max_steps) for i in range(n)]


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", MEMORY)
def test_retrieved_memory_reaches_the_acting_prompt(name, tiny_backbone, embedder, tmp_path):
    policy = make(name, tiny_backbone, embedder, tmp_path, **({"fixed_mode": "none"} if name == "anti_persistence" else {}))
    train(policy, 6)
    policy.eval()
    ep = ap_gym.run_episode(Tasks(), policy, task_id="c/7", max_steps=2)
    info = ep.policy_info
    prompt = ep.steps[0].trace.prompt
    assert info["guidance"] and info["guidance"] in prompt
    records = policy.trajectories.get(info.get("retrieved_records", []))
    abstractions = policy.abstractions.get(info.get("retrieved_abstractions", []))
    assert records or abstractions
    for r in records:
        assert r.instruction in prompt
    for a in abstractions:
        assert a.text in prompt
    assert info["abstractions_in_prompt"] == [a.id for a in abstractions]


@pytest.mark.parametrize("mode", MODES)
def test_each_anti_persistence_mode_reaches_the_prompt(mode, tiny_backbone, embedder, tmp_path):
    policy = make("anti_persistence", tiny_backbone, embedder, tmp_path, fixed_mode=mode)
    episodes = train(policy, 6)
    assert any(not e.success for e in episodes)  # the tiny model fails: corrective has records
    # make one success available for imitation/strategic
    policy.trajectories.add(task_id="c/1", family="c", instruction="Count to three in room 1.",
                            steps=[{"action": "add", "observation": "3", "reward": 1}], success=True, score=3.0,
                            embedding=embedder.embed(["Count to three in room 1.\nYou see a counter at 0."])[0],
                            iteration=0)
    policy.eval()
    ep = ap_gym.run_episode(Tasks(), policy, task_id="c/7", max_steps=1)
    info = ep.policy_info
    assert info["mode"] == mode and not info["synthesis_skipped"]
    assert f"## {MODE_HEADERS[mode]}" in ep.steps[0].trace.prompt and info["mode_guidance"] in ep.steps[0].trace.prompt
    assert ep.usage.calls_for("synthesis") == info["synthesis_calls"] == (0 if mode == "none" else 1)
    if mode == "corrective":
        records = policy.trajectories.get(info["retrieved_records"])
        assert sum(r.success for r in records) <= 1 and any(not r.success for r in records)
    if mode in ("imitation", "strategic"):
        assert all(r.success for r in policy.trajectories.get(info["retrieved_records"]))


def test_missing_records_skip_synthesis_at_no_cost(tiny_backbone, embedder, tmp_path):
    policy = make("anti_persistence", tiny_backbone, embedder, tmp_path, fixed_mode="imitation")
    train(policy, 2)  # failures only
    ep = train(policy, 1)[0]
    assert ep.policy_info["synthesis_skipped"] and ep.policy_info["synthesis_calls"] == 0
    assert ep.usage.calls_for("synthesis") == 0 and ep.policy_info["guidance"] is None
    assert policy.outcomes.entries()[-1].synthesis_calls == 0


@pytest.mark.parametrize("name", MEMORY)
def test_evaluation_leaves_the_database_byte_for_byte_unchanged(name, tiny_backbone, embedder, tmp_path):
    policy = make(name, tiny_backbone, embedder, tmp_path)
    train(policy, 5)
    policy.eval()
    path = tmp_path / f"{name}.sqlite"
    before = sha(path)
    counts = (len(policy.trajectories), len(policy.outcomes), len(policy.abstractions))
    for task in ("c/7", "c/8", "c/7"):
        ap_gym.run_episode(Tasks(), policy, task_id=task, max_steps=2)
    assert sha(path) == before
    assert (len(policy.trajectories), len(policy.outcomes), len(policy.abstractions)) == counts


def test_anti_persistence_after_50_training_episodes(tiny_backbone, embedder, tmp_path):
    policy = make("anti_persistence", tiny_backbone, embedder, tmp_path)
    episodes = train(policy, 50, max_steps=2)
    assert len(policy.trajectories) == 50
    assert len(policy.abstractions) == 0
    assert len(policy.outcomes) == 49  # the first attempt ran with empty memory: not logged
    modes = [e.policy_info["mode"] for e in episodes]
    assert modes[1:5] == list(MODES)  # round-robin start-up once memory is non-empty
    assert episodes[0].policy_info["memory_empty"] and not episodes[1].policy_info["memory_empty"]
    logged = policy.outcomes.entries()
    assert [e.mode for e in logged] == modes[1:]
    assert all(e.reward == pytest.approx(float(e.success) - 0.05 * e.synthesis_calls) for e in logged)


def test_abstraction_memory_records_correct_parents(tiny_backbone, embedder, tmp_path):
    policy = make("abstraction", tiny_backbone, embedder, tmp_path)
    train(policy, 8)
    abstractions = policy.abstractions.all()
    assert len(abstractions) == 8
    for a in abstractions:
        (source,) = policy.trajectories.get(a.sources)
        assert a.parents == sorted(source.abstraction_ids)
    assert abstractions[0].parents == [] and any(a.parents for a in abstractions[1:])


def test_persist_ablation_stores_guidance(tiny_backbone, embedder, tmp_path):
    policy = make("anti_persistence", tiny_backbone, embedder, tmp_path, fixed_mode="corrective", persist_guidance=True)
    train(policy, 4)
    stored = policy.abstractions.all()
    assert stored and all(a.kind == "guidance" and a.sources for a in stored)


def test_infrastructure_failures_and_failed_embeddings_are_not_learned(tiny_backbone, embedder, tmp_path):
    policy = make("anti_persistence", tiny_backbone, embedder, tmp_path)
    train(policy, 3)

    class Crashing(Tasks):
        def _advance(self, action):
            raise ap_gym.EnvInfrastructureError("engine died")

    ep = ap_gym.run_episode(Crashing(), policy, task_id="c/1")
    assert ep.termination is Termination.INFRA
    assert (len(policy.trajectories), len(policy.outcomes)) == (3, 2)

    class Broken:
        identity, dim = embedder.identity, embedder.dim

        def embed(self, texts):
            raise RuntimeError("embedding server down")

    policy.memory.embedder = Broken()
    ep = train(policy, 1)[0]
    assert "embedding server down" in ep.policy_info["embedding_failed"]
    assert (len(policy.trajectories), len(policy.outcomes)) == (3, 2)


def test_state_snapshot_and_reload(tiny_backbone, embedder, tmp_path):
    policy = make("joint", tiny_backbone, embedder, tmp_path)
    train(policy, 3)
    policy.iteration = 1
    policy.save_state(tmp_path / "snap")
    train(policy, 3)
    assert len(policy.trajectories) == 6
    policy.eval().load_state(tmp_path / "snap")
    assert (len(policy.trajectories), len(policy.abstractions), policy.iteration, policy.training) == (3, 3, 1, False)
    ep = ap_gym.run_episode(Tasks(), policy, task_id="c/7", max_steps=1)
    assert ep.policy_info["retrieved_records"]


def test_admission_filter_and_frozen_layer(tiny_backbone, embedder, tmp_path):
    policy = make("abstraction", tiny_backbone, embedder, tmp_path, admission=lambda text, ep: False,
                  frozen_abstractions=["Always count with 'add'."])
    ep = train(policy, 3)[-1]
    assert len(policy.abstractions) == 0
    assert "## Skills\n- Always count with 'add'." in ep.steps[0].trace.prompt
    judged = make("reflexion", tiny_backbone, embedder, tmp_path, admission="llm")
    ep = train(judged, 1)[0]
    assert ep.usage.calls_for("admission") == 1 and ep.usage.calls_for("reflection") == 1
    assert isinstance(judged, MemoryPolicy) and not isinstance(judged, AntiPersistence)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["ap_gym/ScienceWorld-v0", "ap_gym/TextWorld-v0"])
def test_every_policy_trains_and_evaluates_on_real_envs_with_the_default_backbone(env_id, default_backbone, embedder, tmp_path):
    env = gym.make(env_id)
    try:
        train_id = env.unwrapped.task_ids("train")[0]
        test_id = env.unwrapped.task_ids("test")[0]
        for name in ["no_memory", *MEMORY]:
            agent = {"action_mode": "generate", "generation": {"max_new_tokens": 8, "stop": ["\n"]}}
            options = {} if name == "no_memory" else {"embedder": embedder, "db_path": tmp_path / f"{name}.sqlite",
                                                       "memory": {"synthesis": {"max_new_tokens": 16}}}
            if name == "anti_persistence":
                options["fixed_mode"] = "none"  # a mode that always has records once memory is not empty
            policy = make_policy(name, default_backbone, agent=agent, **options)
            policy.train()
            # one step an episode: what is checked is that memory is written, retrieved and
            # synthesised through on real observations, not how the model plays
            first = ap_gym.run_episode(env, policy, task_id=train_id, max_steps=1)
            second = ap_gym.run_episode(env, policy, task_id=train_id, max_steps=1)
            policy.eval()
            held_out = ap_gym.run_episode(env, policy, task_id=test_id, max_steps=1)
            for ep in (first, second, held_out):
                assert ep.termination is not Termination.INFRA, ep.error
                assert ep.usage.calls_for("acting") == ep.num_steps == 1
            if name != "no_memory":
                assert held_out.policy_info["guidance"], name
                assert held_out.policy_info["guidance"] in held_out.steps[0].trace.prompt
    finally:
        env.close()


def _corrupt_snapshots(policy, tmp_path, embedder):
    """Snapshots that must be refused: zeroed, a newer schema, another embedder's dimension."""
    import shutil
    import sqlite3

    good = policy.save_state(tmp_path / "good")
    zeroed = tmp_path / "zeroed"
    shutil.copytree(good, zeroed)
    (zeroed / "memory.sqlite").write_bytes(b"\0" * 8192)
    newer = tmp_path / "newer"
    shutil.copytree(good, newer)
    conn = sqlite3.connect(newer / "memory.sqlite")
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    other_dim = tmp_path / "other_dim"
    shutil.copytree(good, other_dim)
    conn = sqlite3.connect(other_dim / "memory.sqlite")
    conn.execute("UPDATE meta SET value='768' WHERE key='embedding_dim'")
    conn.commit()
    conn.close()
    return {"zeroed": zeroed, "newer": newer, "other_dim": other_dim}


def test_a_bad_snapshot_is_refused_before_the_live_memory_is_touched(tiny_backbone, embedder, tmp_path):
    from ap_gym.errors import StoreError

    policy = make("trajectory", tiny_backbone, embedder, tmp_path)
    train(policy, 5)
    live = tmp_path / "trajectory.sqlite"
    for n, (name, snapshot) in enumerate(_corrupt_snapshots(policy, tmp_path, embedder).items()):
        with pytest.raises(StoreError, match=f"snapshot {snapshot}.*live memory {live} was not modified"):
            policy.load_state(snapshot)
        assert len(policy.trajectories) == 5 + n, name  # still open, still whole, still learning
        train(policy, 1)
    assert len(policy.trajectories) == 8
    policy.close()  # no ProgrammingError hiding anything


def test_a_snapshot_of_another_design_is_refused(tiny_backbone, embedder, tmp_path):
    from ap_gym.errors import StoreError

    ap = make("anti_persistence", tiny_backbone, embedder, tmp_path)
    train(ap, 2)
    snapshot = ap.save_state(tmp_path / "ap_snapshot")
    trajectory = make("trajectory", tiny_backbone, embedder, tmp_path)
    with pytest.raises(StoreError, match="snapshot of 'anti_persistence', not of 'trajectory'"):
        trajectory.load_state(snapshot)


def test_corrective_mode_takes_b_failures_and_one_success(tiny_backbone, embedder, tmp_path):
    policy = make("anti_persistence", tiny_backbone, embedder, tmp_path, fixed_mode="corrective")
    vec = embedder.embed(["Count to three in room 1.\nYou see a counter at 0."])[0]
    for i in range(7):
        policy.trajectories.add(task_id=f"c/{i}", family="c", instruction=f"Count in room {i}.", steps=[],
                                success=i == 0, score=None, embedding=vec, iteration=0)
    ep = ap_gym.run_episode(Tasks(), policy.eval(), task_id="c/7", max_steps=1)
    records = policy.trajectories.get(ep.policy_info["retrieved_records"])
    assert sum(not r.success for r in records) == 5 and sum(r.success for r in records) == 1


@pytest.mark.parametrize("exclude", [False, True])
def test_same_task_records_are_counted_and_can_be_excluded_in_training(exclude, tiny_backbone, embedder, tmp_path):
    """Training repeats tasks, so retrieval can show a task its own earlier record; the
    count is in policy_info, and exclude_same_task leaves those records out while training."""
    policy = make_policy("trajectory", tiny_backbone, embedder=embedder, agent=GEN,
                         memory={**SYN, "exclude_same_task": exclude}, db_path=tmp_path / "t.sqlite")
    episodes = train(policy, 12)  # each of the 6 training tasks twice
    second = episodes[6:]
    own = [e.policy_info["same_task_records_retrieved"] for e in second]
    if exclude:
        assert own == [0] * 6
        for e in second:
            assert all(r.task_id != e.task_id for r in policy.trajectories.get(e.policy_info["retrieved_records"]))
    else:
        assert all(n >= 1 for n in own)  # budget 5 of 6+ records: the near-identical own record is among them
    policy.eval()
    ep = ap_gym.run_episode(Tasks(), policy, task_id="c/1", max_steps=1)
    assert ep.policy_info["same_task_records_retrieved"] >= 1  # held-out (eval) is never filtered
