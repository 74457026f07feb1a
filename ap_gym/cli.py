"""``ap-gym``: a thin command line over the public API.

Commands: ``run`` (the protocol from a config), ``train`` (supervised fine-tuning on expert
demonstrations, then GRPO / ReBN / GiGPO, from a training config), ``report`` (tables, plots, statistics,
audit), ``list`` (envs, tasks), ``games`` (generate suites ahead of time), ``demo`` (a
quick look at the agent and the floors), ``serve`` (an OpenAI-compatible server), ``view`` (runs and episodes in a browser).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ap_gym.errors import BackboneError

__all__ = ["main"]


def _cmd_list(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import ap_gym  # noqa: F401
    from ap_gym.envs import benchmark_names, env_class, resolve_benchmark, text_env
    from ap_gym.policies import get_policy, policy_names
    from ap_gym.protocol.config import import_modules

    import_modules(args.imports or [])
    if not args.env:
        names = {**benchmark_names(), **{n: i for n, i in _user_benchmarks().items() if n not in benchmark_names()}}
        for short, env_id in names.items():
            cls = env_class(env_id)
            abilities = ", ".join(sorted(cls.abilities())) if cls is not None else "?"
            print(f"{short}\t{env_id}\tcan: {abilities or '-'}")
        print()
        for name in policy_names():
            info = get_policy(name)
            print(f"policy {name}\tneeds: {', '.join(sorted(info.needs)) or '-'}\t{info.description}")
        return 0
    try:
        env_id = resolve_benchmark(args.env)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    env = gym.make(env_id)
    try:
        suite = text_env(env)
        for tid in suite.task_ids(args.split):
            print(f"{tid}\t{suite.task_family(tid)}")
    finally:
        env.close()
    return 0


def _user_benchmarks() -> dict[str, str]:
    """Short name -> env id of every env registered from outside ap-gym that is a TextEnv."""
    import gymnasium as gym

    from ap_gym.envs import env_class, short_name

    out = {}
    for env_id, spec in gym.registry.items():
        entry = spec.entry_point
        if spec.namespace == "ap_gym" or (isinstance(entry, str) and entry.startswith("gymnasium")):
            continue
        try:
            if env_class(env_id) is not None:
                out[short_name(env_id)] = env_id
        except Exception:  # an entry point that does not import: not ours to list
            continue
    return out


def _cmd_games(args: argparse.Namespace) -> int:
    import time

    import gymnasium as gym
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from ap_gym.envs import resolve_benchmark, text_env
    from ap_gym.protocol.config import import_modules

    import_modules(args.imports or [])
    try:
        env_id = resolve_benchmark(args.benchmark)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    options = {k: v for bench, opts in _env_options(args.env_option).items() for k, v in opts.items()
               if resolve_benchmark(bench) == env_id}
    t = time.perf_counter()
    env = gym.make(env_id, **options)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()) as bar:
            task = bar.add_task(f"{args.benchmark}: preparing the suite", total=None)
            made = text_env(env).prepare_suite(args.workers,
                                               lambda done, total: bar.update(task, completed=done, total=total))
    finally:
        env.close()
    print(f"{args.benchmark}: suite ready ({made} item(s) made, {time.perf_counter() - t:.0f} s)")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from ap_gym.demo import run_demo, trained_demo

    if args.trained is not None:
        return trained_demo(checkpoint=None if args.trained == "auto" else args.trained)
    return run_demo(tasks_per_benchmark=args.tasks, out=args.out, backbone=args.backbone,
                    benchmarks=tuple(args.benchmarks), action_mode=args.action_mode, max_steps=args.max_steps)


def _backbone_overrides(values: list[str] | None) -> dict:
    """``--backbone SPEC`` sets the single backbone; ``--backbone LABEL=SPEC`` sets (or adds)
    one of ``backbones:``."""
    out: dict = {}
    for value in values or []:
        label, sep, spec = value.partition("=")
        if sep and "://" not in label and "/" not in label:
            out.setdefault("backbones", {})[label] = spec
        else:
            out["backbone"] = value
    return out


def _env_options(values: list[str] | None) -> dict:
    """``--env-option BENCHMARK.KEY=VALUE`` (the value read as YAML) as ``env_options``."""
    import yaml

    out: dict = {}
    for value in values or []:
        key, sep, raw = value.partition("=")
        benchmark, dot, option = key.partition(".")
        if not sep or not dot or not benchmark or not option:
            raise SystemExit(f"--env-option takes BENCHMARK.KEY=VALUE (alfworld.games=generated), not {value!r}")
        out.setdefault(benchmark, {})[option] = yaml.safe_load(raw)
    return out


def _label_spec(value: str) -> tuple[str, str]:
    label, sep, spec = value.partition("=")
    if not sep or not label or not spec:
        raise SystemExit(f"--judge takes LABEL=SPEC (for example judge=http://host:8000/v1), not {value!r}")
    return label, spec


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _cmd_run(args: argparse.Namespace) -> int:
    from ap_gym.protocol import RunConfig, run
    from ap_gym.protocol.config import ConfigError

    serving = {k: v for k, v in {"deadline_s": args.deadline, "retries": args.serving_retries,
                                 "concurrency": args.concurrency,
                                 "dialect": args.dialect}.items() if v is not None}
    config = RunConfig.from_file(
        args.config, env_options=_env_options(args.env_option) or None, name=args.name, workers=args.workers, threads=args.threads, out=args.out, embedder=args.embedder,
        iterations=args.iterations, seeds=args.seeds, executor=args.executor, ray_address=args.ray_address,
        lanes=args.lanes, serving=serving or None, **_backbone_overrides(args.backbone),
        **({"judges": dict(_label_spec(v) for v in args.judge)} if args.judge else {}),
        **({"benchmarks": args.benchmarks} if args.benchmarks else {}),
    )
    # SIGTERM stops as cleanly as Ctrl-C, and so does SIGINT when it came in ignored (a run
    # started as a background job of a script inherits SIGINT ignored: `kill -INT` did nothing).
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_dir = run(config, other_weights=args.other_weights)
    except BackboneError as e:
        raise ConfigError(f"{e}") from None
    except KeyboardInterrupt as e:
        print(f"\nap-gym: interrupted. Finished episodes are kept in {config.run_dir}; run the same command "
              "again to resume where it stopped.", file=sys.stderr)
        for note in getattr(e, "__notes__", []):  # a part that failed to close on the way out
            print(f"ap-gym: {note}", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _print_final(run_dir)
    _index_for_view(run_dir)
    print(f"results: {run_dir}  (tables and plots: ap-gym report {run_dir})")
    return 0


def _index_for_view(run_dir: object) -> None:
    """Build (or catch up) the run's view index now, so that ``ap-gym view`` opens it at once
    however large it is; only a cache: failing to write it costs the first open its time."""
    from pathlib import Path

    try:
        from ap_gym.view.index import RunIndex

        RunIndex(Path(str(run_dir))).close()
    except Exception as e:  # the results are complete: never fail a finished run for its cache
        print(f"ap-gym: the run's view index was not written ({type(e).__name__}: {e}); ap-gym view builds it "
              "when it opens the run", file=sys.stderr)


def _print_final(run_dir: Path) -> None:
    """Per held-out task of the final iteration: success, score, steps, LLM calls."""
    from rich.console import Console
    from rich.table import Table

    from ap_gym.protocol.results import load_headers

    lines = [h for h in load_headers(run_dir) if h.phase == "eval"]
    last = max((h.iteration for h in lines), default=0)
    table = Table(title=f"held-out tasks, final iteration ({last})")
    for col in ("benchmark", "policy", "seed", "task", "success", "score", "steps", "LLM calls", "end"):
        table.add_column(col)
    for h in lines:
        if h.iteration == last:
            score = "-" if h.score is None else f"{h.score:g}/{h.max_score:g}" if h.max_score else f"{h.score:g}"
            table.add_row(h.benchmark, h.policy, str(h.seed), h.task_id, "yes" if h.success else "no",
                          score, str(h.num_steps), str(h.usage.llm_calls), h.termination.value)
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def _cmd_report(args: argparse.Namespace) -> int:
    from ap_gym.report import write_report

    judge = None
    if args.judge:
        from ap_gym.backbones import make_backbone

        head, sep, tail = args.judge.partition("=")
        label, spec = (head, tail) if sep and re.fullmatch(r"[A-Za-z0-9_.-]+", head) else ("", args.judge)
        try:
            judge = make_backbone(spec)
        except BackboneError as e:
            raise SystemExit(f"ap-gym report: the judge {label or spec} cannot be reached: {e}") from None
    out = write_report(args.runs, out=args.out, benchmark_labeller=not args.no_audit, method=args.method,
                       judge=judge, mode=args.labeller)
    print(f"report: {out}")
    return 0


def _cmd_view(args: argparse.Namespace) -> int:
    from ap_gym.errors import StoreError
    from ap_gym.view import serve, write_static

    try:
        if args.static:
            page = write_static(args.runs, args.static, rebuild=args.rebuild)
            print(f"viewer bundle: {page} (open it from disk, or serve the directory)")
            return 0
        serve(args.runs, host=args.host, port=args.port, open_browser=args.open, rebuild=args.rebuild,
              api_key=args.api_key or os.environ.get("AP_GYM_VIEW_KEY") or None)
    except (FileNotFoundError, FileExistsError, ValueError, StoreError) as e:
        raise SystemExit(f"ap-gym view: {e}") from None
    except OSError as e:
        from ap_gym.view.index import disk_full

        if not disk_full(e):
            raise
        raise SystemExit(f"ap-gym view: the disk is full ({e}); the bundle {args.static or ''} is incomplete: free "
                         "some space (or name a directory on another disk) and run it again") from None
    return 0


def _cmd_skills(args: argparse.Namespace) -> int:
    from ap_gym.errors import APGymError
    from ap_gym.protocol.skills import export_skills

    try:
        data = export_skills(args.run, args.policy, args.out, benchmark=args.benchmark, seed=args.seed,
                             backbone=args.backbone, active_only=args.active_only)
    except APGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, entry in data["settings"].items():
        print(f"{name}: {len(entry['admitted'])} admitted, {len(entry['filtered_out'])} filtered out")
    print(f"{args.out}: use it as a policy option, frozen_abstractions: {args.out} (each setting takes the skills of "
          "its own backbone and seed)")
    return 0


def _cmd_injection(args: argparse.Namespace) -> int:
    from ap_gym.studies.injection import LABEL, Injection, run_study

    config = Injection(share=args.share, seeded=args.seeded, compliance=args.compliance, copying=args.copying,
                       base_error=args.base_error, error_rate=args.error_rate, iterations=args.iterations,
                       train_per_iter=args.train_per_iter, heldout=args.heldout,
                       dose_shares=tuple(args.dose_shares), dose_seeds=args.dose_seeds)
    backbone = None
    if args.backbone:  # the randomised-exposure check with a real model's synthesis
        from ap_gym.backbones import make_backbone

        backbone = make_backbone(args.backbone)
    result = run_study(args.out, config, backbone=backbone, exposure_calls=args.exposure_calls)
    print(f"{LABEL}\nreport: {result['report']}, {args.out}/curves.png")
    return 0


def _cmd_supplied_skills(args: argparse.Namespace) -> int:
    from ap_gym.errors import APGymError
    from ap_gym.studies.supplied_skills import run_supplied_skills

    try:
        run_dir = run_supplied_skills(args.skills, args.out, backbone=args.backbone, heldout=args.heldout,
                                      seeds=tuple(args.seeds), max_steps=args.max_steps,
                                      agent={"action_mode": args.action_mode})
    except APGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"report: {run_dir / 'report.md'}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from ap_gym.errors import APGymError
    from ap_gym.paths import LockedError
    from ap_gym.training.trainer import TrainConfig, Trainer

    try:
        config = TrainConfig.from_file(args.config, out=args.out, name=args.name, model=args.model,
                                       threads=args.threads)
        if args.tensorboard:
            config = config.model_copy(update={"tensorboard": True})
        checkpoint = Trainer(config, fresh=args.fresh).run()
    except (APGymError, LockedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"checkpoint: {config.run_dir / 'checkpoint'} -> {checkpoint.path} (weights sha256 "
          f"{checkpoint.weights_sha256}); evaluate it with a run config's backbone: {config.run_dir / 'checkpoint'}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from ap_gym.backbones.server import ServerLimits, serve

    limits = ServerLimits(max_tokens_cap=args.max_tokens_cap, request_timeout_s=args.request_timeout,
                          max_body_bytes=args.max_body_bytes)
    serve(None if args.model == "default" else args.model, host=args.host, port=args.port, embedder=args.embedder,
          api_key=args.api_key, limits=limits)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ap-gym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_parser_list, _parser_games, _parser_demo, _parser_run, _parser_train, _parser_report, _parser_view, _parser_skills, _parser_injection, _parser_supplied_skills, _parser_serve):
        add(sub)
    return parser


def _parser_list(sub: Any) -> None:
    p = sub.add_parser("list", help="list benchmarks and policies, or the tasks of one benchmark")
    p.add_argument("env", nargs="?", help="benchmark name or env id, e.g. textworld")
    p.add_argument("--split", default="test", choices=["train", "test"])
    p.add_argument("--imports", nargs="+", metavar="MODULE", help="modules that register your envs and policies")
    p.set_defaults(func=_cmd_list)


def _parser_games(sub: Any) -> None:
    p = sub.add_parser("games", help="prepare a benchmark's suite ahead of time (generated games, task lists)")
    p.add_argument("benchmark", help="a benchmark name or env id, e.g. textworld, alfworld")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--imports", nargs="+", metavar="MODULE", help="modules that register your envs")
    p.add_argument("--env-option", action="append", metavar="BENCHMARK.KEY=VALUE",
                   help="an option of the env whose suite is prepared (textworld.suite=treasure_hunter)")
    p.set_defaults(func=_cmd_games)


def _parser_train(sub: Any) -> None:
    p = sub.add_parser(
        "train", help="train a model: supervised on expert demonstrations, then GRPO / ReBN / GiGPO",
        description="Train a transformers model on an ap-gym env from a training config (benchmarks/train/*.yaml): "
                    "stages of supervised fine-tuning on the env's expert plans (played through the evaluation "
                    "prompt) and of reinforcement learning (grpo, rebn, gigpo), each from the checkpoint the one "
                    "before published. A killed run resumes from its last save when run again.")
    p.add_argument("config", help="a training config (YAML)")
    p.add_argument("--out", default=None, help="results root (default: the config's, results/train)")
    p.add_argument("--name", default=None, help="the run's name (default: the config's)")
    p.add_argument("--model", default=None, help="the starting model: default | tiny | a model directory")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the cores this process may use)")
    p.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event files")
    p.add_argument("--fresh", action="store_true", help="start again, removing what an earlier run of this name left")
    p.set_defaults(func=_cmd_train)


def _parser_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="a small real evaluation on the packaged defaults")
    p.add_argument("--tasks", type=int, default=3, help="held-out tasks per benchmark")
    p.add_argument("--out", default="results/demo")
    p.add_argument("--backbone", default=None, help="default | tiny | model path | http://server/v1")
    p.add_argument("--benchmarks", nargs="+", default=["textworld", "scienceworld"])
    p.add_argument("--action-mode", choices=["choose", "react", "generate"], default="choose")
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--trained", nargs="?", const="auto", default=None, metavar="CHECKPOINT",
                   help="show the agent ap-gym train made (default: the shipped recipe's checkpoint, if any) "
                        "beside the untrained model and the best simple rule on held-out ALFWorld games")
    p.set_defaults(func=_cmd_demo)


def _parser_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run the train / frozen-evaluation protocol from a config file")
    p.add_argument("config", help="a YAML config, e.g. benchmarks/smoke.yaml")
    p.add_argument("--name", help="the run's directory name (default: the config's)")
    p.add_argument("--other-weights", action="store_true",
                   help="resume a run whose backbone directory holds other weights than when it started "
                        "(the run then mixes two models; config.json says so)")
    p.add_argument("--workers", type=int, help="processes (or Ray actors) for held-out evaluation")
    p.add_argument("--threads", type=int, help="torch threads per local worker (default: cores / workers)")
    p.add_argument("--executor", choices=["local", "ray"], help="where held-out episodes and settings run")
    p.add_argument("--ray-address", help="a running Ray cluster (auto | ray://host:port); default: start one")
    p.add_argument("--lanes", type=int, help="episodes per worker in lock-step, model calls batched")
    p.add_argument("--backbone", action="append",
                   help="default | tiny | model path | http://server/v1; LABEL=SPEC sets one of several "
                        "(repeat it); the config's backbones: otherwise")
    p.add_argument("--benchmarks", nargs="+", help="run these benchmarks instead of the config's "
                   "(for example shop in place of webshop without WebShop's data)")
    p.add_argument("--env-option", action="append", metavar="BENCHMARK.KEY=VALUE",
                   help="an env option over the config's env_options (alfworld.games=generated)")
    p.add_argument("--judge", action="append",
                   help="LABEL=SPEC: a judging backbone (judges:), named by a policy's judge_backbone option")
    p.add_argument("--embedder", help="default | sentence-transformers path | http://server/v1 (its /v1/embeddings)")
    p.add_argument("--deadline", type=float, help="overall deadline of one call to a served model, in seconds")
    p.add_argument("--serving-retries", type=int, help="retries of a failed call to a served model")
    p.add_argument("--concurrency", type=int, help="calls in flight at once to a served model")
    p.add_argument("--dialect", help="what the served model's engine offers beyond chat completions: vllm (the "
                                     "default; ap-gym serve too) or openai (chat completions only)")
    p.add_argument("--iterations", type=int)
    p.add_argument("--seeds", type=int, nargs="+")
    p.add_argument("--out", help="results root (default: results)")
    p.set_defaults(func=_cmd_run)


def _parser_report(sub: Any) -> None:
    p = sub.add_parser("report", help="tables, curves, statistics and the audit from run directories")
    p.add_argument("runs", nargs="+", help="run directories (results/<name>)")
    p.add_argument("--out", help="where to write the report (default: <first run>/report)")
    p.add_argument("--no-audit", action="store_true", help="skip the error-reproduction audit")
    p.add_argument("--method", default="anti_persistence",
                   help="the policy compared against every other one (default: anti_persistence)")
    p.add_argument("--judge", metavar="[LABEL=]SPEC", help="label the audit's abstractions with an LLM judge too "
                   "(a backbone spec or http://host:port/v1)")
    p.add_argument("--labeller", choices=["both", "judge"], default="both",
                   help="with --judge: the judge beside the rules (both) or alone")
    p.set_defaults(func=_cmd_report)


def _parser_view(sub: Any) -> None:
    p = sub.add_parser("view", help="browse runs, episodes, memory decisions and provenance in a browser")
    p.add_argument("runs", nargs="+", help="run directories (each indexed once, in <run>/.view/); directories of "
                   "training logs (training.jsonl, e.g. results/learning) go to the Training page")
    p.add_argument("--static", metavar="OUT_DIR", help="write a self-contained bundle instead of serving")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback only; beyond it, "
                   "only with --api-key)")
    p.add_argument("--api-key", help="require this key of every request (default: $AP_GYM_VIEW_KEY); the page "
                   "takes it once as /?key=KEY")
    p.add_argument("--port", type=int, default=0, help="port (default: a free one, printed)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--rebuild", action="store_true", help="rebuild the index even if it is current")
    p.set_defaults(func=_cmd_view)


def _parser_skills(sub: Any) -> None:
    p = sub.add_parser("skills", help="export one setting's admitted and filtered abstractions (frozen-skill layer)")
    p.add_argument("run", help="a run directory")
    p.add_argument("--policy", required=True, help="the policy label")
    p.add_argument("--benchmark", help="only this benchmark's settings")
    p.add_argument("--backbone", help="only this backbone's settings (its label)")
    p.add_argument("--seed", type=int, help="only this seed's settings")
    p.add_argument("--active-only", action="store_true", help="leave out abstractions maintenance deactivated")
    p.add_argument("--out", default="skills.json")
    p.set_defaults(func=_cmd_skills)


def _parser_injection(sub: Any) -> None:
    p = sub.add_parser("injection", help="the injection study: known errors where each design reads, a scripted actor")
    p.add_argument("--share", type=float, default=0.3, help="share of wrong items among the seeded ones")
    p.add_argument("--seeded", type=int, default=20, help="records, rules or reflections seeded per design")
    p.add_argument("--compliance", type=float, default=0.8, help="how often the actor follows its guidance")
    p.add_argument("--copying", type=float, default=0.9, help="how often synthesis copies an error it sees")
    p.add_argument("--base-error", type=float, default=0.02, help="how often synthesis writes one unprompted")
    p.add_argument("--error-rate", type=float, default=0.05, help="the actor's random commands")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--train-per-iter", type=int, default=50)
    p.add_argument("--heldout", type=int, default=100)
    p.add_argument("--dose-shares", type=float, nargs="*", default=[0.0, 0.0],
                   help="shares the dose-response runs besides --share (a second 0 is the placebo)")
    p.add_argument("--dose-seeds", type=int, default=1,
                   help="independent runs per dose share, pooled (more: a narrower dose-effect interval)")
    p.add_argument("--backbone", help="synthesise the randomised-exposure check with this model (a served URL, a "
                                      "model path, default): its copying, measured causally")
    p.add_argument("--exposure-calls", type=int, default=200, help="synthesis calls of the randomised check")
    p.add_argument("--out", default="results/injection")
    p.set_defaults(func=_cmd_injection)


def _parser_supplied_skills(sub: Any) -> None:
    p = sub.add_parser("supplied-skills", help="the paper's F.1: no skill, correct skills, wrong skills, same tasks")
    p.add_argument("skills", help="a skills YAML file (benchmarks/skills/shop.yaml)")
    p.add_argument("--backbone", default="default", help="default | tiny | model path | http://server/v1")
    p.add_argument("--heldout", type=int, default=20, help="held-out tasks (spread over the split)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--max-steps", type=int, default=15)
    p.add_argument("--action-mode", choices=["react", "generate", "choose"], default="react")
    p.add_argument("--out", default="results")
    p.set_defaults(func=_cmd_supplied_skills)


def _parser_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a transformers model over an OpenAI-compatible HTTP API")
    p.add_argument("--model", default="default", help="default (packaged SmolLM2), a model dir, or a .gguf")
    p.add_argument("--host", default="127.0.0.1", help="beyond loopback only with --api-key")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--embedder", help="also serve /v1/embeddings: default (packaged MiniLM) or a path")
    p.add_argument("--api-key", help="require Authorization: Bearer KEY (default: $AP_GYM_API_KEY)")
    p.add_argument("--max-tokens-cap", type=int, default=1024, help="the most tokens one request may generate")
    p.add_argument("--request-timeout", type=float, default=120.0, help="seconds a request may generate")
    p.add_argument("--max-body-bytes", type=int, default=8 << 20, help="the largest request body accepted")
    p.set_defaults(func=_cmd_serve)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``ap-gym`` command. Ctrl-C anywhere (a demo loading its model, a viewer importing
    its server) ends it with one line and exit status 130, never a traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("ap-gym: interrupted", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    from ap_gym.protocol.config import ConfigError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"ap-gym: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
