"""A run's episodes as data frames, for analysis in pandas (inspect_ai's ``samples_df``).

``episodes_df(run)`` has one row per episode line of every setting: where it sits in the
protocol, what it came to, its cost (LLM calls and tokens by purpose) and the memory
decision's scalars (mode, why, synthesis calls, whether synthesis was skipped);
``steps_df(run)`` one row per step. Both read the results through the typed reader
(:mod:`ap_gym.protocol.results`), so they say what ``episodes.jsonl`` says::

    from ap_gym.frames import episodes_df
    df = episodes_df("results/smoke")
    df[df.phase == "eval"].groupby(["benchmark", "policy", "iteration"]).success.mean()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ap_gym.protocol.results import load_episodes

__all__ = ["episodes_df", "steps_df"]

#: The memory decision's scalars kept as columns (the rest stays in ``policy_info``).
DECISION_COLUMNS = ("mode", "mode_reason", "synthesis_calls", "synthesis_skipped", "memory_empty")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - pandas is a dependency
        raise ImportError("episodes_df needs pandas: pip install pandas") from e
    return pandas


def episodes_df(run: str | Path) -> Any:
    """One row per episode of ``run`` (a run directory): a ``pandas.DataFrame``."""
    rows = []
    for line in load_episodes(run):
        h = line.header
        row: dict[str, Any] = {
            "setting": h.setting, "phase": h.phase, "iteration": h.iteration, "index": h.index,
            "benchmark": h.benchmark, "backbone": h.backbone, "policy": h.policy, "seed": h.seed,
            "task_id": h.task_id, "task_family": h.task_family, "success": h.success, "score": h.score,
            "max_score": h.max_score, "termination": str(h.termination), "infrastructure_failure":
                h.infrastructure_failure, "num_steps": h.num_steps, "parse_failures": h.parse_failures,
            "wall_time_s": h.wall_time_s, "attempts": h.attempts, "llm_calls": h.usage.llm_calls,
            "tokens": h.usage.tokens, "embedding_calls": h.usage.embedding_calls}
        for purpose, n in h.usage.calls.items():
            row[f"calls_{purpose}"] = n
        for key in DECISION_COLUMNS:
            row[key] = h.policy_info.get(key)
        rows.append(row)
    return _pandas().DataFrame(rows)


def steps_df(run: str | Path) -> Any:
    """One row per step of every episode of ``run``, keyed by ``setting``, ``phase``,
    ``iteration`` and ``index`` (the episode's columns in :func:`episodes_df`) and ``step``."""
    rows = []
    for line in load_episodes(run):
        h = line.header
        for k, step in enumerate(line.steps):
            rows.append({"setting": h.setting, "phase": h.phase, "iteration": h.iteration, "index": h.index,
                         "step": k, "action": step.action, "observation": step.observation, "reward": step.reward,
                         "parse_failure": step.trace.parse_failure, "logprob": step.trace.logprob})
    return _pandas().DataFrame(rows)
