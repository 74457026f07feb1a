"""One registry of policies: each registered with what it needs and what it supports.

The protocol builds a policy from its spec (name + options) by asking the registry what
to hand it (a backbone, an embedder, a memory store, a seed), what it needs of the env
(a walkthrough), and what it can do (snapshots, learning from training episodes); no code
decides a capability from a policy's name. A user's policy registers itself the same way,
from a module named under a run config's ``imports:``::

    from ap_gym.policies import BasePolicy, register_policy

    @register_policy("always_look", needs=())
    class AlwaysLook(BasePolicy):
        def act(self, observation, info):
            self.record_step()
            return "look"

A name is taken once: registering another object under a taken name raises, naming the
object that holds it (as Gymnasium refuses a second env under one id). Registration also
records the arguments each instance was built with, so ``spec_of(policy)`` rebuilds it
(JSON-able values kept, objects named by identity), and derives the policy's options
schema from its signature (:meth:`PolicyInfo.check_options`), so a run config's options
are checked when it loads.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

__all__ = ["ENV_NEEDS", "NEEDS", "SUPPORTS", "OptionError", "PolicyInfo", "get_policy", "make_policy", "policy_names",
           "register_policy", "spec_of"]

#: What the protocol can hand a policy, and the keyword argument each arrives as.
NEEDS = {"backbone": "backbone", "embedder": "embedder", "store": "db_path", "seed": "seed"}
#: What a policy can need of the env (an ability :class:`~ap_gym.envs.base.TextEnv` declares);
#: a run pairing the policy with an env that lacks it is refused before it starts.
ENV_NEEDS = frozenset({"walkthrough"})
#: ``snapshots``: ``save_state``/``load_state``/``clear_state``/``close`` (a
#: :class:`~ap_gym.types.StatefulPolicy`); ``training``: training episodes can change
#: later episodes, so the protocol runs them (it skips them for other policies).
SUPPORTS = frozenset({"snapshots", "training"})

T = TypeVar("T")


class OptionError(ValueError):
    """A policy option that the policy does not take, or of a value it cannot take.

    Attributes:
        path: where, as keys from the policy's options down (``("memory", "budgt")``).
        valid: the keys valid at that place, when the key itself is unknown.
    """

    def __init__(self, message: str, path: tuple[str, ...], valid: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.path, self.valid = path, valid


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

    @property
    def env_needs(self) -> frozenset[str]:
        return self.needs & ENV_NEEDS

    def option_names(self) -> frozenset[str]:
        """The options this policy takes (its factory's keyword arguments)."""
        return frozenset(_options_model(self.factory).model_fields)

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Raise :class:`OptionError` for the first option this policy cannot take (an
        unknown key at any depth, a value of the wrong kind), naming its path."""
        model = _options_model(self.factory)
        try:
            model.model_validate(dict(options))
        except ValidationError as e:
            error = e.errors()[0]
            path = tuple(str(p) for p in error["loc"])
            if error["type"] == "extra_forbidden":
                valid = _keys_at(model, path[:-1])
                raise OptionError(f"unknown option (valid here: {', '.join(valid)})", path, valid) from None
            raise OptionError(error["msg"].removeprefix("Value error, "), path) from None


_REGISTRY: dict[str, PolicyInfo] = {}


def register_policy(name: str, *, needs: Iterable[str] = (), supports: Iterable[str] = ()) -> Callable[[T], T]:
    """Register a policy class (or factory) under ``name``.

    Args:
        name: the name configs use (``policies: [{name: ...}]``); taken once.
        needs: any of ``backbone``, ``embedder``, ``store`` (a database path, as
            ``db_path``) and ``seed``, which the protocol passes as keyword arguments, and
            ``walkthrough``, an ability the env must have (:data:`ENV_NEEDS`).
        supports: any of ``snapshots`` and ``training`` (see :data:`SUPPORTS`).
    """
    needs, supports = frozenset(needs), frozenset(supports)
    if unknown := needs - set(NEEDS) - ENV_NEEDS:
        raise ValueError(f"policy {name!r}: unknown needs {sorted(unknown)}; choose from {sorted({*NEEDS, *ENV_NEEDS})}")
    if unknown := supports - SUPPORTS:
        raise ValueError(f"policy {name!r}: unknown supports {sorted(unknown)}; choose from {sorted(SUPPORTS)}")
    if "training" in supports and "snapshots" not in supports:
        raise ValueError(f"policy {name!r} learns from training episodes, so it must support snapshots "
                         "(save_state/load_state/clear_state/close): held-out workers and resume start from them")

    def decorate(obj: T) -> T:
        _claim(name, obj)
        if inspect.isclass(obj):
            _record_arguments(obj, name)
        doc = (inspect.getdoc(obj) or "").strip().splitlines()
        _REGISTRY[name] = PolicyInfo(name, obj, needs, supports, doc[0] if doc else "")  # type: ignore[arg-type]  # a class or a factory: both build the policy
        return obj

    return decorate


def _where(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', repr(obj))}"


def _claim(name: str, obj: Any) -> None:
    """Refuse ``name`` when another object holds it; the same object (a module imported
    twice) or its reloaded self (same module and name) takes it back, with a warning."""
    held = _REGISTRY.get(name)
    if held is None or held.factory is obj:
        return
    if _where(held.factory) == _where(obj):
        warnings.warn(f"policy {name!r} registered again by {_where(obj)} (a reloaded module?); the new "
                      "definition replaces the old one", stacklevel=3)
        return
    raise ValueError(f"policy name {name!r} is taken by {_where(held.factory)}; register "
                     f"{_where(obj)} under another name (policy names are unique, as env ids are)")


def _record_arguments(cls: type, name: str) -> None:
    """Wrap ``cls.__init__`` so that each instance keeps the arguments it was built with."""
    init = inspect.getattr_static(cls, "__init__")  # the one it resolves to (its own or inherited)
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

    cls.__init__ = __init__  # type: ignore[misc]  # records the constructor's arguments (spec_of)


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
    into their options objects (``agent``, ``memory``, ``bandit``) by the policy classes,
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
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    identity = getattr(value, "identity", None)  # a backbone or embedder: named, not serialised
    return identity if isinstance(identity, str) else repr(value)


# --------------------------------------------------------------- options schema
@functools.cache
def _options_model(factory: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of the keyword arguments ``factory`` takes, from its signature.

    An options object (agent, memory, bandit: an :class:`~ap_gym.options.Options`) is
    validated as itself, so a misspelled key inside it is caught; a type pydantic cannot
    check (a backbone, a callable judge) is taken as it is. A factory with ``**kwargs``
    takes other keys too.
    """
    target = factory.__init__ if inspect.isclass(factory) else factory
    signature = inspect.signature(factory)
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # an annotation that does not resolve: check names only
        hints = {}
    fields: dict[str, Any] = {}
    open_ended = False
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            open_ended = True
        elif p.kind is not p.VAR_POSITIONAL:
            fields[p.name] = (_checkable(hints.get(p.name, Any)), None if p.default is p.empty else p.default)
    config = ConfigDict(extra="allow" if open_ended else "forbid", arbitrary_types_allowed=True,
                        protected_namespaces=())
    with warnings.catch_warnings():  # a parameter named like a BaseModel attribute is still a parameter
        warnings.simplefilter("ignore")
        return create_model(f"{getattr(factory, '__name__', 'policy')}Options", __config__=config, **fields)


def _checkable(hint: Any) -> Any:
    """``hint`` as pydantic should check it: an options model as itself (or ``None``),
    anything pydantic cannot build a validator for as ``Any``."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, UnionType) else (hint,)
    models = [a for a in args if inspect.isclass(a) and issubclass(a, BaseModel)]
    if models:
        return models[0] | None
    try:
        TypeAdapter(hint)
    except Exception:
        return Any
    return hint


def _keys_at(model: type[BaseModel], path: tuple[str, ...]) -> tuple[str, ...]:
    """The field names of the options model found by following ``path`` from ``model``."""
    for key in path:
        field = model.model_fields.get(key)
        hint = field.annotation if field is not None else None
        args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, UnionType) else (hint,)
        nested = [a for a in args if inspect.isclass(a) and issubclass(a, BaseModel)]
        if not nested:
            return ()
        model = nested[0]
    return tuple(model.model_fields)
