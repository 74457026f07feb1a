"""The one trainer: supervised fine-tuning on expert demonstrations, then GRPO, ReBN or GiGPO.

``ap-gym train CONFIG`` and :class:`Trainer` run a chain of stages on a transformers
causal LM, each starting from the checkpoint the one before published:

* ``sft``: the expert's steps (:mod:`ap_gym.training.demos`: the env's walkthrough played
  through the evaluation stepper and prompt). Objective ``choice`` (the default) is the
  cross-entropy of the ``choose`` agent's own policy, the softmax of the admissible
  commands' summed log-likelihoods, at the expert's command: it trains exactly the rule
  ``ap-gym run`` evaluates (the argmax of that softmax). ``tokens`` is plain next-token
  likelihood of the expert's reply and its end of turn, for agents that generate.
* ``rl``: group rollouts of the choose agent at a temperature
  (:func:`~ap_gym.training.groups.play_groups`: the evaluation agent, prompt and stepper),
  one of three credit-assignment rules (:data:`~ap_gym.training.groups.RULES`), and a
  policy gradient over the admissible commands.

A run lives in ``<out>/<name>/``: ``train.json`` (the config and the identity of the model
it started from: its weights' SHA-256, not just its path), one folder per stage with its
``training.jsonl`` (the log the viewer reads; optionally TensorBoard event files) and its
``checkpoint/``, and ``checkpoint``, a link to the last stage's. Checkpoints are published
atomically with a manifest (:mod:`ap_gym.backbones.checkpoint`). A stage saves its progress
(weights and optimizer) every ``save_every`` updates, so a killed run resumes from its last
complete save: the data order and every draw derive from the seed and the update number,
so a resumed run computes what an unbroken one would. A run refuses to resume under
another config or on other starting weights (``--fresh`` starts again); one process
trains a run at a time (an OS lock).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ap_gym.backbones.checkpoint import (
    Checkpoint,
    CheckpointError,
    publish_checkpoint,
    verify_checkpoint,
    weights_checksum,
)
from ap_gym.errors import APGymError
from ap_gym.paths import atomic_write_json
from ap_gym.trainlog import TrainingLog

__all__ = ["Guidance", "RLStage", "SFTStage", "TrainConfig", "TrainError", "Trainer", "trainable_parameters"]

#: Inside a stage's progress save: the optimizer and where the stage stood.
STATE_FILE = "trainer_state.pt"


class TrainError(APGymError):
    """A training run that cannot go on as asked (the message says what to do)."""


class Guidance(BaseModel):
    """A memory design whose guidance the demonstrations show (see :class:`SFTStage`).

    Attributes:
        policy: a memory design by its registered name (``anti_persistence``, ...).
        options: its options (``memory``, ``bandit``, ...), as in a run config.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str = "anti_persistence"
    options: dict[str, Any] = Field(default_factory=dict)


class SFTStage(BaseModel):
    """Supervised fine-tuning on the env's expert demonstrations.

    Attributes:
        epochs: passes over the demonstrations.
        batch: demonstrations per update (their gradients are summed one at a time, so a
            batch costs no more memory than one).
        lr: AdamW's learning rate.
        objective: ``choice`` (cross-entropy over the admissible commands: what ``choose``
            evaluates) or ``tokens`` (the reply's token likelihood: what ``generate`` needs).
        tasks: the first N tasks of the split only (``None``: all).
        temperature: the softmax temperature of the ``choice`` objective.
        guidance: play the demonstrations inside this memory design
            (:class:`~ap_gym.training.demos.GuidedDemonstrator`): its records are the expert's
            episodes as they are played, its guidance is written by the stage's starting
            model into the system prompt, and the expert acts under it. ``None``: the plain
            agent's prompt.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["sft"] = "sft"
    epochs: int = Field(default=1, ge=1)
    batch: int = Field(default=8, ge=1)
    lr: float = Field(default=1e-4, gt=0)
    objective: Literal["choice", "tokens"] = "choice"
    tasks: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    guidance: Guidance | None = None

    @field_validator("guidance")
    @classmethod
    def _memory_design(cls, value: Guidance | None) -> Guidance | None:
        if value is not None:
            from ap_gym.policies import get_policy

            info = get_policy(value.policy)
            if "synthesis_backbone" not in info.option_names():
                raise ValueError(f"guidance: {value.policy!r} is not a memory design (it writes no guidance)")
            info.check_options(value.options)
        return value

    @property
    def label(self) -> str:
        return "sft" if self.guidance is None else f"sft-{self.guidance.policy}"


#: Stage keys added to ap-gym after runs were trained, with the default that means "as before":
#: left out of a run's identity at that default, so older runs resume.
STAGE_LATER: dict[str, Any] = {"guidance": None}


def _computes_identity(config: Any) -> Any:
    """A recorded ``computes()`` read as today's is written (its stages through
    :func:`_stage_identity`), so a record that holds a later key at its default, or lacks it,
    compares equal to one that does not."""
    if not isinstance(config, Mapping) or not isinstance(config.get("stages"), list):
        return config
    return {**config, "stages": [_stage_identity(stage) for stage in config["stages"]]}


def _stage_identity(stage: Any) -> Any:
    """A stage's settings as a run's identity compares them (see :data:`STAGE_LATER`)."""
    if not isinstance(stage, Mapping):
        return stage
    return {k: v for k, v in stage.items() if not (k in STAGE_LATER and v == STAGE_LATER[k])}


class RLStage(BaseModel):
    """Reinforcement learning from the env's reward with one credit-assignment rule.

    Attributes:
        rule: ``grpo`` (group-normalised returns), ``rebn`` (REINFORCE with return batch
            normalisation) or ``gigpo`` (GRPO plus step groups from anchor states).
        updates: policy-gradient updates.
        groups: tasks per update; group_size: attempts at each task from one start.
        lanes: attempts played at once (their scoring batched).
        temperature: the choose agent's sampling temperature (the policy's).
        lr: AdamW's learning rate.
        decisions: decisions with a nonzero advantage used per update at most (a uniform
            sample: its mean estimates the whole batch's).
        gamma: the discount of ReBN's and GiGPO's step returns.
        max_steps: the attempts' step limit (default: the run's ``max_steps``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["rl"] = "rl"
    rule: Literal["grpo", "rebn", "gigpo"] = "grpo"
    updates: int = Field(default=20, ge=1)
    groups: int = Field(default=2, ge=1)
    group_size: int = Field(default=4, ge=2)
    lanes: int = Field(default=4, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    lr: float = Field(default=2e-5, gt=0)
    decisions: int = Field(default=12, ge=1)
    gamma: float = Field(default=0.9, ge=0, le=1)
    max_steps: int | None = Field(default=None, ge=1)

    @property
    def label(self) -> str:
        return self.rule


Stage = Annotated[SFTStage | RLStage, Field(discriminator="kind")]


class TrainConfig(BaseModel):
    """A training run; saved whole with it (``train.json``).

    Attributes:
        name: the run's folder under ``out``.
        imports: modules to import first (they register a user's envs), as in a run config.
        benchmark: a short name (``alfworld``) or a registered env id.
        env_options: keyword arguments for ``gym.make`` (the same as a run config's).
        split: the tasks trained on (``train``; never the held-out split you report).
        model: ``default`` (the packaged SmolLM2), ``tiny`` (a tiny random Llama, for
            tests) or a model directory (a checkpoint of an earlier run).
        agent: the evaluation agent's options (:class:`~ap_gym.policies.react.AgentConfig`):
            the prompts trained on are the ones ``ap-gym run`` shows with them, so give a
            run config the same ``agent`` options.
        max_steps: the step limit of demonstrations and attempts (default: the env's).
        seed: every draw of the run (data order, tasks, sampling) derives from it.
        train_layers: train the last N transformer blocks and the final norm (0: every
            weight). Fewer is faster on a CPU (the backward pass stops there).
        autocast: ``bfloat16`` computes the training passes in bf16 (weights stay fp32;
            ~2x faster on a CPU with AMX); ``none`` keeps fp32. Rollouts and evaluation
            are always at the model's own precision.
        save_every: updates between progress saves (a kill loses at most these).
        threads: torch threads (default: the cores this process may use).
        tensorboard: also write TensorBoard event files (needs ``tensorboard``).
        stages: what to run, in order.
        out: the results root.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    imports: tuple[str, ...] = ()
    benchmark: str
    env_options: dict[str, Any] = Field(default_factory=dict)
    split: str = "train"
    model: str = "default"
    agent: dict[str, Any] = Field(default_factory=dict)
    max_steps: int | None = Field(default=None, ge=1)
    seed: int = 0
    train_layers: int = Field(default=0, ge=0)
    autocast: Literal["bfloat16", "none"] = "bfloat16"
    save_every: int = Field(default=10, ge=1)
    threads: int | None = Field(default=None, ge=1)
    tensorboard: bool = False
    stages: tuple[Stage, ...] = Field(min_length=1)
    out: str = "results/train"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        from ap_gym.protocol.config import _safe_name

        return _safe_name(value, "training run name")

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: dict[str, Any]) -> dict[str, Any]:
        from ap_gym.policies.react import AgentConfig

        AgentConfig.coerce(value)  # a misspelled option is refused now, not after an hour of training
        return value

    @field_validator("benchmark")
    @classmethod
    def _benchmark(cls, value: str, info: ValidationInfo) -> str:
        import ap_gym  # noqa: F401  (registers the envs)
        from ap_gym.envs import resolve_benchmark
        from ap_gym.protocol.config import import_modules

        import_modules(tuple(info.data.get("imports", ())))
        return resolve_benchmark(value)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        try:
            return cls.model_validate(dict(data))
        except ValidationError as e:
            lines = [f"config key {'.'.join(str(p) for p in err['loc'])!r}: "
                     + ("unknown key (check its spelling)" if err["type"] == "extra_forbidden"
                        else err["msg"].removeprefix("Value error, ")) for err in e.errors()]
            raise TrainError("invalid training config:\n  " + "\n  ".join(lines)) from None

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> TrainConfig:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise TrainError(f"cannot read the training config {path}: {e}") from None
        if not isinstance(data, Mapping):
            raise TrainError(f"{path} must be a mapping of keys to values (see benchmarks/train/)")
        return cls.from_dict({**data, **{k: v for k, v in overrides.items() if v is not None}})

    def computes(self) -> dict[str, Any]:
        """The config without the keys that only say how it runs (resume compares this). A key
        added to ap-gym later, left at its default, is left out too: a run started before it
        existed resumes."""
        later: dict[str, Any] = {"imports": []}
        out = {k: v for k, v in self.model_dump(mode="json").items()
               if k not in ("threads", "out", "tensorboard") and not (k in later and v == later[k])}
        # the same inside each stage: a run trained before SFT's ``guidance`` existed resumes
        out["stages"] = [_stage_identity(stage) for stage in out["stages"]]
        return out

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / self.name


def trainable_parameters(model: Any, layers: int) -> list[Any]:
    """The last ``layers`` transformer blocks and the final norm (0: every weight), with the
    rest frozen. Embeddings stay frozen when only some blocks train: SmolLM2 ties them to the
    output layer, and a trainable embedding would carry the backward pass through every block."""
    params = list(model.parameters())
    if layers <= 0:
        for p in params:
            p.requires_grad_(True)
        return params
    for p in params:
        p.requires_grad_(False)
    blocks = model.model.layers
    chosen = [p for block in blocks[len(blocks) - min(layers, len(blocks)):] for p in block.parameters()]
    chosen += list(model.model.norm.parameters())
    for p in chosen:
        p.requires_grad_(True)
    return chosen


class Trainer:
    """Runs a :class:`TrainConfig` (see the module docstring).

    Args:
        config: the run.
        fresh: start again, removing what an earlier run of this name left.
        echo: where progress lines go (default ``print``; ``None``: silent).
        probe: called with the backbone after every update; the numbers it returns join that
            update's log line (a fixed state's log-probability of the right command, say).
    """

    def __init__(self, config: TrainConfig, *, fresh: bool = False, echo: Callable[[str], None] | None = print,
                 probe: Callable[[Any], Mapping[str, float]] | None = None) -> None:
        self.config = config
        self.fresh = fresh
        self.echo = echo or (lambda _: None)
        self.probe = probe
        self.run_dir = config.run_dir

    # ------------------------------------------------------------------ run
    def run(self) -> Checkpoint:
        """Train every stage not yet trained and return the last stage's checkpoint."""
        import torch
        from transformers.utils import logging as hf_logging

        from ap_gym.paths import exclusive_lock
        from ap_gym.processes import cpu_budget

        hf_logging.disable_progress_bar()  # a bar per save and load would bury the progress lines

        if self.fresh and self.run_dir.exists():
            with exclusive_lock(self.run_dir / ".lock", f"training run {self.run_dir}"):
                for child in self.run_dir.iterdir():
                    if child.name != ".lock":
                        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(self.config.threads or cpu_budget())
        with exclusive_lock(self.run_dir / ".lock", f"training run {self.run_dir}"):
            start = self._identity()
            previous: Path = start
            last: Checkpoint | None = None
            for k, (stage, folder) in enumerate(zip(self.config.stages, self.stage_dirs(), strict=True)):
                last = self._finished(folder, stage, previous)
                if last is None:
                    last = self._stage(k, stage, folder, previous)
                else:
                    self.echo(f"stage {k + 1} ({stage.label}): trained by an earlier run (checkpoint verified); "
                              "kept")
                previous = last.path
            assert last is not None
            self._link(last.path)
            self.echo(f"trained: {self.run_dir / 'checkpoint'} (weights sha256 {last.weights_sha256[:12]})")
            return last

    def _identity(self) -> Path:
        """The starting model's directory, checked against the run's record (``train.json``):
        the same config and the same starting weights, or a :class:`TrainError`."""
        record = self.run_dir / "train.json"
        base = self.base_model()
        try:
            checksum = weights_checksum(base)
        except CheckpointError as e:
            raise TrainError(f"the starting model {base}: {e}") from None
        mine = {"config": self.config.computes(), "base": {"model": self.config.model, "path": str(base),
                                                             "weights_sha256": checksum}}
        if record.exists():
            import json

            try:
                theirs = json.loads(record.read_text())
            except (OSError, ValueError):
                theirs = None
            if theirs is not None and _computes_identity(theirs.get("config")) != mine["config"]:
                raise TrainError(f"{self.run_dir} was trained under another config; resume it with the same "
                                 "config, or start again with --fresh (or another name)")
            if theirs is not None and (theirs.get("base") or {}).get("weights_sha256") != checksum:
                raise TrainError(f"{self.run_dir} started from other weights than {base} holds now (sha256 "
                                 f"{str((theirs.get('base') or {}).get('weights_sha256'))[:12]} then, "
                                 f"{checksum[:12]} now): the starting model changed; start again with --fresh")
        atomic_write_json(record, mine)
        return base

    def base_model(self) -> Path:
        """The starting model as a directory (the packaged model's converted copy; a tiny
        random model saved once in the run)."""
        spec = self.config.model
        if spec in ("default", ""):
            from ap_gym.backbones.loading import default_model_dir

            return default_model_dir()
        if spec.startswith("tiny"):
            final = self.run_dir / "base"
            if not (final / "config.json").exists() or not list(final.glob("*.safetensors")):
                from ap_gym.backbones.hf import TransformersBackbone
                from ap_gym.backbones.tiny import tiny_llama

                model, tokenizer = tiny_llama(seed=self.config.seed)
                publish_checkpoint(final, TransformersBackbone(model, tokenizer=tokenizer).save, {"model": "tiny"},
                                   replace=True)
            return final
        path = Path(spec)
        if not path.exists():
            raise TrainError(f"model {spec!r}: no such directory; give default, tiny or a model directory (a "
                             "checkpoint of ap-gym train)")
        if path.is_dir() and (path / "ap-gym-checkpoint.json").exists():
            try:
                verify_checkpoint(path)
            except CheckpointError as e:
                raise TrainError(f"model {spec!r}: {e}") from None
        return path

    def stage_dirs(self) -> list[Path]:
        """Each stage's folder, in order."""
        return [self.run_dir / f"{k + 1}-{stage.label}" for k, stage in enumerate(self.config.stages)]

    def log_rows(self, stage: int = -1) -> list[dict[str, Any]]:
        """The update lines of a stage's log (default the last stage's)."""
        return TrainingLog.read(self.stage_dirs()[stage] / "training.jsonl")

    def _finished(self, folder: Path, stage: SFTStage | RLStage, start: Path) -> Checkpoint | None:
        final = folder / "checkpoint"
        if not final.exists():
            return None
        try:
            done = verify_checkpoint(final)
        except CheckpointError as e:
            self.echo(f"{final}: {e}; training that stage again")
            shutil.rmtree(final, ignore_errors=True)
            return None
        if done.meta.get("start_sha256") != weights_checksum(start) or \
                _stage_identity(done.meta.get("stage")) != _stage_identity(stage.model_dump(mode="json")):
            raise TrainError(f"{final} was trained from other weights or settings than this run's; start again "
                             "with --fresh")
        return done

    def _link(self, target: Path) -> None:
        link = self.run_dir / "checkpoint"
        tmp = self.run_dir / f".checkpoint-link-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(os.path.relpath(target, self.run_dir), tmp)
        os.replace(tmp, link)

    # --------------------------------------------------------------- stages
    def _stage(self, index: int, stage: SFTStage | RLStage, folder: Path, start: Path) -> Checkpoint:
        import torch

        from ap_gym.backbones.hf import TransformersBackbone

        folder.mkdir(parents=True, exist_ok=True)
        progress = self._latest_progress(folder)
        origin = progress.path if progress is not None else start
        backbone = TransformersBackbone(str(origin), identity=str(start))
        params = trainable_parameters(backbone.model, self.config.train_layers)
        optimizer = torch.optim.AdamW(params, lr=stage.lr, weight_decay=0.0)
        done = 0
        if progress is not None:
            state = torch.load(progress.path / STATE_FILE, weights_only=True)
            optimizer.load_state_dict(state["optimizer"])
            done = int(state["update"])
            self.echo(f"stage {index + 1} ({stage.label}): resuming after update {done} ({progress.path.name})")
        log = TrainingLog.resume(folder / "training.jsonl", upto=done, run=f"{self.config.name}/{folder.name}",
                                 rule=stage.label, config={**self.config.computes(), "stage": index + 1})
        board = self._board(folder, done)
        meta = {"stage": stage.model_dump(mode="json"), "start_sha256": weights_checksum(start),
                "config": self.config.computes()}
        started = time.perf_counter() - (float(log.last.get("wall_s", 0.0)) if log.last else 0.0)
        steps = self._sft(stage, folder, backbone) if isinstance(stage, SFTStage) else \
            self._rl(index, stage, backbone)
        try:
            for update, total, metrics in steps(done, params, optimizer):
                extra = dict(self.probe(backbone)) if self.probe is not None else {}
                metrics.update(extra)
                metrics["wall_s"] = time.perf_counter() - started
                log.write(update=update, **metrics)
                if board is not None:
                    for key, value in metrics.items():
                        if value is not None:
                            board.add_scalar(f"{stage.label}/{key}", value, update)
                self.echo(f"stage {index + 1} ({stage.label}) update {update}/{total}: "
                          + "  ".join(f"{k} {metrics[k]:.4g}" for k in ("loss", "accuracy", "success", "reward", *extra)
                                      if metrics.get(k) is not None) + f"  ({metrics['wall_s']:.0f} s)")
                if not math.isfinite(metrics.get("loss") or 0.0):
                    raise TrainError(f"the loss is not finite at update {update}; lower the learning rate")
                if update % self.config.save_every == 0 or update == total:
                    self._save_progress(folder, backbone, optimizer, update, meta)
        finally:
            if board is not None:
                board.close()
        final = publish_checkpoint(folder / "checkpoint", backbone.save, meta, replace=True)
        shutil.rmtree(folder / "progress", ignore_errors=True)
        return final

    def _board(self, folder: Path, done: int) -> Any:
        if not self.config.tensorboard:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise TrainError(f"tensorboard: true needs the tensorboard package ({e}): pip install tensorboard, "
                             "or pip install -e '.[train]'") from None
        return SummaryWriter(str(folder / "tensorboard"), purge_step=done + 1)

    @staticmethod
    def _latest_progress(folder: Path) -> Checkpoint | None:
        """The newest complete progress save of a stage (a half-written one is never taken)."""
        for path in sorted((folder / "progress").glob("update-*"), reverse=True):
            try:
                found = verify_checkpoint(path)
            except CheckpointError:
                continue
            if (found.path / STATE_FILE).exists():
                return found
        return None

    def _save_progress(self, folder: Path, backbone: Any, optimizer: Any, update: int, meta: Mapping[str, Any]) -> None:
        import torch

        def write(tmp: Path) -> None:
            backbone.save(tmp)
            torch.save({"optimizer": optimizer.state_dict(), "update": update}, tmp / STATE_FILE)

        saved = publish_checkpoint(folder / "progress" / f"update-{update:06d}", write, {**meta, "update": update},
                                   replace=True)
        for older in (folder / "progress").glob("update-*"):  # the newer one is complete: the older can go
            if older != saved.path:
                shutil.rmtree(older, ignore_errors=True)

    def _autocast(self) -> Any:
        import torch

        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.config.autocast == "bfloat16")

    def _env(self) -> Any:
        import gymnasium as gym

        kwargs = {**self.config.env_options, "split": self.config.split}
        return gym.make(self.config.benchmark, **kwargs)

    # ------------------------------------------------------------------ SFT
    def _sft(self, stage: SFTStage, folder: Path, backbone: Any) -> Callable[..., Iterator[tuple[int, int, dict]]]:
        from ap_gym.training.demos import demonstrations, load_demonstrations, save_demonstrations
        from ap_gym.training.groups import choice_logprobs

        path = folder / "demonstrations.jsonl"
        loaded = load_demonstrations(path)
        if loaded is None:
            env = self._env()
            try:
                ids = list(env.unwrapped.task_ids(self.config.split))[: stage.tasks]
                player = self._guided(stage, folder, backbone) if stage.guidance is not None else None
                self.echo(f"demonstrations: playing the expert's plan of {len(ids)} tasks through the agent's prompt"
                          + (f" under {stage.guidance.policy}'s guidance" if stage.guidance is not None else ""))
                loaded = demonstrations(env, ids, agent=self.config.agent, max_steps=self.config.max_steps,
                                        progress=lambda k, n: self.echo(f"  {k}/{n} tasks") if k % 25 == 0 else None,
                                        player=player, training=player is not None)
            finally:
                env.close()
            save_demonstrations(path, *loaded)
        demos, counts = loaded
        usable = [d for d in demos if stage.objective == "tokens" or d.chosen is not None]
        if not usable:
            raise TrainError(f"no demonstration to learn from ({counts}): does the env give a walkthrough that wins?")
        self.echo(f"demonstrations: {len(usable)} steps of {counts['won']} won plans ({counts['failed']} plans did "
                  f"not win, {counts['infrastructure']} engine failures; {len(demos) - len(usable)} steps whose "
                  "command was not offered are left out)")
        per_epoch = math.ceil(len(usable) / stage.batch)
        total = per_epoch * stage.epochs

        def steps(done: int, params: list[Any], optimizer: Any) -> Iterator[tuple[int, int, dict]]:
            import torch

            for update in range(done + 1, total + 1):
                epoch, i = divmod(update - 1, per_epoch)
                order = np.random.default_rng((self.config.seed, epoch)).permutation(len(usable))
                batch = [usable[j] for j in order[i * stage.batch:(i + 1) * stage.batch]]
                backbone.model.train()
                optimizer.zero_grad()
                loss, right = 0.0, 0
                for demo in batch:
                    with self._autocast():
                        if stage.objective == "choice":
                            logp = choice_logprobs(backbone, demo.messages, demo.candidates, stage.temperature)
                            term = -logp[demo.chosen]
                            right += int(int(logp.argmax()) == demo.chosen)
                        else:
                            term = -reply_logprobs(backbone, demo.messages, demo.command).sum()
                    (term / len(batch)).backward()
                    loss += float(term.detach()) / len(batch)
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
                optimizer.step()
                backbone.model.eval()
                yield update, total, {"loss": loss, "accuracy": right / len(batch) if stage.objective == "choice"
                                      else None, "grad_norm": grad_norm, "epoch": epoch + 1, "examples": len(batch)}

        return steps

    def _guided(self, stage: SFTStage, folder: Path, backbone: Any) -> Any:
        """The memory design of ``stage.guidance`` acting by the expert's plan, its guidance
        written by ``backbone`` (the stage's starting model), its memory new."""
        from ap_gym.backbones.embedders import SentenceTransformerEmbedder
        from ap_gym.policies import get_policy
        from ap_gym.policies.react import AgentConfig
        from ap_gym.training.demos import ExpertPlan, GuidedDemonstrator

        assert stage.guidance is not None
        db = folder / "guidance-memory.sqlite"
        for stale in folder.glob("guidance-memory.sqlite*"):  # demonstrations start from an empty memory
            stale.unlink()
        plan = ExpertPlan()
        agent = AgentConfig.coerce(self.config.agent).replace(action_mode="generate")
        options = {**stage.guidance.options, "agent": agent}
        policy = get_policy(stage.guidance.policy).factory(
            backbone=plan, embedder=SentenceTransformerEmbedder(), db_path=db, seed=self.config.seed,
            synthesis_backbone=backbone, **options)
        return GuidedDemonstrator(policy, plan)

    # ------------------------------------------------------------------- RL
    def _rl(self, index: int, stage: RLStage, backbone: Any) -> Callable[..., Iterator[tuple[int, int, dict]]]:
        from ap_gym.training.groups import RULES, chosen_logprob, play_groups, training_choose_agent

        env = self._env()
        try:
            ids = list(env.unwrapped.task_ids(self.config.split))
        finally:
            env.close()
        agent = training_choose_agent(stage.temperature, self.config.agent)
        max_steps = stage.max_steps or self.config.max_steps

        def steps(done: int, params: list[Any], optimizer: Any) -> Iterator[tuple[int, int, dict]]:
            import torch

            for update in range(done + 1, stage.updates + 1):
                t0 = time.perf_counter()
                rng = np.random.default_rng((self.config.seed, index, update))
                tasks = [(ids[int(rng.integers(len(ids)))], int(rng.integers(1 << 30))) for _ in range(stage.groups)]
                backbone.model.eval()
                trajectories = play_groups(backbone, self.config.benchmark, tasks, stage.group_size, agent=agent,
                                           sample_seed=self.config.seed * 100_003 + index * 10_007 + update,
                                           max_steps=max_steps, lanes=stage.lanes,
                                           env_kwargs={**self.config.env_options, "split": self.config.split})
                rule = RULES[stage.rule]
                advantages = rule(trajectories, stage.gamma) if stage.rule != "grpo" else rule(trajectories)
                t1 = time.perf_counter()
                terms = [(float(a), d) for t, adv in zip(trajectories, advantages, strict=True)
                         for a, d in zip(adv, t.decisions, strict=True) if abs(a) > 1e-8]
                with_advantage = len(terms)
                if len(terms) > stage.decisions:
                    terms = [terms[i] for i in sorted(rng.choice(len(terms), stage.decisions, replace=False))]
                backbone.model.train()
                optimizer.zero_grad()
                loss, drift = 0.0, []
                for a, decision in terms:
                    with self._autocast():
                        logp = chosen_logprob(backbone, decision, stage.temperature)
                    drift.append(float(logp.detach()) - decision.logprob)
                    term = -a * logp / len(terms)
                    term.backward()
                    loss += float(term.detach())
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0)) if terms else 0.0
                if terms:
                    optimizer.step()
                backbone.model.eval()
                yield update, stage.updates, {
                    "reward": statistics.fmean(t.ret for t in trajectories) if trajectories else None,
                    "success": statistics.fmean(t.episode.success for t in trajectories) if trajectories else None,
                    "loss": loss, "grad_norm": grad_norm, "episodes": len(trajectories),
                    "decisions": sum(len(t.decisions) for t in trajectories), "with_advantage": with_advantage,
                    "used": len(terms), "logprob_drift": statistics.fmean(drift) if drift else 0.0,
                    "rollout_s": t1 - t0, "update_s": time.perf_counter() - t1}

        return steps


def reply_logprobs(backbone: Any, messages: Sequence[Any], reply: str) -> Any:
    """Per-token log-probabilities of ``reply`` and the end of its turn, as the assistant's
    answer to ``messages``, with gradients (what a generating agent is trained on)."""
    ids = backbone.candidate_ids([reply])[0]
    end = backbone.tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(end, int) and end != backbone.tokenizer.unk_token_id:
        ids = [*ids, end]
    elif backbone.tokenizer.eos_token_id is not None:
        ids = [*ids, backbone.tokenizer.eos_token_id]
    prompt, _ = backbone.encode_prompt(messages, len(ids) + 1)
    return backbone.sequence_logprobs([prompt], [ids])[0]
