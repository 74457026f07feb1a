"""The run config: everything that defines a run, typed and validated before anything is written.

A config is YAML (``ap-gym run CONFIG``) or a mapping; every key is checked, and an
error names the key and says what it accepts. ``imports:`` lists modules imported
before anything else (here, and in every worker), so that a user's environments and
policies register themselves; then every benchmark must resolve to a registered env id
and every policy to a registered policy.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ap_gym.backbones.openai import ServingOptions
from ap_gym.errors import APGymError
from ap_gym.net import refuse_userinfo

__all__ = ["EXECUTION_KEYS", "AuditOptions", "ConfigError", "PolicySpec", "RunConfig", "import_modules"]

#: config keys that change how or where a run executes, not what it computes: a run may
#: be resumed with other values (say, started locally and finished on Ray, or moved).
EXECUTION_KEYS = frozenset({"workers", "threads", "executor", "ray_address", "lanes", "out", "serving", "description"})
#: A backbone spec ``served:<model>``: the model is named in the config, its URL given at run time.
SERVED = "served:"
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}$")


class ConfigError(APGymError, ValueError):
    """A run config that cannot be run as written; the message names the key."""


def _safe_name(value: str, what: str) -> str:
    """A name that becomes one path component of the results: no separators, no ``..``."""
    if not _SAFE.match(value) or value in (".", ".."):
        raise ValueError(f"{what} {value!r} must be letters, digits and _ . + - (it names a results directory)")
    return value


_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: The longest a module of ``imports:`` may take to import (one that loops would hang the run).
IMPORT_TIMEOUT_S = 120.0


@contextlib.contextmanager
def _time_limit(seconds: float, what: str, module: str | None = None) -> Iterator[None]:
    """Interrupt the main thread after ``seconds``. Off the main thread (a Ray actor's, a
    server's worker) no signal reaches it and no thread can be interrupted, so a module not
    yet imported is first imported in a child process under the limit: one that hangs is
    refused there, before it can hang this process."""
    if threading.current_thread() is not threading.main_thread():
        if module is not None and module not in sys.modules:
            _probe_import(module, seconds, what)
        yield
        return

    def interrupt(*_: Any) -> None:
        raise TimeoutError(f"{what} did not finish within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _probe_import(module: str, seconds: float, what: str) -> None:
    """Import ``module`` in a child process (this one's ``sys.path``) within ``seconds``."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        subprocess.run([sys.executable, "-c", f"import {module}"], env=env, timeout=seconds,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{what} did not finish within {seconds:g} s") from None


def import_modules(modules: tuple[str, ...] | list[str], timeout_s: float = IMPORT_TIMEOUT_S) -> None:
    """Import a config's ``imports:`` (they register envs and policies). A module is named,
    not a path; it may not exit, hang, or take over one of ap-gym's own env ids."""
    import gymnasium as gym

    for module in modules:
        if not isinstance(module, str) or not _MODULE.fullmatch(module):
            raise ConfigError(f"imports: {module!r} is not a module name; name it as Python does (my_envs, "
                              "pkg.envs) and put its folder on PYTHONPATH")
        own = {k: v for k, v in gym.registry.items() if k.startswith("ap_gym/")}
        try:
            with _time_limit(timeout_s, f"importing {module!r}", module):
                importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"imports: cannot import {module!r} ({e}); is it on PYTHONPATH?") from e
        except SystemExit as e:
            raise ConfigError(f"imports: {module!r} called sys.exit({e.code}) while being imported; a module that "
                              "registers envs or policies must not exit (guard its script part with "
                              "if __name__ == '__main__':)") from None
        except Exception as e:
            raise ConfigError(f"imports: importing {module!r} failed: {type(e).__name__}: {e}") from None
        taken = sorted(k for k, spec in own.items() if gym.registry.get(k) is not spec)
        if taken:
            for k in taken:  # ap-gym's own env stays what it was
                gym.registry[k] = own[k]
            raise ConfigError(f"imports: {module!r} registered {', '.join(taken)} again, one of ap-gym's own env ids; "
                              "register your env under a namespace of yours (my_envs/Name-v0)")


class PolicySpec(BaseModel):
    """A policy by registry name, a label for results, and its options.

    ``initial_state``: a snapshot (``policy.save_state``) the policy's memory starts from
    in every seed, instead of an empty one: a warm start, or a memory seeded on purpose
    (the injection study).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    label: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    initial_state: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"name": data, "label": data}
        if isinstance(data, Mapping) and not data.get("label") and isinstance(data.get("name"), str):
            return {**data, "label": data["name"]}
        return data

    @field_validator("options", mode="before")
    @classmethod
    def _no_null_options(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("label")
    @classmethod
    def _label_is_a_path_component(cls, value: str) -> str:
        return _safe_name(value, "policy label")


#: How served backbones and embedders are called: one options object, the backbone's own.
Serving = ServingOptions


class AuditOptions(BaseModel):
    """What a run records for the error-reproduction audit beyond the paper's provenance.

    Attributes:
        randomise_exposure: the chance, per training task of a memory policy, that the
            stored abstractions retrieved for it are withheld from its prompt by a recorded
            coin: the audit then estimates the effect of exposure to a flagged abstraction
            from a randomised contrast (the coin's two arms), which confounding by task
            family, difficulty or drift cannot bias. 0 (the default): the paper's runs.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    randomise_exposure: float = Field(default=0.0, ge=0.0, le=1.0)

    @field_validator("randomise_exposure", mode="before")
    @classmethod
    def _a_probability(cls, value: Any) -> Any:
        # `true` was read as 1.0 (every exposure withheld) and '0.5' as text: a probability is a number
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"randomise_exposure is a probability between 0 and 1 (0.5, say), not {value!r}")
        return value


class RunConfig(BaseModel):
    """Everything that defines a run; saved whole with its results.

    Attributes:
        name: the run's directory name under ``out``.
        description: what the run shows and what it cannot; the report opens with it.
        imports: modules to import first (in the driver and every worker) to register
            a user's envs and policies.
        benchmarks: short names (``textworld``, ``scienceworld``, ...) or registered env ids.
        policies: what to compare.
        policy_defaults: options every policy that takes them gets, under its own (a policy's
            own options win, key by key): the paper's agent for every method, say.
        backbone: ``default``, ``tiny``, a model path, or an OpenAI-compatible URL
            (``served:<model>`` in a shared config: the URL is given at run time with
            ``--backbone``).
        backbones: several backbones by label (label -> spec as for ``backbone``); the
            grid becomes benchmark x backbone x policy x seed and results are filed under
            ``<benchmark>/<backbone label>/<policy>/seed<k>``. ``backbone`` is then unused.
        judges: backbones that judge rather than act (label -> spec), named by a policy's
            ``judge_backbone`` option (the admission filter's judge) or ``synthesis_backbone``
            option (a model that writes the guidance for another that acts); not a grid
            dimension.
        embedder: ``default``, a sentence-transformers path, or an OpenAI-compatible URL
            (``/v1/embeddings``).
        serving: deadlines, retries and concurrency for served backbones and embedders.
        seeds: one full protocol per seed.
        iterations, train_per_iter: the protocol's rounds and training sample size.
        heldout: evaluate N held-out tasks spread evenly over the split (``None``: all, the paper's).
        eval_before_training: also evaluate once before the first training iteration
            (recorded as iteration -1: the untrained policy with empty memory), the
            curves' starting point.
        max_steps: the step limit of every benchmark. ``None`` (the default): each env's
            registered ``max_episode_steps`` (50 for ap-gym's own, the paper's), or 50 when
            it registers none; each setting's ``benchmark.json`` says which ran.
        workers: processes (local) or Ray actors (ray) for held-out evaluation; with
            the Ray executor, also how many settings of a grid run at once.
        threads: torch threads per local worker (default: the cores divided among the
            workers, or ``OMP_NUM_THREADS`` divided among them where it is set). Workers
            share the cores; more threads than cores in all makes them wait on each other.
        executor: ``local`` (processes on this machine) or ``ray`` (Ray tasks and
            actors, on a local instance or the cluster at ``ray_address``).
        ray_address: ``None`` starts a local Ray instance; ``auto`` or ``ray://host:port``
            joins a running cluster (the run directory must then be on storage every node
            sees, since settings write their own results).
        lanes: held-out episodes each worker plays at once in lock-step, their model
            calls batched into one forward pass (in-process backbone) or sent
            concurrently (served backbone).
        retries: re-runs of an episode that ended in an infrastructure failure.
        train_stateless: run training episodes for policies that do not learn, too.
        env_options: keyword arguments per benchmark for ``gym.make``.
        audit: what the run records for the audit beyond provenance (:class:`AuditOptions`:
            randomised exposure).
        out: the results root.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "run"
    imports: tuple[str, ...] = ()
    benchmarks: tuple[str, ...] = Field(default=("textworld",), min_length=1)
    policies: tuple[PolicySpec, ...] = Field(default=(PolicySpec(name="no_memory"),), min_length=1)
    policy_defaults: dict[str, Any] = Field(default_factory=dict)
    backbone: str = "default"
    backbones: dict[str, str] | None = None
    judges: dict[str, str] | None = None
    embedder: str = "default"
    serving: Serving = Field(default_factory=Serving)
    seeds: tuple[int, ...] = Field(default=(0,), min_length=1)
    iterations: int = Field(default=10, ge=1)
    train_per_iter: int = Field(default=50, ge=0)
    heldout: int | None = Field(default=None, ge=1)
    eval_before_training: bool = False
    description: str = ""
    max_steps: int | None = Field(default=None, ge=1)
    workers: int = Field(default=1, ge=1)
    threads: int | None = Field(default=None, ge=1)
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    lanes: int = Field(default=1, ge=1)
    retries: int = Field(default=2, ge=0)
    train_stateless: bool = False
    env_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    audit: AuditOptions = Field(default_factory=AuditOptions)
    out: str = "results"

    @field_validator("name")
    @classmethod
    def _name_is_a_path_component(cls, value: str) -> str:
        return _safe_name(value, "run name")

    @field_validator("backbones", "judges")
    @classmethod
    def _backbone_labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            if not value:
                raise ValueError("name at least one (label: spec)")
            for label, spec in value.items():
                _safe_name(label, "backbone label")
                if not str(spec).strip():
                    raise ValueError(f"{label!r} has an empty spec: give its server (--backbone {label}=http://HOST:"
                                     "PORT/v1) or a model; an empty one would run the packaged SmolLM2 under "
                                     f"the name {label!r}")
                refuse_userinfo(str(spec))
        return value

    @field_validator("backbone", "embedder")
    @classmethod
    def _spec_is_given(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an empty spec: name a model (default, tiny, a path) or a server URL")
        return refuse_userinfo(value)

    @model_validator(mode="after")
    def _registered(self) -> RunConfig:
        import ap_gym  # noqa: F401  (registers ap-gym's envs)
        from ap_gym.envs import resolve_benchmark, short_name

        import_modules(self.imports)
        names = [short_name(resolve_benchmark(b)) for b in self.benchmarks]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmarks name the same benchmark twice: {list(self.benchmarks)}")
        labels = [p.label for p in self.policies]
        if len(set(labels)) != len(labels):
            raise ValueError(f"policy labels must be unique: {labels}")
        if self.policy_defaults:
            self._defaults_are_taken()
            object.__setattr__(self, "policies", tuple(self._with_defaults(p) for p in self.policies))
            object.__setattr__(self, "policy_defaults", {})
        self._policies_take_their_options()
        self._envs_can_serve_the_policies()
        self._served_models_have_urls()
        return self

    def _defaults_are_taken(self) -> None:
        """Every key of ``policy_defaults`` is an option of at least one policy of the run: a
        misspelled one (``agnet``) reached nobody and was dropped without a word."""
        from ap_gym.policies import get_policy

        taken: set[str] = set()
        for p in self.policies:
            taken |= set(get_policy(p.name).option_names())
        unknown = sorted(set(self.policy_defaults) - taken)
        if unknown:
            raise ValueError(f"policy_defaults: {', '.join(map(repr, unknown))} is an option of no policy of this run "
                             f"(they take {', '.join(sorted(taken)) or 'none'}); a misspelling?")

    def _with_defaults(self, spec: PolicySpec) -> PolicySpec:
        """``spec`` with ``policy_defaults`` under its own options, for the keys its policy takes."""
        from ap_gym.policies import get_policy

        takes = get_policy(spec.name).option_names()
        merged = _merge({k: v for k, v in self.policy_defaults.items() if k in takes}, spec.options)
        return spec.model_copy(update={"options": merged})

    def _policies_take_their_options(self) -> None:
        """Every policy's options, at any depth, against what the policy takes: a misspelled
        key or a value of the wrong kind is refused now, before anything is written."""
        from ap_gym.policies import OptionError, get_policy

        for i, p in enumerate(self.policies):
            try:
                get_policy(p.name).check_options(p.options)
            except OptionError as e:
                where = ".".join(("policies", str(i), "options", *e.path))
                raise ValueError(f"{where} (policy {p.label!r}): {e}") from None

    def _envs_can_serve_the_policies(self) -> None:
        """A policy that needs an env ability (a walkthrough) with an env that lacks it is
        refused before the run starts, naming both."""
        from ap_gym.envs import env_class, resolve_benchmark
        from ap_gym.policies import get_policy

        problems = []
        for b in self.benchmarks:
            cls = env_class(resolve_benchmark(b))
            if cls is None:  # an entry point that is not a TextEnv class: nothing declared to check
                continue
            for p in self.policies:
                missing = get_policy(p.name).env_needs - cls.abilities()
                if missing:
                    problems.append(f"policy {p.label!r} needs {', '.join(sorted(missing))}, which {b} "
                                    f"({cls.__name__}) cannot give")
        if problems:
            raise ValueError("; ".join(problems) + ". Leave that policy out for that benchmark (a separate config), "
                             "or give the env the ability (TextEnv.walkthrough)")

    def _served_models_have_urls(self) -> None:
        """A spec ``served:<model>`` names a model whose server is given at run time: say how."""
        named: list[tuple[str, str | None, str]] = [("backbone", None, self.backbone)] if not self.backbones else []
        named += [("backbones", label, spec) for label, spec in (self.backbones or {}).items()]
        named += [("judges", label, spec) for label, spec in (self.judges or {}).items()]
        named += [("embedder", None, self.embedder)]
        missing = [(key, label, spec) for key, label, spec in named if spec.startswith(SERVED)]
        if missing:
            flag = {"judges": "judge", "embedder": "embedder"}
            flags = " ".join(f"--{flag.get(key, 'backbone')} {label + '=' if label else ''}"
                             f"http://HOST:PORT/v1" for key, label, _ in missing)
            models = ", ".join(f"{label or key}: {spec[len(SERVED):]}" for key, label, spec in missing)
            embedder = any(key == "embedder" for key, _, _ in missing)
            raise ValueError(f"the config names served models without their servers ({models}); give each URL at "
                             f"run time: ap-gym run CONFIG {flags}" + (
                                 ". For the embedder, --embedder default takes the packaged all-MiniLM-L6-v2 "
                                 "instead: then rho = 0.7 is on another similarity scale than the paper's, and "
                                 "every report says which embedder ran" if embedder else ""))

    # ------------------------------------------------------------------ io
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        """Validate a mapping; a :class:`ConfigError` names every key that is wrong."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"a run config is a mapping of keys to values, not {type(d).__name__}")
        try:
            return cls.model_validate(dict(d))
        except ValidationError as e:
            raise ConfigError(_explain(e)) from None

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> RunConfig:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read the config {path}: {e}") from None
        if not data:
            raise ConfigError(f"{path} is empty; a run config names at least its benchmarks and policies "
                              "(see benchmarks/smoke.yaml)")
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path} must be a mapping of keys to values, not a {type(data).__name__}")
        data = dict(data)
        for key, value in overrides.items():  # mappings (backbones, serving) are merged, not replaced
            if value is None:
                continue
            if isinstance(value, Mapping) and isinstance(data.get(key), Mapping):
                value = _merge(data[key], value)
            data[key] = value
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` (validated like the original)."""
        return type(self).from_dict({**self.to_dict(), **changes})

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / self.name

    def benchmark_ids(self) -> dict[str, str]:
        """Short name -> env id of every benchmark, in config order."""
        from ap_gym.envs import resolve_benchmark, short_name

        ids = [resolve_benchmark(b) for b in self.benchmarks]
        return {short_name(i): i for i in ids}

    def step_limit(self, benchmark: str) -> tuple[int, str]:
        """The step limit of ``benchmark`` (a short name or an env id) and where it comes from:
        ``config`` (``max_steps``), ``registration`` (the env's ``max_episode_steps``) or
        ``default`` (50, the paper's)."""
        import gymnasium as gym

        if self.max_steps is not None:
            return self.max_steps, "config"
        env_id = self.benchmark_ids().get(benchmark, benchmark)
        registered = gym.spec(env_id).max_episode_steps
        return (registered, "registration") if registered else (DEFAULT_MAX_STEPS, "default")

    def policy(self, label: str) -> PolicySpec:
        return next(p for p in self.policies if p.label == label)

    def backbone_specs(self) -> dict[str | None, str]:
        """Backbone label -> spec; the single ``backbone`` has the label ``None`` (its results
        keep the layout without a backbone level)."""
        specs: dict[str | None, str] = {k: v for k, v in (self.backbones or {}).items()} or {None: self.backbone}
        return specs

    def what_it_computes(self) -> dict[str, Any]:
        """The config without the keys that only say how or where it runs (resume compares this).

        A key added to ap-gym later, left at its default, is left out too: a run started
        before the key existed resumes under the version that added it.
        """
        defaults = {"eval_before_training": False, "judges": None, "audit": AuditOptions().model_dump()}
        out = {k: v for k, v in self.to_dict().items()
               if k not in EXECUTION_KEYS and not (k in defaults and v == defaults[k])}
        # the limits that ran: a run saved with max_steps: 50 resumes with the registration's 50
        out["max_steps"] = {b: self.step_limit(b)[0] for b in self.benchmark_ids()}
        # the arms are a set (labels are unique): their order says only which runs first, so a
        # run reordered to finish some arms sooner still resumes
        out["policies"] = sorted(out["policies"], key=lambda p: json.dumps(p, sort_keys=True, default=str))
        return out


#: The step limit of an env that registers none (the paper's).
DEFAULT_MAX_STEPS = 50


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``, mappings merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) \
            else value
    return out


def _explain(error: ValidationError) -> str:
    lines = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown key (check its spelling)"
        lines.append(f"config key {where!r}: {message}" if where else message)
    return "invalid run config:\n  " + "\n  ".join(lines)
