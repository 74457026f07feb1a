"""Prompts live in text files beside this module, one per purpose, saved with each run.

``load_prompt(name)`` reads ``prompts/<name>.txt``; ``all_prompts()`` returns every
prompt, which the protocol writes into the run's results so a run records exactly what
its models were told.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["all_prompts", "load_prompt"]


@cache
def load_prompt(name: str) -> str:
    path = resources.files("ap_gym.policies") / "prompts" / f"{name}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"no prompt {name!r} in ap_gym/policies/prompts/")
    return path.read_text(encoding="utf-8").strip()


def all_prompts() -> dict[str, str]:
    folder = resources.files("ap_gym.policies") / "prompts"
    return {p.name[:-4]: p.read_text(encoding="utf-8").strip() for p in folder.iterdir() if p.name.endswith(".txt")}
