"""Exported skills: a run's admitted and filtered abstractions, in the file the frozen-skill
ablation reads (the paper's §F.2).

The paper's admission-filter study screens new skills with a judge before storage, then
adds the same filtered skills to Anti-Persistence as a frozen layer, per backbone and
seed. ``ap-gym skills RUN --policy LABEL`` writes every matching setting's abstractions
into one file, keyed by setting (benchmark, backbone, seed): ``admitted`` (stored:
passed the judge, or every one when there was none), with id, iteration, kind, whether
still active, its provenance and its embedding, and ``filtered_out`` (rejected by the
judge, from the training episodes' records). A run config's ``frozen_abstractions: <that
file>`` then gives each setting the skills of *its own* backbone and seed
(:func:`skills_for`); the layer retrieves the nearest of them per task.

A skills file is results, written from results and read by the protocol: it lives here,
beside :mod:`~ap_gym.protocol.results`, and policies only ever see the texts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ap_gym.errors import APGymError
from ap_gym.paths import atomic_write_json
from ap_gym.protocol.results import (
    load_abstraction_vectors,
    load_abstractions,
    read_log,
    setting_dirs,
)

__all__ = ["FORMAT", "export_skills", "read_skills", "skills_for"]

FORMAT = "ap-gym-skills/2"


def _matching(run_dir: Path, policy: str, benchmark: str | None, seed: int | None,
              backbone: str | None) -> list[Path]:
    found = []
    for directory in setting_dirs(run_dir):
        parts = directory.relative_to(run_dir).parts  # benchmark/[backbone/]policy/seedK
        if parts[-2] != policy or (benchmark and parts[0] != benchmark) or \
                (seed is not None and parts[-1] != f"seed{seed}") or \
                (backbone is not None and (len(parts) < 4 or parts[1] != backbone)):
            continue
        found.append(directory)
    return found


def _setting_skills(directory: Path, active_only: bool) -> dict[str, Any]:
    stored = [a for a in load_abstractions(directory) if a.active or not active_only]
    vectors = load_abstraction_vectors(directory, [a.id for a in stored])
    headers, _ = read_log(directory / "episodes.jsonl", headers=True)
    filtered = []
    for h in headers:  # a damaged entry of policy_info is skipped, never a crash
        rejected = h.policy_info.get("rejected_abstractions")
        if h.phase != "train" or not isinstance(rejected, list):
            continue
        for item in rejected:
            text = item.get("text") if isinstance(item, dict) else item
            if isinstance(text, str) and text.strip():
                filtered.append({"text": text, "iteration": h.iteration, "task_id": h.task_id})
    return {"admitted": [{"text": a.text, "id": a.id, "kind": a.kind, "iteration": a.iteration, "active": a.active,
                          "sources": a.sources, "parents": a.parents,
                          "embedding": [round(float(x), 6) for x in vectors.get(a.id, [])]} for a in stored],
            "filtered_out": filtered}


def export_skills(run_dir: str | Path, policy: str, out: str | Path, *, benchmark: str | None = None,
                  seed: int | None = None, backbone: str | None = None, active_only: bool = False) -> dict[str, Any]:
    """Write the abstractions of every setting of ``run_dir`` with policy label ``policy``
    (narrowed by ``benchmark``, ``backbone``, ``seed``) to ``out``, one entry per setting.

    Raises:
        APGymError: no setting matches.
    """
    run_dir = Path(run_dir)
    matches = _matching(run_dir, policy, benchmark, seed, backbone)
    if not matches:
        raise APGymError(f"{run_dir} has no setting of policy {policy!r}"
                         + (f" on {benchmark}" if benchmark else "") + (f" with backbone {backbone}" if backbone else "")
                         + (f" with seed {seed}" if seed is not None else "")
                         + "; `ap-gym report` lists the run's settings")
    embedder = None
    config = run_dir / "config.json"
    if config.exists():
        embedder = json.loads(config.read_text()).get("embedder")
    data = {"format": FORMAT, "run": str(run_dir), "embedder": embedder,
            "settings": {d.relative_to(run_dir).as_posix(): _setting_skills(d, active_only) for d in matches}}
    atomic_write_json(Path(out), data)
    return data


def read_skills(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The admitted skills of a skills file, per setting (``{"": [...]}`` for a file of one
    set: a plain text file, one skill a line, or a ``ap-gym-skills/1`` file)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise APGymError(f"cannot read the skills file {path}: {e}; write one with "
                         "`ap-gym skills RUN --policy LABEL`") from e
    if path.suffix != ".json":
        return {"": [{"text": line.strip()} for line in text.splitlines() if line.strip()]}
    try:
        data = json.loads(text)
        embedder = data.get("embedder")
        if data.get("format") == FORMAT:
            return {key: [_skill(s, embedder) for s in entry["admitted"]] for key, entry in data["settings"].items()}
        return {"": [_skill(s, embedder) for s in data["admitted"]]}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise APGymError(f"{path} is not a skills file written by `ap-gym skills` ({type(e).__name__}: {e})") from None


def _skill(entry: Any, embedder: Any) -> dict[str, Any]:
    """One admitted skill: its text, and its embedding with the embedder that made it."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("text"), str):
        raise ValueError(f"a skill is an object with a text, not {str(entry)[:80]!r}")
    skill: dict[str, Any] = {"text": entry["text"]}
    if isinstance(entry.get("embedding"), list) and entry["embedding"]:
        skill.update(embedding=[float(x) for x in entry["embedding"]], embedder=embedder)
    return skill


def skills_for(path: str | Path, benchmark: str, backbone: str | None, seed: int) -> list[dict[str, Any]]:
    """The skills a setting (benchmark, backbone label, seed) takes from a skills file: the
    entry of its own backbone and seed (any policy label and benchmark of the exporting
    run), or the file's single set.

    Raises:
        APGymError: the file holds several sets and none is this setting's.
    """
    sets = read_skills(path)
    if list(sets) == [""]:
        return sets[""]

    def parts(key: str) -> tuple[str, str | None, str]:
        p = key.split("/")
        return p[0], (p[1] if len(p) == 4 else None), p[-1]

    seed_dir = f"seed{seed}"
    same = [k for k in sets if parts(k)[1] == backbone and parts(k)[2] == seed_dir]
    exact = [k for k in same if parts(k)[0] == benchmark] or same
    if len(exact) != 1:
        raise APGymError(f"{path} holds skills of {', '.join(sets)}; the setting {benchmark}/"
                         f"{backbone + '/' if backbone else ''}{seed_dir} needs the set of its own backbone and seed "
                         f"({'none' if not exact else 'several'} found). Export them with `ap-gym skills RUN --policy "
                         "LABEL` from a run with the same backbones and seeds")
    return sets[exact[0]]
