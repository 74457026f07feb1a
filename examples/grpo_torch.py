"""GRPO on ap-gym in one file, pure torch (CleanRL style).

Group rollouts (``ap_gym.make_vec(..., group_size=G)``: G attempts at the same task from
the same start), group-normalised advantages (GRPO), and a policy gradient through the
backbone's log-probabilities. The policy chooses among the admissible commands: its
probability of a command is the softmax of the model's log-likelihoods of the commands
(``AgentConfig.choose_temperature``'s policy), so the gradient flows through
``TransformersBackbone.sequence_logprobs``.

The default env is a toy defined below (a note says where the coin is; opening that
container wins, any other loses), where the answer is learnable. Any ap-gym env id works:
``--env ap_gym/TextWorld-v0``.

    python examples/grpo_torch.py --model tiny --updates 8         # seconds, random weights
    python examples/grpo_torch.py --model smollm2 --updates 10     # make train-example

Each update prints success, mean return, the loss, and the probe: the log-probability of
the winning command in a fixed start state, which should rise. ``--check`` exits non-zero
if it did not; ``--out`` writes one JSON line per update.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

import ap_gym
from ap_gym.backbones.hf import TransformersBackbone, tiny_llama
from ap_gym.envs import StartResult, StepResult, TextEnv
from ap_gym.prompts import load_prompt
from ap_gym.training.tokens import observation_turn


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
    temperature: float = 1.0
    seed: int = 0
    out: str | None = None
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
@dataclass
class Decision:
    prompt: list[int]
    candidates: list[list[int]]
    chosen: int


@dataclass
class Attempt:
    messages: list[dict[str, str]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    ret: float = 0.0
    success: bool = False
    done: bool = False


def messages_for(instruction: str, history: list[dict[str, str]], obs: str, info: dict) -> list[dict[str, str]]:
    system = load_prompt("acting_system").format(instruction=instruction)
    return [{"role": "system", "content": system}, *history, {"role": "user", "content": observation_turn(obs, info)}]


def policy(backbone: TransformersBackbone, messages, commands, temperature, rng) -> tuple[int, Decision]:
    """Sample a command from softmax(log-likelihoods / T); the scores come from the
    KV-cached ``score`` (the same numbers ``sequence_logprobs`` gives with gradients)."""
    scores = np.asarray(backbone.score(messages, commands).values) / temperature
    probs = np.exp(scores - scores.max())
    chosen = int(rng.choice(len(commands), p=probs / probs.sum()))
    cand_ids = [backbone.tokenizer(c, add_special_tokens=False)["input_ids"] for c in commands]
    prompt, _ = backbone.encode_prompt(messages, max(len(c) for c in cand_ids) + 1)
    return chosen, Decision(prompt, cand_ids, chosen)


def collect(envs, backbone, args: Args, update: int, rng) -> list[Attempt]:
    """One episode per sub-env: every group plays its task G times from one start."""
    obs, info = envs.reset(seed=args.seed * 100_000 + update * args.groups)
    attempts = [Attempt() for _ in range(envs.num_envs)]
    instructions = list(info["instruction"])
    infos = [{"admissible_commands": list(info["admissible_commands"][i])} for i in range(envs.num_envs)]
    while not all(a.done for a in attempts):
        actions = []
        for i, attempt in enumerate(attempts):
            if attempt.done:
                actions.append("look")  # held or moved on: ignored
                continue
            messages = messages_for(instructions[i], attempt.messages, obs[i], infos[i])
            commands = infos[i]["admissible_commands"]
            chosen, decision = policy(backbone, messages, commands, args.temperature, rng)
            attempt.decisions.append(decision)
            attempt.messages += [messages[-1], {"role": "assistant", "content": commands[chosen]}]
            actions.append(commands[chosen])
        obs, rewards, terminated, truncated, info = envs.step(tuple(actions))
        for i, attempt in enumerate(attempts):
            if attempt.done:
                continue
            attempt.ret += float(rewards[i])
            infos[i] = {"admissible_commands": list(info["admissible_commands"][i])}
            if terminated[i] or truncated[i]:
                attempt.done, attempt.success = True, bool(info["success"][i])
    return attempts


def advantages(attempts: list[Attempt], group_size: int) -> np.ndarray:
    """GRPO: each return minus its group's mean, over the group's standard deviation."""
    returns = np.array([a.ret for a in attempts]).reshape(-1, group_size)
    centred = returns - returns.mean(axis=1, keepdims=True)
    return (centred / (returns.std(axis=1, keepdims=True) + 1e-6)).reshape(-1)


# --------------------------------------------------------------------------------- update
def chosen_logprob(backbone: TransformersBackbone, decision: Decision, temperature: float) -> torch.Tensor:
    """log softmax(sequence log-likelihoods / T)[chosen], with gradients."""
    seqs = backbone.sequence_logprobs([decision.prompt] * len(decision.candidates), decision.candidates)
    logits = torch.stack([s.sum() for s in seqs]) / temperature
    return torch.log_softmax(logits, -1)[decision.chosen]


def update(backbone, optimizer, attempts, adv, temperature) -> tuple[float, float]:
    terms = [(a_adv, d) for attempt, a_adv in zip(attempts, adv, strict=True) if abs(a_adv) > 1e-8
             for d in attempt.decisions]
    optimizer.zero_grad()
    total = 0.0
    for a_adv, decision in terms:  # one decision at a time: memory stays bounded
        loss = -float(a_adv) * chosen_logprob(backbone, decision, temperature) / max(len(terms), 1)
        loss.backward()
        total += float(loss.detach())
    grad_norm = 0.0
    if terms:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(backbone.model.parameters(), 1.0))
        optimizer.step()
    return total, grad_norm


def probe(backbone, env_id: str, temperature: float) -> float:
    """The policy's log-probability of the winning command in one fixed start state."""
    env = gym.make(env_id, split="train")
    obs, info = env.reset(seed=12345, options={"admissible_commands": True})
    commands = list(info["admissible_commands"])
    winning = next((c for c in commands if c == f"open {info['task_id'].split('/')[1]}"), commands[0])
    env.close()
    with torch.no_grad():
        decision = policy(backbone, messages_for(info["instruction"], [], obs, info), commands, temperature,
                          np.random.default_rng(0))[1]
        decision.chosen = commands.index(winning)
        return float(chosen_logprob(backbone, decision, temperature))


def main() -> int:
    args = parse_args()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    backbone = load_backbone(args.model, args.seed)
    backbone.model.train()
    optimizer = torch.optim.Adam(backbone.model.parameters(), lr=args.lr)
    envs = ap_gym.make_vec(args.env, args.groups * args.group_size, group_size=args.group_size,
                           split="train")
    print(f"GRPO: {args.env}, model {args.model} ({backbone.identity}), {args.groups} groups x {args.group_size}, "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}", flush=True)
    first = probe(backbone, args.env, args.temperature)
    print(f"update   0  probe logprob {first:+.3f}", flush=True)
    out = open(args.out, "w") if args.out else None  # noqa: SIM115  (one line per update, flushed)
    last = first
    for n in range(1, args.updates + 1):
        t0 = time.perf_counter()
        attempts = collect(envs, backbone, args, n, rng)
        t1 = time.perf_counter()
        loss, grad_norm = update(backbone, optimizer, attempts, advantages(attempts, args.group_size), args.temperature)
        t2 = time.perf_counter()
        last = probe(backbone, args.env, args.temperature)
        row = {"update": n, "success": float(np.mean([a.success for a in attempts])),
               "return": float(np.mean([a.ret for a in attempts])), "loss": loss, "grad_norm": grad_norm,
               "probe_logprob": last,
               "rollout_s": t1 - t0, "update_s": t2 - t1, "decisions": sum(len(a.decisions) for a in attempts)}
        print(f"update {n:3d}  success {row['success']:.2f}  return {row['return']:+.2f}  loss {loss:+.4f}  "
              f"probe logprob {last:+.3f}  ({row['rollout_s']:.1f}s rollout, {row['update_s']:.1f}s update)", flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
        if not math.isfinite(loss):
            print("the loss is not finite; stopping")
            return 1
    envs.close()
    if out:
        out.close()
    if args.check and not last > first:
        print(f"the winning command's log-probability did not rise ({first:+.3f} -> {last:+.3f})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
