"""The one base of every options object: typed, frozen, and strict about its keys.

Agent, memory, bandit, generation and serving options are pydantic models on this base,
so a run config is checked the moment it loads: a misspelled key or a value of the wrong
kind is refused with its key path, before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = ["Options"]

OptionsT = TypeVar("OptionsT", bound="Options")


class Options(BaseModel):
    """Frozen, ``extra="forbid"``: an unknown key is an error, never ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def coerce(cls: type[OptionsT], value: OptionsT | Mapping[str, Any] | None) -> OptionsT:
        """Itself, from plain options (YAML), or the defaults (``None``)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        return cls.model_validate(dict(value))

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def replace(self: OptionsT, **changes: Any) -> OptionsT:
        """A copy with ``changes``, validated like the original."""
        return type(self).model_validate({**self.model_dump(), **changes})
