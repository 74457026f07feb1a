"""Exported skills: a run's admitted and filtered abstractions, in a file the frozen-skill
ablation reads.

The paper's admission-filter study screens new skills with a judge before storage, then
adds the same filtered skills to Anti-Persistence as a frozen layer. ``ap-gym skills RUN``
writes one setting's abstractions to JSON: ``admitted`` (stored: passed the judge, or every
one when there was none), with id, iteration, kind, whether still active and its
provenance, and ``filtered_out`` (rejected by the judge, from the training episodes'
records). A policy option ``frozen_abstractions: <that file>`` then shows the admitted
texts as a fixed layer (:func:`read_skills`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ap_gym.errors import APGymError
from ap_gym.paths import atomic_write_json
from ap_gym.protocol.results import load_abstractions, read_lines, setting_dirs

__all__ = ["export_skills", "read_skills"]

FORMAT = "ap-gym-skills/1"


def export_skills(run_dir: str | Path, policy: str, out: str | Path, *, benchmark: str | None = None,
                  seed: int | None = None, active_only: bool = False) -> dict[str, Any]:
    """Write the abstractions of one setting of ``run_dir`` (policy label ``policy``) to ``out``.

    Raises:
        APGymError: no setting matches, or several do (say ``benchmark`` or ``seed``).
    """
    run_dir = Path(run_dir)
    matches = []
    for directory in setting_dirs(run_dir):
        parts = directory.relative_to(run_dir).parts
        if parts[-2] != policy or (benchmark and parts[0] != benchmark) or \
                (seed is not None and parts[-1] != f"seed{seed}"):
            continue
        matches.append(directory)
    if not matches:
        raise APGymError(f"{run_dir} has no setting of policy {policy!r}"
                         + (f" on {benchmark}" if benchmark else "") + (f" with seed {seed}" if seed is not None else "")
                         + "; `ap-gym report` lists the run's settings")
    if len(matches) > 1:
        names = ", ".join(m.relative_to(run_dir).as_posix() for m in matches)
        raise APGymError(f"several settings match ({names}); choose one with --benchmark and --seed")
    directory = matches[0]
    stored = [a for a in load_abstractions(directory) if a.active or not active_only]
    good, _ = read_lines(directory / "episodes.jsonl")
    filtered = [{"text": item["text"] if isinstance(item, dict) else str(item), "iteration": x["iteration"],
                 "task_id": x["task_id"]}
                for x in good if x["phase"] == "train"
                for item in x.get("policy_info", {}).get("rejected_abstractions", [])]
    data = {
        "format": FORMAT,
        "run": str(run_dir),
        "setting": directory.relative_to(run_dir).as_posix(),
        "admitted": [{"text": a.text, "id": a.id, "kind": a.kind, "iteration": a.iteration, "active": a.active,
                      "sources": a.sources, "parents": a.parents} for a in stored],
        "filtered_out": filtered,
    }
    atomic_write_json(Path(out), data)
    return data


def read_skills(path: str | Path) -> list[str]:
    """The admitted texts of a skills file (or the lines of a plain text file, one skill each)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise APGymError(f"cannot read the skills file {path}: {e}; write one with `ap-gym skills RUN --policy LABEL`") from e
    if path.suffix != ".json":
        return [line.strip() for line in text.splitlines() if line.strip()]
    try:
        data = json.loads(text)
        skills = [str(item["text"]) for item in data["admitted"]]
    except (ValueError, KeyError, TypeError) as e:
        raise APGymError(f"{path} is not a skills file written by `ap-gym skills` ({e})") from e
    return skills
