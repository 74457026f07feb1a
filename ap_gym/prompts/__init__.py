"""The prompts every LLM call uses, one text file per purpose, saved with each run.

A leaf module: policies (acting, synthesis), the audit's judge and the studies read
their prompts here, so none of them imports another to find a prompt.
``load_prompt(name)`` reads ``<name>.txt``; ``all_prompts()`` returns every prompt, which
the protocol writes into a run's results so that a run records exactly what its models
were told.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["all_prompts", "load_prompt"]


@cache
def load_prompt(name: str) -> str:
    path = resources.files(__name__) / f"{name}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"no prompt {name!r} in ap_gym/prompts/")
    return path.read_text(encoding="utf-8").strip()


def all_prompts() -> dict[str, str]:
    folder = resources.files(__name__)
    return {p.name[:-4]: p.read_text(encoding="utf-8").strip() for p in folder.iterdir() if p.name.endswith(".txt")}
