from __future__ import annotations

import pytest
import torch

from ap_gym.backbones import GenerationConfig, TransformersBackbone, tiny_llama

MSGS = [{"role": "system", "content": "you are an agent"}, {"role": "user", "content": "go north look take apple"}]


def naive_scores(backbone, messages, candidates):
    tok, model = backbone.tokenizer, backbone.model
    ids = tok(backbone.render(messages), add_special_tokens=False)["input_ids"]
    out = []
    for c in candidates:
        cid = tok(c, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids + cid])).logits[0].float(), -1)
        out.append(sum(lp[len(ids) - 1 + j, cid[j]].item() for j in range(len(cid))))
    return out


def test_tiny_model_is_deterministic():
    a, _ = tiny_llama(seed=3)
    b, _ = tiny_llama(seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_greedy_generation_same_with_and_without_cache_reuse(tiny_backbone):
    fresh = TransformersBackbone(tiny_backbone.model, tokenizer=tiny_backbone.tokenizer, reuse_cache=False)
    config = GenerationConfig(max_new_tokens=8)
    first = tiny_backbone.generate(MSGS, config)
    before = dict(tiny_backbone.stats)
    longer = [*MSGS, {"role": "assistant", "content": first.text}, {"role": "user", "content": "look"}]
    second = tiny_backbone.generate(longer, config)
    assert tiny_backbone.stats["reused_tokens"] - before["reused_tokens"] >= first.prompt_tokens
    assert second.text == fresh.generate(longer, config).text
    assert first.prompt_tokens > 0 and 0 < first.completion_tokens <= 8


def test_batch_matches_single(tiny_backbone):
    other = [MSGS[0], {"role": "user", "content": "open the door"}]
    config = GenerationConfig(max_new_tokens=6)
    batch = tiny_backbone.generate_batch([MSGS, other], config)
    assert [c.text for c in batch] == [tiny_backbone.generate(m, config).text for m in (MSGS, other)]


def test_seeded_sampling_is_reproducible(tiny_backbone):
    config = GenerationConfig(max_new_tokens=8, temperature=1.0, seed=5)
    assert tiny_backbone.generate(MSGS, config).text == tiny_backbone.generate(MSGS, config).text


def test_stop_strings_cut_the_text(tiny_backbone):
    text = tiny_backbone.generate(MSGS, GenerationConfig(max_new_tokens=8)).text
    word = text.split()[1]
    cut = tiny_backbone.generate(MSGS, GenerationConfig(max_new_tokens=8, stop=(word,))).text
    assert word not in cut and text.startswith(cut.rstrip())


def test_one_pass_scores_equal_one_pass_per_candidate(tiny_backbone):
    candidates = ["go north", "look", "take apple from table", "open door", "examine key"]
    scored = tiny_backbone.score(MSGS, candidates)
    scores = list(scored.values)
    assert scores == pytest.approx(naive_scores(tiny_backbone, MSGS, candidates), abs=1e-4)
    small_chunks = tiny_backbone.score(MSGS, candidates, max_tokens_per_pass=2)
    assert list(small_chunks.values) == pytest.approx(scores, abs=1e-4)
    mean = tiny_backbone.score(MSGS, candidates, reduction="mean")
    assert mean[2] == pytest.approx(scores[2] / 4, abs=1e-4)
    # the scores carry their token usage: the prompt, and every candidate's tokens
    prompt = len(tiny_backbone.tokenizer(tiny_backbone.render(MSGS), add_special_tokens=False)["input_ids"])
    cands = sum(len(tiny_backbone.tokenizer(c, add_special_tokens=False)["input_ids"]) for c in candidates)
    assert (scored.prompt_tokens, scored.candidate_tokens) == (prompt, cands)


def test_scoring_a_growing_prompt_reuses_the_cache_and_matches_a_fresh_pass(tiny_backbone):
    """Each step prefills only the new prompt tokens, in the same pass as the candidates;
    the scores equal those of a full pass from scratch."""
    reuse = TransformersBackbone(tiny_backbone.model, tokenizer=tiny_backbone.tokenizer)
    candidates = ["go north", "look", "take apple from table"]
    messages = list(MSGS)
    for step in range(3):
        before = dict(reuse.stats)
        scores = reuse.score(messages, candidates)
        assert list(scores.values) == pytest.approx(naive_scores(tiny_backbone, messages, candidates), abs=1e-4)
        computed = reuse.stats["prefill_tokens"] - before["prefill_tokens"]
        if step:
            assert 0 < computed < scores.prompt_tokens // 2  # only what is new
            assert reuse.stats["reused_tokens"] > before["reused_tokens"]
        messages += [{"role": "assistant", "content": "look"}, {"role": "user", "content": f"step {step}: you see a door"}]


def test_long_prompt_keeps_head_and_tail(tiny_backbone):
    small = TransformersBackbone(tiny_backbone.model, tokenizer=tiny_backbone.tokenizer, max_context=64)
    long = [MSGS[0], {"role": "user", "content": "look " * 500}]
    completion = small.generate(long, GenerationConfig(max_new_tokens=4))
    assert completion.prompt_tokens <= 60 and completion.extra["truncated_prompt"]


@pytest.mark.slow
def test_default_backbone_loads_offline_and_answers(default_backbone):
    completion = default_backbone.generate(
        [{"role": "user", "content": "What is the capital of France? Answer in one word."}],
        GenerationConfig(max_new_tokens=12),
    )
    assert "paris" in completion.text.lower()
    from unittest import mock

    import ap_gym.backbones.loading as loading

    # a second load takes the cached safetensors copy: the GGUF is not even looked for
    with mock.patch.object(loading, "packaged_gguf", side_effect=AssertionError("the GGUF was read again")):
        TransformersBackbone()


def test_score_batch_matches_score_with_and_without_lane_caches(tiny_backbone):
    def msgs(k: int, extra: str = "") -> list[dict[str, str]]:
        return [{"role": "system", "content": "you are an agent"}, {"role": "user", "content": "go north " * k + extra}]

    cands = [["go north", "take key", "look", "open door box"], ["look"], ["take apple", "eat apple from table"], []]
    for step in range(3):  # growing prompts: lane caches are reused and cropped
        reqs = [(msgs(3 + step, "look"), cands[0], "sum"), (msgs(10 + 2 * step), cands[1], "mean"),
                (msgs(1 + step, "box"), cands[2], "sum"), (msgs(2), cands[3], "sum")]
        single = []
        for m, c, r in reqs:
            tiny_backbone.reset_cache()
            single.append(tiny_backbone.score(m, c, r))
        for kwargs in ({"keys": ["a", "b", "c", "d"]}, {}, {"keys": ["e", "f", "g", "h"], "max_elements": 100}):
            batch = tiny_backbone.score_batch(reqs, **kwargs)
            assert [len(s) for s in batch] == [len(s) for s in single]
            for expected, got in zip(single, batch, strict=True):
                assert list(got.values) == pytest.approx(list(expected.values), abs=1e-4)
                assert (got.prompt_tokens, got.candidate_tokens) == (expected.prompt_tokens, expected.candidate_tokens)
    assert tiny_backbone.stats["reused_tokens"] > 0


def test_a_model_directory_whose_weights_were_cut_is_a_clear_error(tmp_path):
    """A kill inside save_pretrained leaves config.json and half the weights: loading it gave
    safetensors' own SafetensorError (faults.py --only issue51: a crash); now a BackboneError
    that says what such a file is and what to do."""
    from ap_gym.backbones import make_backbone
    from ap_gym.errors import BackboneError

    model, tokenizer = tiny_llama(seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    weights = next(tmp_path.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(BackboneError, match="cut short.*save the model again"):
        make_backbone(str(tmp_path))
