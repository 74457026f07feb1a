"""Backbone speed, each figure against a fair baseline, measured side by side.

For the packaged default model (or ``--model``), ``--repeats`` rounds, sides in ABBA
order, each side warmed once before the first round:

* **KV reuse over a 30-step episode**: a growing chat (observation in, command out), the
  same backbone with ``reuse_cache`` on and off, in both acting modes: ``choose`` (score
  the admissible commands, ap-gym's default) and ``react`` (generate a command).
* **One-pass scoring**: all candidates packed into one forward pass with a tree mask,
  against the fair baseline a competent user would write: the prompt prefilled once and
  every candidate scored in one *batched* forward over that cached prefix (right-padded
  to the longest candidate), on a ScienceWorld-sized set (204 candidates). Neither side
  re-prefills. The bound: both sides compute every candidate token once, so on a CPU
  (compute-bound) the packed pass saves only the batch's padding; the script prints that
  bound (padded tokens / real tokens) beside the ratio.
* **Batched generation**: 8 prompts in one batch against 8 batches of one, through the
  same decode path (``generate_batch``).

    python benchmarks/backbone_speed.py [--model default|tiny|PATH] [--steps 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ap_gym.backbones import GenerationConfig, TransformersBackbone, make_backbone  # noqa: E402
from benchmarks._bench import abba, emit, machine, ratio_spread, spread  # noqa: E402

OBS = ("You are in the kitchen. A fridge, a counter and a stove are here. On the counter you see "
       "a knife and a red apple. There is an open door leading north and a closed door to the east.")
ACTIONS = ["look", "open fridge", "take apple", "go north", "examine counter", "go east", "inventory",
           "take knife", "close fridge", "go west", "eat apple", "slice apple with knife"]


def episode(backbone: TransformersBackbone, steps: int, mode: str) -> float:
    """One agent episode; time in seconds."""
    messages = [{"role": "system", "content": "You are an agent in a text game. Reply with one command.\n"
                 "Your task: cook a meal with the red apple and eat it."}]
    config = GenerationConfig(max_new_tokens=6, stop=("\n",))
    backbone.reset_cache()
    t = time.perf_counter()
    for i in range(steps):
        messages.append({"role": "user", "content": f"Step {i}. {OBS}"})
        if mode == "choose":
            backbone.score(messages, ACTIONS)
        else:
            backbone.generate(messages, config)
        messages.append({"role": "assistant", "content": ACTIONS[i % len(ACTIONS)]})
    return time.perf_counter() - t


def batched_candidates(backbone: TransformersBackbone, messages: list[dict[str, str]],
                       candidates: list[str]) -> list[float]:
    """The fair baseline: the prompt's KV cache computed once, then every candidate in one
    batched forward over it (the cache repeated per row, candidates right-padded)."""
    import copy

    cand_ids = backbone.candidate_ids(candidates)
    with torch.inference_mode():
        ids, _ = backbone.encode_prompt(messages, max(len(c) for c in cand_ids) + 1)
        first = torch.log_softmax(backbone._prefill(ids).float(), -1)
        prefix, rows = len(ids), len(cand_ids)
        width = max(len(c) for c in cand_ids) - 1
        totals = [float(first[c[0]]) for c in cand_ids]
        if width > 0:
            cache = copy.deepcopy(backbone._main.kv)
            cache.batch_repeat_interleave(rows)
            pad = backbone.tokenizer.pad_token_id or 0
            tokens = torch.tensor([c[:-1] + [pad] * (width - len(c) + 1) for c in cand_ids], device=backbone.device)
            mask = torch.tensor([[1] * prefix + [1] * (len(c) - 1) + [0] * (width - len(c) + 1) for c in cand_ids],
                                device=backbone.device)
            positions = torch.arange(prefix, prefix + width, device=backbone.device).expand(rows, width)
            logits = backbone.model(input_ids=tokens, attention_mask=mask, position_ids=positions,
                                    past_key_values=cache, use_cache=True).logits
            logp = torch.log_softmax(logits.float(), -1)
            for i, c in enumerate(cand_ids):
                for j, t in enumerate(c[1:]):
                    totals[i] += float(logp[i, j, t])
    return totals


def side_by_side(a: Callable[[], float | None], b: Callable[[], float | None], repeats: int) -> tuple[list[float], list[float]]:
    """Time ``a`` and ``b`` ``repeats`` times in ABBA order after one warm-up each."""
    a(), b()
    ta, tb = [], []
    for r in range(repeats):
        for first in ((a, b) if abba(r) else (b, a)):
            t = time.perf_counter()
            first()
            (ta if first is a else tb).append(time.perf_counter() - t)
    return ta, tb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    t = time.perf_counter()
    reuse = make_backbone(args.model)
    print(f"model: {reuse.identity} on {reuse.device} ({reuse.model.dtype}); load {time.perf_counter() - t:.2f} s; "
          f"torch threads {torch.get_num_threads()}", flush=True)
    plain = TransformersBackbone(reuse.model, tokenizer=reuse.tokenizer, reuse_cache=False)
    rows: list[str] = []

    # KV reuse over an episode, both modes
    kv: dict[str, tuple[list[float], list[float]]] = {}
    for mode in ("choose", "react"):
        before = dict(reuse.stats)
        kv[mode] = side_by_side(lambda m=mode: episode(reuse, args.steps, m),
                                lambda m=mode: episode(plain, args.steps, m), args.repeats)
        computed = (reuse.stats["prefill_tokens"] - before["prefill_tokens"]) / (args.repeats + 1)
        reused = (reuse.stats["reused_tokens"] - before["reused_tokens"]) / (args.repeats + 1)
        rows.append(f"| {args.steps}-step episode, `{mode}` | KV reuse {spread(kv[mode][0])} s | re-prefill "
                    f"{spread(kv[mode][1])} s | **{ratio_spread(kv[mode][1], kv[mode][0])}x** | per episode with reuse: "
                    f"{computed:,.0f} prompt tokens computed, {reused:,.0f} reused |")
        print(rows[-1], flush=True)

    # one-pass scoring against the batched candidates over the cached prefix (ScienceWorld-sized)
    candidates = [f"{a} {i}" for i in range(17) for a in ACTIONS]
    messages = [{"role": "user", "content": OBS * 4}]
    packed_scores = plain.score(messages, candidates)
    batch_scores = batched_candidates(plain, messages, candidates)
    agree = max(abs(x - y) for x, y in zip(packed_scores, batch_scores, strict=True))
    one, batch = side_by_side(lambda: plain.score(messages, candidates),
                              lambda: batched_candidates(plain, messages, candidates), args.repeats)
    cand_ids = plain.candidate_ids(candidates)
    real = sum(len(c) - 1 for c in cand_ids)
    padded = len(cand_ids) * (max(len(c) for c in cand_ids) - 1)
    rows.append(f"| scoring {len(candidates)} candidates ({packed_scores.candidate_tokens} tokens) after a "
                f"{packed_scores.prompt_tokens}-token prompt | one pass, packed {spread(one, 3)} s | prefix once, "
                f"candidates batched {spread(batch, 3)} s | **{ratio_spread(batch, one)}x** | bound on a CPU: padded/"
                f"real tokens = {padded}/{real} = {padded / max(real, 1):.2f}; largest score difference {agree:.1e} |")
    print(rows[-1], flush=True)

    # batched generation against batches of one, same decode path
    prompts = [[{"role": "user", "content": f"Room {i}: {OBS} What do you do next?"}] for i in range(8)]
    gen = GenerationConfig(max_new_tokens=24)
    single, batched = side_by_side(lambda: [plain.generate_batch([p], gen) for p in prompts],
                                   lambda: plain.generate_batch(prompts, gen), args.repeats)
    rows.append(f"| 8 prompts x 24 new tokens | 8 batches of one {spread(single)} s | one batch of 8 "
                f"{spread(batched)} s | **{ratio_spread(single, batched)}x** | both `generate_batch` (HF `generate`) |")
    print(rows[-1], flush=True)

    # raw speeds, for context
    long = [{"role": "user", "content": (OBS + " ") * 12}]
    c = plain.generate(long, GenerationConfig(max_new_tokens=1))
    pre = []
    dec = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        c = plain.generate(long, GenerationConfig(max_new_tokens=1))
        pre.append(c.prompt_tokens / (time.perf_counter() - t))
        t = time.perf_counter()
        d = plain.generate([{"role": "user", "content": "Tell me a long story about a kitchen."}],
                           GenerationConfig(max_new_tokens=64))
        dec.append(d.completion_tokens / (time.perf_counter() - t))
    body = "\n".join([
        f"`{reuse.identity}` on {reuse.device} ({reuse.model.dtype}), {torch.get_num_threads()} torch threads; "
        f"{args.repeats} rounds per comparison, sides in ABBA order after one warm-up each; median (min-max); "
        "the ratio is the median of the per-round ratios.", "",
        "| what | ours | baseline | ratio | note |", "|---|---|---|---|---|", *rows, "",
        f"Prefill {statistics.median(pre):,.0f} tokens/s ({c.prompt_tokens}-token prompt), decode "
        f"{statistics.median(dec):,.1f} tokens/s (medians).", "",
        "Targets: KV reuse >= 5x over re-prefilling on a 30-step episode; one-pass scoring >= 3x over the fair "
        "baseline (prefix once, candidates batched) or the bound shown. The bound: both sides compute each candidate "
        "token once over the same cached prefix, and on this CPU a forward pass costs what its tokens cost "
        "(compute-bound: prefill runs at the tokens/s below whatever the batch shape), so packing saves only the "
        "batch's padding (the padded/real ratio in the note), plus the per-row attention over the prefix. On a GPU, "
        "where a pass of a few thousand tokens costs about its fixed launch cost, both sides are one pass and the "
        "ratio tends to 1: the packed pass's gain there is memory (no per-row copy of the prefix's cache)."])
    emit("backbone_speed", "`backbone_speed.py`: KV reuse, one-pass scoring, batched generation", body, machine())


if __name__ == "__main__":
    main()
