"""How a stored record reads in a prompt: task, outcome, and each command with what it returned.

Every design that shows records (as examples, or as material for synthesis) shows them
through :func:`format_record`, so that designs differ in what they retrieve and write,
never in how a record looks.
"""

from __future__ import annotations

from collections.abc import Sequence

from ap_gym.memory.trajectories import Record
from ap_gym.text import count_tokens, cut_tokens, failed_action

__all__ = ["format_record", "records_text"]


def format_record(record: Record, max_tokens: int = 400) -> str:
    """A record as a prompt sees it: task, outcome, and each command with what it returned.

    A record that fits ``max_tokens`` is shown whole. Otherwise observations are
    compressed to fit: the feedback of failed actions (see
    :data:`FAILED_FEEDBACK`) and the final observation are always kept (each up to 60
    tokens); the other observations share what is left of the budget evenly (up to 60
    tokens each, none when under 3); if the commands alone still exceed the budget, the middle of the trajectory
    is elided, never its failed actions or its end.
    """
    outcome = "success" if record.success else "failure"
    score = "" if record.score is None else f", score {record.score:g}"
    head = f"Task: {record.instruction}\nOutcome: {outcome}{score} in {len(record.steps)} steps"
    steps = [(str(s.get("action", "")), " ".join(str(s.get("observation", "")).split())) for s in record.steps]
    if not steps:
        return head
    last = len(steps) - 1
    kept = {i for i, (_, obs) in enumerate(steps) if failed_action(obs)} | {last}

    def render(other: int, shown: set[int] | None = None, kept_cap: int = 60) -> str:
        lines, gap = [head, "Trajectory:"], 0
        for i, (action, obs) in enumerate(steps):
            if shown is not None and i not in shown:
                gap += 1
                continue
            if gap:
                lines.append(f"  ... {gap} more step(s) ...")
                gap = 0
            text = cut_tokens(obs, kept_cap if i in kept else other)
            lines.append(f"> {action}" + (f"\n  {text}" if text else ""))
        return "\n".join(lines)

    whole = render(10**9, kept_cap=10**9)
    if count_tokens(whole) <= max_tokens:
        return whole
    others = len(steps) - len(kept)
    spare = max_tokens - count_tokens(render(0))
    if spare >= 0:  # the rest of the budget, shared evenly by the other observations
        share = min(60, spare // max(1, others))
        while share >= 3:
            text = render(share)
            if count_tokens(text) <= max_tokens:
                return text
            share = share * 3 // 4
        return render(0)
    # the commands alone are too long: keep the kept steps, then the earliest others that fit
    shown = set(kept)
    for i in range(len(steps)):
        if i not in shown and count_tokens(render(0, shown | {i})) <= max_tokens:
            shown.add(i)
    return render(0, shown)


def records_text(records: Sequence[Record], max_tokens: int = 400) -> str:
    """Several records, numbered ``[1]``, ``[2]``, ... as a prompt lists them."""
    return "\n\n".join(f"[{i + 1}] {format_record(r, max_tokens)}" for i, r in enumerate(records))
