"""The exact argmax of candidates' summed log-likelihood, by a search over their token trie.

Scoring every admissible command costs a forward pass over every command's tokens; on a
served model without a prefix cache for scoring requests (vLLM's ``prompt_logprobs``)
that is a prefill per command. But the paper's rule needs only the argmax, and a token's
log-probability is at most 0, so a prefix's summed log-probability bounds every command
that continues it. :func:`best_first` expands the trie of the commands' token ids best
first: it asks for the log-probabilities of a node's child tokens at that prefix (one
generation step over the prefix cache: vLLM's ``logprob_token_ids``), and stops when a
whole command is the best item left. No other command can beat it, so the pick is exactly
the one that scoring every command gives.

Each round expands up to ``batch`` of the best open prefixes together (one round trip for
several); prefixes that fall below a command already scored whole are dropped. A search
that needs more than ``budget`` expansions (or passes its deadline) raises
:class:`SearchBudgetExceeded` rather than return a pick that is not known to be exact.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ap_gym.errors import BackboneError

__all__ = ["Expand", "SearchBudgetExceeded", "SearchResult", "best_first"]

#: ``expand(prefixes, children)``: for each prefix (token ids after the prompt), the
#: log-probability of each of its child tokens there.
Expand = Callable[[list[tuple[int, ...]], list[list[int]]], list[list[float]]]


class SearchBudgetExceeded(BackboneError):
    """The search needed more expansions (or time) than its budget: no exact pick."""


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    ends: list[int] = field(default_factory=list)  # candidates whose tokens end here


@dataclass(frozen=True)
class SearchResult:
    """The best candidate and what the search read on the way.

    Attributes:
        index: the argmax (the first of equal candidates).
        scored: ``(index, summed log-likelihood)`` of each candidate scored whole.
        expansions: prefixes expanded; ``rounds``: round trips; ``read``: child tokens read.
    """

    index: int
    scored: tuple[tuple[int, float], ...]
    expansions: int
    rounds: int
    read: int


def _trie(candidates: Sequence[Sequence[int]]) -> _Node:
    root = _Node()
    for i, ids in enumerate(candidates):
        if not ids:
            raise ValueError(f"candidate {i} has no tokens")
        node = root
        for token in ids:
            node = node.children.setdefault(int(token), _Node())
        node.ends.append(i)
    return root


def best_first(candidates: Sequence[Sequence[int]], expand: Expand, *, batch: int = 8, budget: int = 4096,
               deadline: float | None = None) -> SearchResult:
    """The exact argmax of the candidates' summed log-likelihood (see the module docstring).

    Args:
        candidates: each candidate's token ids.
        expand: reads child tokens' log-probabilities at prefixes (:data:`Expand`).
        batch: prefixes expanded per round.
        budget: expansions at most; ``deadline``: a ``time.monotonic()`` value.

    Raises:
        SearchBudgetExceeded: the budget or the deadline ran out first.
    """
    root = _trie(candidates)
    order = itertools.count()
    # max-heap by value: (-value, tie, kind, payload); kind 0 = a whole candidate (wins ties
    # against an open prefix of equal value: nothing below that prefix can be larger)
    heap: list[tuple[float, int, int, int | tuple[tuple[int, ...], _Node]]] = [(-0.0, next(order), 1, ((), root))]
    scored: dict[int, float] = {}
    floor = float("-inf")
    expansions = rounds = read = 0
    while heap:
        payload = heap[0][3]
        if isinstance(payload, int):  # a whole candidate is the best item left: the argmax
            return SearchResult(payload, tuple(sorted(scored.items())), expansions, rounds, read)
        todo: list[tuple[float, tuple[int, ...], _Node]] = []
        while heap and not isinstance(heap[0][3], int) and len(todo) < batch:
            value, _, _, entry = heapq.heappop(heap)
            assert not isinstance(entry, int)
            if -value >= floor:
                todo.append((-value, *entry))
        if not todo:
            continue
        if expansions + len(todo) > budget or (deadline is not None and time.monotonic() > deadline):
            raise SearchBudgetExceeded(
                f"the exact search over {len(candidates)} commands needed more than {budget} expansions or passed its "
                "deadline; no pick is returned that is not known to be the argmax (raise serving.search_budget or "
                "deadline_s, or use choose_method: score)")
        children = [sorted(node.children) for _, _, node in todo]
        values = expand([prefix for _, prefix, _ in todo], children)
        expansions, rounds = expansions + len(todo), rounds + 1
        for (base, prefix, node), tokens, logprobs in zip(todo, children, values, strict=True):
            read += len(tokens)
            for token, lp in zip(tokens, logprobs, strict=True):
                child, v = node.children[token], base + float(lp)
                for i in child.ends:
                    scored[i] = v
                    floor = max(floor, v)
                    heapq.heappush(heap, (-v, i, 0, i))  # equal values: the first candidate
                if child.children:
                    heapq.heappush(heap, (-v, next(order) + len(candidates), 1, (prefix + (token,), child)))
    raise AssertionError("the search ended without a candidate")  # every trie path ends in one
