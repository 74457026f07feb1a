"""One registry of policies: each registered with what it needs and what it supports.

The protocol builds a policy from its spec (name + options) by asking the registry what
to hand it (a backbone, an embedder, a memory store, a seed) and what it can do
(snapshots, learning from training episodes); no code decides a capability from a
policy's name. A user's policy registers itself the same way, from a module named under
a run config's ``imports:``::

    from ap_gym.policies import BasePolicy, register_policy

    @register_policy("always_look", needs=())
    class AlwaysLook(BasePolicy):
        def act(self, observation, info):
            self.record_step()
            return "look"

Registration also records the arguments each instance was built with, so
``spec_of(policy)`` rebuilds it (JSON-able values kept, objects named by identity).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["NEEDS", "SUPPORTS", "PolicyInfo", "get_policy", "make_policy", "policy_names", "register_policy", "spec_of"]

#: What the protocol can hand a policy, and the keyword argument each arrives as.
NEEDS = {"backbone": "backbone", "embedder": "embedder", "store": "db_path", "seed": "seed"}
#: ``snapshots``: ``save_state``/``load_state``/``clear_state``/``close`` (a
#: :class:`~ap_gym.types.StatefulPolicy`); ``training``: training episodes can change
#: later episodes, so the protocol runs them (it skips them for other policies).
SUPPORTS = frozenset({"snapshots", "training"})

T = TypeVar("T")


@dataclass(frozen=True)
class PolicyInfo:
    """A registered policy: how to build it and what it declares."""

    name: str
    factory: Callable[..., Any]
    needs: frozenset[str]
    supports: frozenset[str]
    description: str = ""

    @property
    def stateful(self) -> bool:
        return "snapshots" in self.supports

    @property
    def learns(self) -> bool:
        return "training" in self.supports


_REGISTRY: dict[str, PolicyInfo] = {}


def register_policy(name: str, *, needs: Iterable[str] = (), supports: Iterable[str] = ()) -> Callable[[T], T]:
    """Register a policy class (or factory) under ``name``.

    Args:
        name: the name configs use (``policies: [{name: ...}]``).
        needs: any of ``backbone``, ``embedder``, ``store`` (a database path, as
            ``db_path``) and ``seed``; the protocol passes them as keyword arguments.
        supports: any of ``snapshots`` and ``training`` (see :data:`SUPPORTS`).
    """
    needs, supports = frozenset(needs), frozenset(supports)
    if unknown := needs - set(NEEDS):
        raise ValueError(f"policy {name!r}: unknown needs {sorted(unknown)}; choose from {sorted(NEEDS)}")
    if unknown := supports - SUPPORTS:
        raise ValueError(f"policy {name!r}: unknown supports {sorted(unknown)}; choose from {sorted(SUPPORTS)}")
    if "training" in supports and "snapshots" not in supports:
        raise ValueError(f"policy {name!r} learns from training episodes, so it must support snapshots "
                         "(save_state/load_state/clear_state/close): held-out workers and resume start from them")

    def decorate(obj: T) -> T:
        if inspect.isclass(obj):
            _record_arguments(obj, name)
        doc = (inspect.getdoc(obj) or "").strip().splitlines()
        _REGISTRY[name] = PolicyInfo(name, obj, needs, supports, doc[0] if doc else "")  # type: ignore[arg-type]
        return obj

    return decorate


def _record_arguments(cls: type, name: str) -> None:
    """Wrap ``cls.__init__`` so that each instance keeps the arguments it was built with."""
    init = cls.__init__
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if "_spec" not in self.__dict__:  # the outermost registered class records
            bound = signature.bind(self, *args, **kwargs)
            arguments = {k: v for k, v in list(bound.arguments.items())[1:]}
            extra = arguments.pop(next((p.name for p in signature.parameters.values()
                                        if p.kind is p.VAR_KEYWORD), ""), {})
            self.__dict__["_spec"] = {"name": name, "options": {**arguments, **extra}}
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]


def get_policy(name: str) -> PolicyInfo:
    """The registered policy ``name``; the error lists the others and how to add one."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(policy_names())}, or register "
                         "your own with @register_policy in a module named under the config's imports:") from None


def policy_names() -> list[str]:
    return list(_REGISTRY)


def make_policy(name: str, backbone: Any = None, **options: Any) -> Any:
    """A policy by registry name; ``options`` are its constructor's keyword arguments.

    ``backbone`` is passed only to policies that need one. Nested option dicts are turned
    into their config objects (``agent``, ``memory``, ``bandit``) by the policy classes,
    so a policy can be described by plain YAML.
    """
    info = get_policy(name)
    if backbone is not None and "backbone" in info.needs:
        options = {"backbone": backbone, **options}
    return info.factory(**options)


def spec_of(policy: Any) -> dict[str, Any]:
    """The name and arguments a registered policy was built with, as JSON-able values."""
    spec = policy.__dict__.get("_spec")
    if spec is None:
        return {"name": type(policy).__name__, "options": {}}
    return {"name": spec["name"], "options": {k: _jsonable(v) for k, v in spec["options"].items()}}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    identity = getattr(value, "identity", None)  # a backbone or embedder: named, not serialised
    return identity if isinstance(identity, str) else repr(value)
