"""A labeller's verdict, shared by the audit's labellers (:mod:`ap_gym.report.audit`,
:mod:`ap_gym.report.grounded`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Label"]


@dataclass(frozen=True)
class Label:
    """A labeller's verdict: flagged or not, and why (one reason per rule that fired; a
    reason starts with its error type, ``"location: ..."``)."""

    flagged: bool
    reasons: tuple[str, ...] = ()
