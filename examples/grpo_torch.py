"""GRPO on ap-gym in one file, pure torch (CleanRL style).

Group rollouts (G attempts at the same task from the same start, each with a sampling seed
of its own), group-normalised advantages (GRPO), and a policy gradient through the
backbone's log-probabilities. The attempts are played by ap-gym's own stepper and agent
(:func:`ap_gym.training.groups.play_groups`: ``run_episodes`` lanes, the ``choose`` agent
with a temperature), so the model is trained on exactly the prompts ``ap-gym run``
evaluates it with. The policy chooses among the admissible commands: its probability of a
command is the softmax of the model's log-likelihoods of the commands over T, so the
gradient flows through ``TransformersBackbone.sequence_logprobs``.

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
import math
import platform
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from ap_gym.backbones.hf import TransformersBackbone, tiny_llama
from ap_gym.envs import StartResult, StepResult, TextEnv
from ap_gym.policies.prompting import PromptBuilder
from ap_gym.policies.react import AgentConfig
from ap_gym.processes import cpu_budget
from ap_gym.training.groups import (
    Decision,
    chosen_logprob,
    grpo_advantages,
    play_groups,
    training_choose_agent,
)


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
    model: str = "tiny"  # tiny | smollm2 | a model directory
    updates: int = 8
    groups: int = 4  # tasks per update
    group_size: int = 4  # G: attempts per task
    lr: float = 3e-3
    temperature: float = 2.0  # exploration: with the evaluation prompt, the random tiny model puts ~97 % on "look" at T = 1
    seed: int = 0
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
    return Args(**vars(parser.parse_args()))


def load_backbone(name: str, seed: int) -> TransformersBackbone:
    if name == "tiny":
        model, tokenizer = tiny_llama(seed=seed)
        return TransformersBackbone(model, tokenizer=tokenizer)
    return TransformersBackbone(None if name == "smollm2" else name)


# ------------------------------------------------------------------------------- rollouts
def collect(backbone, args: Args, update: int, agent: AgentConfig):
    """One episode per attempt: every group plays its task G times from one start."""
    env = gym.make(args.env, split="train")
    ids = list(env.unwrapped.task_ids("train"))
    env.close()
    rng = np.random.default_rng((args.seed, update))
    tasks = [(ids[int(rng.integers(len(ids)))], args.seed * 100_000 + update * args.groups + k) for k in range(args.groups)]
    return play_groups(backbone, args.env, tasks, args.group_size, agent=agent, sample_seed=args.seed * 1_000 + update,
                       env_kwargs={"split": "train"})


# --------------------------------------------------------------------------------- update
def update(backbone, optimizer, trajectories, advantages, temperature) -> tuple[float, float]:
    terms = [(float(a), d) for t, adv in zip(trajectories, advantages, strict=True)
             for a, d in zip(adv, t.decisions, strict=True) if abs(a) > 1e-8]
    optimizer.zero_grad()
    total = 0.0
    for a, decision in terms:  # one decision at a time: memory stays bounded
        loss = -a * chosen_logprob(backbone, decision, temperature) / max(len(terms), 1)
        loss.backward()
        total += float(loss.detach())
    grad_norm = 0.0
    if terms:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(backbone.model.parameters(), 1.0))
        optimizer.step()
    return total, grad_norm


def probe(backbone, env_id: str, agent: AgentConfig, temperature: float) -> float:
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
    with torch.no_grad():
        return float(chosen_logprob(backbone, decision, temperature))


def main() -> int:
    args = parse_args()
    torch.manual_seed(args.seed)
    # the cores this process may use (OMP_NUM_THREADS, else its CPU affinity), not the machine's: on a
    # shared 2-core machine torch's default threads spun, and "seconds" took 20 minutes
    torch.set_num_threads(cpu_budget())
    backbone = load_backbone(args.model, args.seed)
    backbone.model.train()
    optimizer = torch.optim.Adam(backbone.model.parameters(), lr=args.lr)
    agent = training_choose_agent(args.temperature)
    print(f"GRPO: {args.env}, model {args.model} ({backbone.identity}), {args.groups} groups x {args.group_size}, "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}", flush=True)
    first = probe(backbone, args.env, agent, args.temperature)
    print(f"update   0  probe logprob {first:+.3f}", flush=True)
    out = open(args.out, "w") if args.out else None  # noqa: SIM115  (one line per update, flushed)
    last = first
    for n in range(1, args.updates + 1):
        t0 = time.perf_counter()
        trajectories = collect(backbone, args, n, agent)
        t1 = time.perf_counter()
        loss, grad_norm = update(backbone, optimizer, trajectories, grpo_advantages(trajectories), args.temperature)
        t2 = time.perf_counter()
        last = probe(backbone, args.env, agent, args.temperature)
        row = {"update": n, "success": float(np.mean([t.episode.success for t in trajectories])),
               "return": float(np.mean([t.ret for t in trajectories])), "loss": loss, "grad_norm": grad_norm,
               "probe_logprob": last, "rollout_s": t1 - t0, "update_s": t2 - t1,
               "decisions": sum(len(t.decisions) for t in trajectories)}
        print(f"update {n:3d}  success {row['success']:.2f}  return {row['return']:+.2f}  loss {loss:+.4f}  "
              f"probe logprob {last:+.3f}  ({row['rollout_s']:.1f}s rollout, {row['update_s']:.1f}s update)", flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
        if not math.isfinite(loss):
            print("the loss is not finite; stopping")
            return 1
    if out:
        out.close()
    if args.save:
        backbone.save(args.save)
        print(f"saved the trained model and its tokenizer to {args.save} (ap-gym run: backbone: {args.save})")
    if args.check and not last > first:
        print(f"the winning command's log-probability did not rise ({first:+.3f} -> {last:+.3f})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
