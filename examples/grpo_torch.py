"""GRPO on ap-gym in one file: a toy env, a config, and ap-gym's trainer.

The update loop is ap-gym's own (:class:`ap_gym.training.Trainer`, the one ``ap-gym train``
runs): group rollouts (G attempts at the same task from the same start, each with a
sampling seed of its own) played by ap-gym's stepper and agent (``play_groups``: the
``choose`` agent with a temperature, the prompt ``ap-gym run`` evaluates with),
group-normalised advantages (GRPO), and a policy gradient through the softmax of the
model's log-likelihoods of the admissible commands over T. This file adds only the toy env
and a probe.

The default env is a toy defined below (a note says where the coin is; opening that
container wins, any other loses), where the answer is learnable. Any ap-gym env id works:
``--env ap_gym/TextWorld-v0``.

    python examples/grpo_torch.py --model tiny --updates 8         # seconds, random weights
    python examples/grpo_torch.py --model smollm2 --updates 10     # make train-example

Each update prints success, mean return, the loss, and the probe: the log-probability of
the winning command in a fixed start state, which should rise. ``--check`` exits non-zero
if it did not; ``--out`` writes one JSON line per update; ``--save DIR`` saves the trained
model with its tokenizer, a backbone for ``ap-gym run`` (``backbone: DIR``).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import torch

from ap_gym.envs import StartResult, StepResult, TextEnv
from ap_gym.policies.prompting import PromptBuilder
from ap_gym.policies.react import AgentConfig
from ap_gym.training import RLStage, TrainConfig, Trainer
from ap_gym.training.groups import Decision, chosen_logprob, training_choose_agent


# ----------------------------------------------------------------------------- the toy env
class Coin(TextEnv):
    """A note says which container holds the coin; open that one to win."""

    benchmark = "coin"
    PLACES = ("box", "chest", "fridge", "microwave", "sink", "shelf", "mug", "table")

    def _task_ids(self, split):
        return [f"coin/{p}" for p in self.PLACES] if split == "train" else [f"coin/{p}" for p in self.PLACES[:2]]

    def task_family(self, task_id):
        return "coin"

    def _commands(self):
        return ["look"] + [f"open {p}" for p in self.PLACES[:4] if p != self.place][:3] + [f"open {self.place}"]

    def _start(self, task_id, options):
        self.place = task_id.split("/")[1]
        commands = self._commands()
        self.np_random.shuffle(commands)
        self.commands = commands
        return StartResult(f"You are in a room. A note on the door says: the coin is in the {self.place}.",
                           "Find the coin.", score=0.0, max_score=1.0, admissible_commands=self.commands)

    def _advance(self, action):
        if action == f"open {self.place}":
            return StepResult("You open it and take the coin.", 1.0, won=True, admissible_commands=self.commands)
        if action.startswith("open "):
            return StepResult("Empty. An alarm rings.", 0.0, lost=True, admissible_commands=self.commands)
        return StepResult(f"A note on the door says: the coin is in the {self.place}.", 0.0,
                          admissible_commands=self.commands)


if "examples/Coin-v0" not in gym.registry:
    gym.register("examples/Coin-v0", entry_point=Coin, max_episode_steps=4)


# ------------------------------------------------------------------------------ arguments
@dataclass
class Args:
    env: str = "examples/Coin-v0"
    model: str = "tiny"  # tiny | default (the packaged SmolLM2) | a model directory
    updates: int = 8
    groups: int = 4  # tasks per update
    group_size: int = 4  # G: attempts per task
    lr: float = 3e-3
    temperature: float = 2.0  # exploration: with the evaluation prompt, the random tiny model puts ~97 % on "look" at T = 1
    seed: int = 0
    run: str = "results/train"  # the training run's root (its log, its checkpoint)
    out: str | None = None
    save: str | None = None
    check: bool = False


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in vars(Args()).items():
        if isinstance(default, bool):
            parser.add_argument(f"--{name.replace('_', '-')}", action="store_true")
        else:
            parser.add_argument(f"--{name.replace('_', '-')}", type=type(default) if default is not None else str,
                                default=default)
    args = Args(**vars(parser.parse_args()))
    args.model = "default" if args.model == "smollm2" else args.model
    return args


# ---------------------------------------------------------------------------------- probe
def probe(env_id: str, agent: AgentConfig, temperature: float):
    """The policy's log-probability of the winning command in one fixed start state, with
    the prompt the agent writes (:class:`PromptBuilder`)."""
    env = gym.make(env_id, split="train")
    obs, info = env.reset(seed=12345, options={"admissible_commands": True})
    commands = tuple(info["admissible_commands"])
    winning = next((c for c in commands if c == f"open {info['task_id'].split('/')[1]}"), commands[0])
    env.close()
    prompt = PromptBuilder(agent)
    prompt.start(info["instruction"])
    decision = Decision(tuple(prompt.messages(obs, commands)), commands, commands.index(winning), 0.0, 0.0, obs)

    def measure(backbone) -> dict[str, float]:
        with torch.no_grad():
            return {"probe_logprob": float(chosen_logprob(backbone, decision, temperature))}

    return measure


def main() -> int:
    args = parse_args()
    config = TrainConfig(
        name="grpo-example", out=args.run, benchmark=args.env, model=args.model, seed=args.seed, autocast="none",
        save_every=max(args.updates, 1),
        stages=(RLStage(rule="grpo", updates=args.updates, groups=args.groups, group_size=args.group_size,
                        lanes=min(8, args.groups * args.group_size), temperature=args.temperature, lr=args.lr,
                        decisions=10_000),))
    measure = probe(args.env, training_choose_agent(args.temperature), args.temperature)
    print(f"GRPO: {args.env}, model {args.model}, {args.groups} groups x {args.group_size}, "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}", flush=True)
    trainer = Trainer(config, fresh=True, probe=measure)
    from ap_gym.backbones.hf import TransformersBackbone

    first = measure(TransformersBackbone(str(trainer.base_model())))["probe_logprob"]
    print(f"update   0  probe logprob {first:+.3f}", flush=True)
    checkpoint = trainer.run()
    rows = trainer.log_rows()
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.save:
        shutil.rmtree(args.save, ignore_errors=True)
        shutil.copytree(checkpoint.path, args.save)
        print(f"saved the trained model and its tokenizer to {args.save} (ap-gym run: backbone: {args.save})")
    last = rows[-1]["probe_logprob"] if rows else first
    if args.check and not last > first:
        print(f"the winning command's log-probability did not rise ({first:+.3f} -> {last:+.3f})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
