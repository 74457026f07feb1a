"""The transformers backbone as a trainable policy: log-probabilities with gradients that
equal ``score``, completions with token ids and log-probabilities, no stale KV cache after
an optimizer step, and a stochastic ``choose``."""

from __future__ import annotations

import math

import pytest
import torch

from ap_gym.backbones import TransformersBackbone
from ap_gym.backbones.base import GenerationConfig
from ap_gym.backbones.tiny import tiny_llama
from ap_gym.policies.react import ReActAgent

MESSAGES = [{"role": "system", "content": "You are an agent in a text world."},
            {"role": "user", "content": "You are in the kitchen. There is a door to the north and a key on the table."}]
CANDIDATES = ["go north", "take key from table", "open door", "look", "examine the key on the table and the door"]


def _fresh(seed: int = 0) -> TransformersBackbone:
    model, tokenizer = tiny_llama(seed=seed)
    return TransformersBackbone(model, tokenizer=tokenizer)


def _close(a: float, b: float) -> bool:
    """The README's bound: float32 rounding, 1e-5 + 4e-6 of the value."""
    return abs(a - b) <= 1e-5 + 4e-6 * abs(a)


def _check_equal_to_score(backbone: TransformersBackbone) -> None:
    single = []
    for c in CANDIDATES:
        backbone.reset_cache()
        single.append(backbone.score(MESSAGES, [c]).values[0])
    backbone.reset_cache()
    packed = backbone.score(MESSAGES, CANDIDATES).values
    for c, one, many in zip(CANDIDATES, single, packed, strict=True):
        lp = backbone.token_logprobs(MESSAGES, c)
        assert lp.requires_grad
        total = float(lp.detach().double().sum())
        assert _close(total, one), (c, total, one)
        assert _close(total, many), (c, total, many)


def test_token_logprobs_equal_score_and_carry_gradients():
    backbone = _fresh()
    _check_equal_to_score(backbone)
    backbone.token_logprobs(MESSAGES, "go north").sum().backward()
    grads = [p.grad for p in backbone.model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)


@pytest.mark.slow
def test_token_logprobs_equal_score_on_smollm2(default_backbone):
    # One candidate per call or several packed into one pass (another kernel shape): both
    # agree to float32 rounding, ~1e-6 of the value (up to 2.8e-5 nats on longer prompts).
    _check_equal_to_score(default_backbone)


def _score_after_a_step(backbone: TransformersBackbone) -> None:
    before = backbone.score(MESSAGES, CANDIDATES).values  # fills the KV cache
    optimizer = torch.optim.SGD(backbone.model.parameters(), lr=0.05)
    (-backbone.token_logprobs(MESSAGES, "open door").sum()).backward()
    optimizer.step()
    optimizer.zero_grad()
    after = backbone.score(MESSAGES, CANDIDATES).values
    fresh = TransformersBackbone(backbone.model, tokenizer=backbone.tokenizer).score(MESSAGES, CANDIDATES).values
    assert after != before
    assert max(abs(a - b) for a, b in zip(after, fresh, strict=True)) <= 1e-6
    lanes = backbone.score_batch([(MESSAGES, CANDIDATES, "sum")], keys=["lane"])[0].values  # lane caches too
    assert max(abs(a - b) for a, b in zip(lanes, fresh, strict=True)) <= 1e-4


def test_no_stale_scores_after_an_optimizer_step():
    _score_after_a_step(_fresh(2))


@pytest.mark.slow
def test_no_stale_scores_after_an_optimizer_step_on_smollm2():
    backbone = TransformersBackbone()  # its own copy: this test changes the weights
    _score_after_a_step(backbone)


def test_a_completion_carries_its_token_ids_and_logprobs():
    backbone = _fresh(1)
    completion = backbone.generate(MESSAGES, GenerationConfig(max_new_tokens=12, temperature=1.0, seed=3))
    extra = completion.extra
    assert len(extra["completion_ids"]) == len(extra["logprobs"]) >= completion.completion_tokens >= 1
    again = backbone.sequence_logprobs([extra["prompt_ids"]], [extra["completion_ids"]])[0]
    assert torch.allclose(again.detach(), torch.tensor(extra["logprobs"]), atol=1e-5)
    with pytest.raises(ValueError, match="at least one token"):
        backbone.sequence_logprobs([extra["prompt_ids"]], [[]])


def test_stochastic_choose_samples_and_records_the_logprob(tiny_backbone):
    temperature = 30.0  # the random model is sure of "look" at T=1; a flatter softmax shows sampling
    agent = ReActAgent(tiny_backbone, {"choose_temperature": temperature, "record_messages": True}, seed=0)
    info = {"task_id": "t/1", "instruction": "Leave the kitchen.", "admissible_commands": CANDIDATES}
    picks = []
    for seed in range(30):
        agent.seed = seed
        agent.begin("You are in the kitchen.", info)
        action = agent.act("You are in the kitchen.", info)
        step = agent.trace().steps[-1]
        scores = {c: v / temperature for c, v in step.candidates}
        z = math.log(sum(math.exp(v) for v in scores.values()))
        assert step.logprob == pytest.approx(scores[action] - z, abs=1e-3)
        assert step.messages and step.messages[-1]["role"] == "user"
        picks.append(action)
    assert len(set(picks)) > 1  # it samples
    agent.seed = 5
    agent.begin("You are in the kitchen.", info)
    first = agent.act("You are in the kitchen.", info)
    agent.begin("You are in the kitchen.", info)
    assert agent.act("You are in the kitchen.", info) == first  # seeded


def test_greedy_choose_records_no_logprob(tiny_backbone):
    agent = ReActAgent(tiny_backbone, seed=0)
    info = {"task_id": "t/1", "instruction": "x", "admissible_commands": CANDIDATES}
    agent.begin("obs", info)
    agent.act("obs", info)
    assert agent.trace().steps[-1].logprob is None and agent.trace().steps[-1].messages is None


def test_generate_stays_inside_the_context_and_its_deadline():
    model, tokenizer = tiny_llama(seed=4)
    backbone = TransformersBackbone(model, tokenizer=tokenizer, max_context=96, max_generate_s=1.0)
    completion = backbone.generate(MESSAGES, GenerationConfig(max_new_tokens=1_000_000, temperature=1.0, seed=1))
    assert completion.prompt_tokens + completion.completion_tokens <= 96
    slow = TransformersBackbone(*tiny_llama(seed=4, hidden_size=256, layers=4)[:1], tokenizer=tokenizer,
                                max_generate_s=0.3)
    slow._eos = set()  # a model that never ends its answer: only the deadline stops it
    cut = slow.generate(MESSAGES, GenerationConfig(max_new_tokens=8000, temperature=1.0, seed=1))
    assert cut.extra.get("timed_out") and cut.finish_reason == "length" and cut.completion_tokens < 8000


def test_nan_scores_are_an_infrastructure_failure_of_the_step(tiny_backbone):
    from ap_gym.backbones.base import Scores
    from ap_gym.errors import BackboneError

    class NaNScores:  # a unit fake: the subject is the agent's handling of what it gets
        identity = "nan"

        def score(self, messages, candidates, reduction="sum"):
            return Scores(tuple(float("nan") for _ in candidates))

        def describe(self):
            return {}

    agent = ReActAgent(NaNScores(), seed=0)
    info = {"task_id": "t/1", "instruction": "x", "admissible_commands": CANDIDATES}
    agent.begin("obs", info)
    with pytest.raises(BackboneError, match="not finite"):
        agent.act("obs", info)


def test_packed_candidate_logprobs_equal_one_row_per_candidate_with_gradients():
    """The policy gradient's packed pass (the prompt once, candidates after it) against the
    plain one it replaces (the prompt repeated per candidate): the same numbers, and the
    same gradients."""
    model, tokenizer = tiny_llama(seed=6)
    backbone = TransformersBackbone(model, tokenizer=tokenizer)
    prompt, _ = backbone.encode_prompt(MESSAGES, 8)
    cands = backbone.candidate_ids(["go north", "take the red apple from the table", "look", "open door"])
    packed = backbone.candidate_logprobs(prompt, cands)
    plain = backbone.sequence_logprobs([prompt] * len(cands), cands)
    for a, b in zip(packed, plain, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    grads = []
    for rows in (packed, plain):
        model.zero_grad()
        torch.log_softmax(torch.stack([r.sum() for r in rows]), -1)[1].backward(retain_graph=True)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


@pytest.mark.parametrize("write", ["copy", "ema", "merge"])
def test_a_write_through_data_invalidates_the_cache(write):
    """``p.data`` writes bump no update counter and keep the storage; the key reads the data."""
    backbone = _fresh(4)
    before = backbone.score(MESSAGES, CANDIDATES).values
    backbone.score(MESSAGES, CANDIDATES)  # the cache now holds the prompt
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in backbone.model.named_parameters():
            if write == "copy" and "embed" in name:
                p.data.copy_(torch.randn(p.shape, generator=generator) * 0.5)
            elif write == "ema":
                p.data.mul_(0.9).add_(0.1 * torch.randn(p.shape, generator=generator))
            elif write == "merge" and p.dim() == 2 and "proj" in name:  # a LoRA merge: W += B @ A
                p.data.add_(torch.randn(p.shape[0], 2, generator=generator) @ torch.randn(2, p.shape[1], generator=generator))
    after = backbone.score(MESSAGES, CANDIDATES).values
    fresh = TransformersBackbone(backbone.model, tokenizer=backbone.tokenizer, reuse_cache=False)
    expected = fresh.score(MESSAGES, CANDIDATES).values
    assert after != before
    assert max(abs(a - b) for a, b in zip(after, expected, strict=True)) <= 1e-5


def test_the_full_cache_key_sees_a_single_element_written_through_data():
    backbone = _fresh(5)
    full = TransformersBackbone(backbone.model, tokenizer=backbone.tokenizer, cache_key="full")
    key = full.weights_version()
    with torch.no_grad():
        next(iter(backbone.model.parameters())).data.view(-1)[7] += 0.25
    assert full.weights_version() != key
    backbone.reset_cache(all_lanes=True)
    with pytest.raises(ValueError, match="'sampled' or 'full'"):
        TransformersBackbone(backbone.model, tokenizer=backbone.tokenizer, cache_key="some")
