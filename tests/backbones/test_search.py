"""The exact search (``best_first``) against known log-probabilities, without a server, and the
served values it reads checked before any pick is made from them."""

from __future__ import annotations

import math
import random
import time

import httpx
import pytest

from ap_gym.backbones.openai import OpenAIBackbone
from ap_gym.backbones.search import SearchBudgetExceeded, best_first
from ap_gym.errors import BackboneError


def _world(seed: int, n: int = 40, vocab: int = 12, shortest: int = 1):
    """Candidates as token ids, and a next-token log-probability for every (prefix, token)."""
    rng = random.Random(seed)
    candidates = [tuple(rng.randrange(vocab) for _ in range(rng.randint(shortest, 5))) for _ in range(n)]
    table: dict[tuple[tuple[int, ...], int], float] = {}

    def logp(prefix: tuple[int, ...], token: int) -> float:
        if (prefix, token) not in table:
            table[(prefix, token)] = math.log(rng.random() * 0.999 + 1e-6)
        return table[(prefix, token)]

    return candidates, logp


def _expand(logp, calls: list[int] | None = None):
    def expand(prefixes, children):
        if calls is not None:
            calls.append(len(prefixes))
        return [[logp(p, t) for t in ts] for p, ts in zip(prefixes, children, strict=True)]

    return expand


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("batch", [1, 4])
def test_the_search_finds_the_argmax_that_scoring_every_candidate_finds(seed, batch):
    candidates, logp = _world(seed)
    totals = [sum(logp(c[:i], c[i]) for i in range(len(c))) for c in candidates]
    best = max(range(len(candidates)), key=lambda i: (totals[i], -i))
    found = best_first(candidates, _expand(logp), batch=batch)
    assert found.index == best or math.isclose(totals[found.index], totals[best], abs_tol=1e-12)
    assert math.isclose(dict(found.scored)[found.index], totals[best], abs_tol=1e-12)


def test_equal_candidates_give_the_first_and_duplicates_are_one_path():
    candidates = [(1, 2), (1, 2), (3,)]
    found = best_first(candidates, lambda prefixes, children: [[-0.1] * len(c) for c in children])
    assert found.index == 2  # one token at -0.1 beats two
    found = best_first([(1,), (1,)], lambda prefixes, children: [[-0.5] * len(c) for c in children])
    assert found.index == 0


def test_a_search_past_its_budget_or_its_deadline_returns_no_pick():
    candidates, logp = _world(3, n=200, shortest=4)
    with pytest.raises(SearchBudgetExceeded, match="expansions"):
        best_first(candidates, _expand(logp), budget=2)

    # A deadline already past (no clock race): the search gives up at its first check.
    with pytest.raises(SearchBudgetExceeded, match="deadline"):
        best_first(candidates, _expand(logp), batch=1, deadline=time.monotonic() - 1.0)


def _served(handler) -> OpenAIBackbone:
    backbone = OpenAIBackbone("http://127.0.0.1:9/v1", model="m", retries=0)
    backbone._client = httpx.Client(transport=httpx.MockTransport(handler))
    return backbone


@pytest.mark.parametrize("value", ["0.7", "true", "NaN", "Infinity", '"x"', "null"])
def test_a_served_log_probability_that_cannot_be_one_is_a_faulty_server_never_a_pick(value):
    """A positive log-probability (or true) was taken: the search returned a pick that was not
    the argmax and recorded it as exact."""
    def handler(request):
        body = '{"choices": [{"index": 0, "logprobs": {"top_logprobs": [{"token_id:5": %s, "token_id:6": -1.0}]}}]}'
        return httpx.Response(200, content=(body % value).encode())

    with pytest.raises(BackboneError, match="faulty"):
        _served(handler)._next_logprobs([([1, 2], [5, 6])])


def test_a_served_log_probability_at_most_zero_is_read():
    def handler(request):
        return httpx.Response(200, json={"choices": [{"index": 0, "logprobs": {"top_logprobs": [
            {"token_id:5": -0.25, "token_id:6": 0.0}]}}]})

    assert _served(handler)._next_logprobs([([1, 2], [5, 6])]) == [[-0.25, 0.0]]


def test_a_short_deadline_is_said_to_be_a_deadline_not_an_outage():
    def handler(request):
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(BackboneError, match="deadline ran out, which is not an outage") as caught:
        _served(handler)._next_logprobs([([1], [5])], deadline_s=0.5)
    assert "is the server up" not in str(caught.value)

    def refused(request):
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(BackboneError, match="is the server up"):
        _served(refused)._next_logprobs([([1], [5])], deadline_s=0.5)


def test_a_choice_only_server_is_told_to_use_choose_method_constrained():
    """`auto` against a server that can only constrain a generation said it offers no
    structured outputs, though it does, and did not name choose_method: constrained."""
    import json

    def handler(request):
        path = request.url.path
        if path.endswith("/chat/completions"):
            body = json.loads(request.content)
            if "structured_outputs" in body or "guided_choice" in body:
                choices = (body.get("structured_outputs") or {}).get("choice") or body.get("guided_choice")
                return httpx.Response(200, json={"choices": [{"index": 0, "message": {"content": choices[0]}}]})
        return httpx.Response(404, json={"error": "no such route"})

    backbone = _served(handler)
    with pytest.raises(BackboneError, match="choose_method: constrained"):
        backbone.score([{"role": "user", "content": "hi"}], ["look", "go north"])
