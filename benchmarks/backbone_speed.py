"""Backbone speed on this machine, measured side by side in one run.

Prints, for the packaged default model (or ``--model``):

* prefill and decode tokens per second;
* a 30-step agent episode (a growing chat: observation in, command out) with KV-cache
  reuse against re-prefilling the whole prompt at every step, and their ratio;
* batched generation of 8 prompts against 8 single calls, and their ratio;
* one-pass scoring of the admissible commands against one pass per candidate.

    python benchmarks/backbone_speed.py [--model default|tiny|PATH] [--steps 30]
"""

from __future__ import annotations

import argparse
import time

import torch

from ap_gym.backbones import GenerationConfig, TransformersBackbone, make_backbone

OBS = ("You are in the kitchen. A fridge, a counter and a stove are here. On the counter you see "
       "a knife and a red apple. There is an open door leading north and a closed door to the east.")
ACTIONS = ["look", "open fridge", "take apple", "go north", "examine counter", "go east", "inventory"]


def episode(backbone: TransformersBackbone, steps: int, config: GenerationConfig) -> float:
    messages = [{"role": "system", "content": "You are an agent in a text game. Reply with one command.\n"
                 "Your task: cook a meal with the red apple and eat it."}]
    backbone.reset_cache()
    t = time.perf_counter()
    for i in range(steps):
        messages.append({"role": "user", "content": f"Step {i}. {OBS}"})
        backbone.generate(messages, config)
        messages.append({"role": "assistant", "content": ACTIONS[i % len(ACTIONS)]})
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.manual_seed(0)
    t = time.perf_counter()
    reuse = make_backbone(args.model)
    print(f"model: {reuse.identity} on {reuse.device} ({reuse.model.dtype}); load {time.perf_counter() - t:.2f} s; "
          f"torch threads {torch.get_num_threads()}")
    plain = TransformersBackbone(reuse.model, tokenizer=reuse.tokenizer, reuse_cache=False)

    # Throughput: one long prompt, then decoding.
    long = [{"role": "user", "content": (OBS + " ") * 12}]
    plain.generate(long, GenerationConfig(max_new_tokens=1))  # warm-up
    t = time.perf_counter()
    c = plain.generate(long, GenerationConfig(max_new_tokens=1))
    prefill = c.prompt_tokens / (time.perf_counter() - t)
    t = time.perf_counter()
    d = plain.generate([{"role": "user", "content": "Tell me a long story about a kitchen."}],
                       GenerationConfig(max_new_tokens=64))
    decode = d.completion_tokens / (time.perf_counter() - t)
    print(f"prefill: {prefill:,.0f} tok/s ({c.prompt_tokens} tokens); decode: {decode:,.1f} tok/s")

    config = GenerationConfig(max_new_tokens=6, stop=("\n",))
    with_reuse = episode(reuse, args.steps, config)
    without = episode(plain, args.steps, config)
    print(f"{args.steps}-step episode: KV reuse {with_reuse:.2f} s, re-prefill {without:.2f} s, "
          f"ratio {without / with_reuse:.2f}x (prefilled {reuse.stats['prefill_tokens']:,} tokens, "
          f"reused {reuse.stats['reused_tokens']:,})")

    prompts = [[{"role": "user", "content": f"Room {i}: {OBS} What do you do next?"}] for i in range(8)]
    gen = GenerationConfig(max_new_tokens=24)
    t = time.perf_counter()
    for p in prompts:
        plain.generate(p, gen)
    single = time.perf_counter() - t
    t = time.perf_counter()
    plain.generate_batch(prompts, gen)
    batched = time.perf_counter() - t
    print(f"8 prompts x 24 tokens: single calls {single:.2f} s, one batch {batched:.2f} s, "
          f"ratio {single / batched:.2f}x")

    candidates = [f"{a} {i}" for i in range(8) for a in ACTIONS]
    msgs = [{"role": "user", "content": OBS * 4}]
    plain.score(msgs, candidates[:2])
    t = time.perf_counter()
    plain.score(msgs, candidates)
    packed = time.perf_counter() - t
    t = time.perf_counter()
    for cand in candidates:
        plain.score(msgs, [cand])
    each = time.perf_counter() - t
    print(f"scoring {len(candidates)} candidates: one pass {packed:.2f} s, one pass each {each:.2f} s, "
          f"ratio {each / packed:.1f}x")


if __name__ == "__main__":
    main()
