"""The trainer (``ap-gym train``): demonstrations through the evaluation prompt, SFT that
learns, RL from a checkpoint, resume after a kill, checkpoints that are what they say, and
one writer per run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

import ap_gym
from ap_gym.backbones.base import Scores
from ap_gym.paths import LockedError, exclusive_lock
from ap_gym.policies.react import NoMemory
from ap_gym.training import (
    CheckpointError,
    RLStage,
    SFTStage,
    TrainConfig,
    Trainer,
    TrainError,
    demonstrations,
    publish_checkpoint,
    verify_checkpoint,
    weights_checksum,
)
from ap_gym.trainlog import TrainingLog
from tests.training.lockers import ENV_ID

ROOT = Path(__file__).resolve().parents[2]
AGENT = {"history_window": 3, "max_observation_chars": 200}


def config(tmp_path: Path, *stages, **kw) -> TrainConfig:
    return TrainConfig(**{"name": "toy", "out": str(tmp_path / "train"), "benchmark": ENV_ID, "model": "tiny",
                          "agent": AGENT, "seed": 0, "autocast": "none", "threads": 1, "save_every": 2,
                          "stages": stages or (SFTStage(epochs=3, batch=4, lr=3e-3),), **kw})


class _Expert:
    """A backbone for a check whose subject is the prompt: it scores the walkthrough's next
    command highest and records every prompt it was shown."""

    identity = "expert scorer"

    def __init__(self, plan):
        self.plan, self.seen = list(plan), []

    def score(self, messages, candidates, reduction="sum"):
        self.seen.append(([dict(m) for m in messages], list(candidates)))
        want = self.plan.pop(0)
        return Scores(tuple(0.0 if c == want else -5.0 for c in candidates))

    def generate(self, *args, **kwargs):
        raise AssertionError("not used")

    def describe(self):
        return {"kind": "test"}


def test_a_demonstration_is_the_prompt_the_choose_agent_sees_on_the_experts_path():
    env = gym.make(ENV_ID, split="train")
    try:
        demos, counts = demonstrations(env, ["lockers/0", "lockers/1"], agent=AGENT)
        assert counts == {"tasks": 2, "won": 2, "failed": 0, "infrastructure": 0}
        assert [d.task_id for d in demos] == ["lockers/0", "lockers/0", "lockers/1", "lockers/1"]
        for task in ("lockers/0", "lockers/1"):
            mine = [d for d in demos if d.task_id == task]
            expert = _Expert([d.command for d in mine])
            episode = ap_gym.run_episode(env, NoMemory(expert, AGENT).eval(), task_id=task, seed=0)
            assert episode.success
            assert [(list(d.messages), list(d.candidates)) for d in mine] == \
                [([dict(m) for m in ms], cs) for ms, cs in expert.seen]
            assert mine[-1].candidates[mine[-1].chosen] == mine[-1].command
    finally:
        env.close()


@pytest.mark.slow
def test_sft_lowers_the_loss_then_rl_trains_from_its_checkpoint(tmp_path):
    sft = config(tmp_path, SFTStage(epochs=6, batch=4, lr=3e-3))
    done = Trainer(sft, echo=None).run()
    rows = TrainingLog.read(tmp_path / "train" / "toy" / "1-sft" / "training.jsonl")
    assert [r["update"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) == 24
    first, last = sum(r["loss"] for r in rows[:4]) / 4, sum(r["loss"] for r in rows[-4:]) / 4
    assert last < first * 0.7, (first, last)
    assert verify_checkpoint(done.path).weights_sha256 == done.weights_sha256
    assert (tmp_path / "train" / "toy" / "checkpoint").resolve() == done.path.resolve()
    assert not (tmp_path / "train" / "toy" / "1-sft" / "progress").exists()  # progress saves go once published
    # RL from that checkpoint: a run of its own whose identity is the checkpoint's weights
    rl = config(tmp_path, RLStage(rule="gigpo", updates=2, groups=2, group_size=2, lanes=2, lr=1e-3),
                name="toy-rl", model=str(tmp_path / "train" / "toy" / "checkpoint"))
    after = Trainer(rl, echo=None).run()
    record = json.loads((tmp_path / "train" / "toy-rl" / "train.json").read_text())
    assert record["base"]["weights_sha256"] == done.weights_sha256
    rows = TrainingLog.read(tmp_path / "train" / "toy-rl" / "1-gigpo" / "training.jsonl")
    assert [r["update"] for r in rows] == [1, 2] and all(0 <= r["success"] <= 1 for r in rows)
    assert after.weights_sha256 != done.weights_sha256
    # a second run of the same config trains nothing: every stage is verified and kept
    said = []
    assert Trainer(rl, echo=said.append).run().weights_sha256 == after.weights_sha256
    assert any("kept" in line for line in said)


def _train_cli(tmp_path: Path, data: dict, **popen) -> subprocess.Popen:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "ap_gym.cli", "train", str(path)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


@pytest.mark.slow
def test_a_killed_training_resumes_where_it_stopped_and_ends_where_an_unbroken_one_does(tmp_path):
    data = {"name": "toy", "imports": ["tests.training.lockers"], "benchmark": ENV_ID, "model": "tiny",
            "agent": AGENT, "autocast": "none", "save_every": 3, "threads": 1,
            "stages": [{"kind": "sft", "epochs": 4, "batch": 2, "lr": 3e-3},
                       {"kind": "rl", "rule": "grpo", "updates": 3, "groups": 1, "group_size": 2, "lanes": 1}]}
    unbroken = _train_cli(tmp_path, {**data, "out": str(tmp_path / "a")})
    assert unbroken.wait(timeout=900) == 0, unbroken.stdout.read()[-3000:]
    # the same run killed once a progress save of the first stage exists, then run again
    proc = _train_cli(tmp_path, {**data, "out": str(tmp_path / "b")})
    progress = tmp_path / "b" / "toy" / "1-sft" / "progress"
    while proc.poll() is None and not any(progress.glob("update-*/ap-gym-checkpoint.json")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "b" / "toy" / "1-sft" / "checkpoint").exists(), "the kill came too late to test resume"
    again = _train_cli(tmp_path, {**data, "out": str(tmp_path / "b")})
    output = again.communicate(timeout=900)[0]
    assert again.returncode == 0, output[-3000:]
    assert "resuming after update" in output
    for stage in ("1-sft", "2-grpo"):
        a = TrainingLog.read(tmp_path / "a" / "toy" / stage / "training.jsonl")
        b = TrainingLog.read(tmp_path / "b" / "toy" / stage / "training.jsonl")
        assert [r["update"] for r in b] == [r["update"] for r in a]  # each update once, in order
        assert [round(r["loss"], 5) for r in b] == [round(r["loss"], 5) for r in a]
    assert weights_checksum(tmp_path / "b" / "toy" / "checkpoint") == weights_checksum(tmp_path / "a" / "toy" /
                                                                                         "checkpoint")


def test_guided_demonstrations_show_the_designs_guidance_written_by_the_model_in_training(tmp_path):
    """SFT with a design's guidance in the prompt: the expert acts under guidance that the
    stage's model wrote from the memory the expert's episodes filled."""
    from ap_gym.training import Guidance
    from ap_gym.training.demos import load_demonstrations

    guided = SFTStage(epochs=1, batch=4, lr=3e-3, guidance=Guidance(
        policy="anti_persistence", options={"memory": {"synthesis": {"max_new_tokens": 4}}}))
    trainer = Trainer(config(tmp_path, guided), echo=None)
    trainer.run()
    folder = trainer.stage_dirs()[0]
    assert folder.name == "1-sft-anti_persistence"
    demos, counts = load_demonstrations(folder / "demonstrations.jsonl")
    assert counts["won"] == 8
    systems = [d.messages[0]["content"] for d in demos]
    plain = [s for s in systems if s.splitlines()[-1] == "Your task: take the coin ."]
    assert len(plain) < len(systems), "no demonstration showed guidance"
    assert any("past attempts" in s.lower() or "##" in s for s in systems)
    with pytest.raises(TrainError, match="not a memory design"):
        TrainConfig.from_dict({"name": "x", "benchmark": ENV_ID,
                               "stages": [{"kind": "sft", "guidance": {"policy": "no_memory"}}]})


def test_a_half_saved_checkpoint_is_never_taken(tmp_path):
    def write(d: Path) -> None:
        (d / "config.json").write_text("{}")
        (d / "model.safetensors").write_bytes(b"x" * 1000)

    done = publish_checkpoint(tmp_path / "ckpt", write, {"stage": 1})
    assert verify_checkpoint(done.path).meta == {"stage": 1}
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"x" * 500)  # cut, as by a kill mid-write
    with pytest.raises(CheckpointError, match="cut or changed"):
        verify_checkpoint(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"y" * 1000)  # same size, other bytes
    with pytest.raises(CheckpointError, match="checksum"):
        verify_checkpoint(tmp_path / "ckpt")
    # what a kill inside save_pretrained leaves: config.json, weights, no manifest
    half = tmp_path / "half"
    half.mkdir()
    write(half)
    with pytest.raises(CheckpointError, match="never used"):
        verify_checkpoint(half)
    # a writer that dies before publishing leaves no checkpoint at all
    def dies(d: Path) -> None:
        write(d)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        publish_checkpoint(tmp_path / "never", dies)
    assert not (tmp_path / "never").exists() and not list(tmp_path.glob(".tmp-never-*"))


def test_a_stage_resumes_from_its_last_complete_save_not_a_half_written_one(tmp_path):
    cfg = config(tmp_path, SFTStage(epochs=1, batch=4, lr=3e-3))
    trainer = Trainer(cfg, echo=None)
    trainer.run()
    folder = trainer.stage_dirs()[0]
    progress = folder / "progress" / "update-000009"  # newer than any save, but never finished
    progress.mkdir(parents=True)
    (progress / "config.json").write_text("{}")
    assert Trainer._latest_progress(folder) is None


def test_a_run_refuses_another_config_or_other_starting_weights(tmp_path):
    first = config(tmp_path, SFTStage(epochs=1, batch=8))
    Trainer(first, echo=None).run()
    with pytest.raises(TrainError, match="another config"):
        Trainer(config(tmp_path, SFTStage(epochs=2, batch=8)), echo=None).run()
    # the model it started from changed on disk: one path, other weights
    base = tmp_path / "train" / "toy" / "base"
    weights = next(base.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    from ap_gym.backbones.checkpoint import MANIFEST

    (base / MANIFEST).unlink()  # as a user's retrained directory would be
    with pytest.raises(TrainError, match="other weights"):
        Trainer(first, echo=None).run()
    said = []
    Trainer(first, fresh=True, echo=said.append).run()  # --fresh starts again
    assert any(line.startswith("trained:") for line in said)


def test_a_run_recorded_before_a_stage_key_existed_resumes(tmp_path):
    """A run trained before SFT stages had ``guidance`` records no such key; it must resume
    under the version that added it (left at its default), and a set value must not."""
    import json

    cfg = config(tmp_path, SFTStage(epochs=1, batch=8))
    Trainer(cfg, echo=None).run()
    record = cfg.run_dir / "train.json"
    old = json.loads(record.read_text())
    for stage in old["config"]["stages"]:
        stage.pop("guidance", None)
    record.write_text(json.dumps(old))
    from ap_gym.backbones.checkpoint import MANIFEST  # the stage's checkpoint records its stage too

    manifest_path = Trainer(cfg, echo=None).stage_dirs()[0] / "checkpoint" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["meta"]["stage"].pop("guidance", None)
    manifest_path.write_text(json.dumps(manifest))
    said: list[str] = []
    Trainer(cfg, echo=said.append).run()
    assert any(line.startswith("trained:") for line in said)
    # and a record written while the key was in it at its default (None) resumes too
    for stage in old["config"]["stages"]:
        stage["guidance"] = None
    record.write_text(json.dumps(old))
    said.clear()
    Trainer(cfg, echo=said.append).run()
    assert any(line.startswith("trained:") for line in said)
    guided = config(tmp_path, SFTStage(epochs=1, batch=8, guidance={"policy": "anti_persistence"}))
    with pytest.raises(TrainError, match="another config"):
        Trainer(guided, echo=None).run()


def test_one_process_trains_a_run_at_a_time(tmp_path):
    cfg = config(tmp_path)
    with exclusive_lock(cfg.run_dir / ".lock", "test"), pytest.raises(LockedError, match=f"pid {os.getpid()}"):
        Trainer(cfg, echo=None).run()


def test_a_config_is_checked_before_anything_trains(tmp_path):
    with pytest.raises(TrainError, match="agent"):
        TrainConfig.from_dict({"name": "x", "benchmark": ENV_ID, "agent": {"histroy_window": 3},
                               "stages": [{"kind": "sft"}]})
    with pytest.raises(TrainError, match="stages"):
        TrainConfig.from_dict({"name": "x", "benchmark": ENV_ID, "stages": [{"kind": "dpo"}]})
    with pytest.raises(TrainError, match="model"):
        Trainer(config(tmp_path, model=str(tmp_path / "missing")), echo=None).run()


def test_the_training_log_resumes_with_the_lines_before_the_save(tmp_path):
    path = tmp_path / "training.jsonl"
    log = TrainingLog(path, run="r", rule="sft")
    for u in range(1, 6):
        log.write(update=u, loss=float(u))
    resumed = TrainingLog.resume(path, upto=3, run="r", rule="sft")
    assert resumed.last["update"] == 3
    resumed.write(update=4, loss=40.0)
    assert [(r["update"], r["loss"]) for r in TrainingLog.read(path)] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    assert TrainingLog.header(path)["rule"] == "sft"


def test_tensorboard_event_files_are_written_when_asked(tmp_path):
    pytest.importorskip("tensorboard")
    Trainer(config(tmp_path, SFTStage(epochs=1, batch=8), tensorboard=True), echo=None).run()
    assert list((tmp_path / "train" / "toy" / "1-sft" / "tensorboard").glob("events.out.tfevents.*"))


def test_ap_gym_train_help_and_a_bad_config_say_what_to_do(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    shown = subprocess.run([sys.executable, "-m", "ap_gym.cli", "train", "--help"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0 and "expert" in shown.stdout and "--fresh" in shown.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "benchmark": "alfworld", "stages": [{"kind": "sft", "lr": -1}]}))
    done = subprocess.run([sys.executable, "-m", "ap_gym.cli", "train", str(bad)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "stages.0.sft.lr" in done.stderr


@pytest.mark.slow
def test_scienceworld_gold_paths_are_demonstrations_too():
    """ScienceWorld's gold path, played through the agent's prompt, wins and gives one
    demonstration per step (the recipe benchmarks/train/scienceworld-sft.yaml)."""
    env = gym.make("ap_gym/ScienceWorld-v0", split="train")
    try:
        task = env.unwrapped.task_ids("train")[0]
        demos, counts = demonstrations(env, [task], agent={"history_window": 6, "max_admissible_listed": 60})
    finally:
        env.close()
    assert counts["won"] == 1 and len(demos) >= 3
    assert all(d.task_id == task and d.messages[-1]["role"] == "user" for d in demos)
    TrainConfig.from_file(ROOT / "benchmarks" / "train" / "scienceworld-sft.yaml")
