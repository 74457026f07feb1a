"""What every benchmark script shares: the machine, the spread, the order, the output.

A script measures two (or more) sides in one run: it warms each side the same way,
alternates their order (ABBA: ``abba(i)`` says who goes first in round ``i``), repeats,
and reports the median with min-max (:func:`spread`). It then calls :func:`emit` with a
Markdown section: printed, and written to ``benchmarks/sections/<name>.md`` with the
date, the command and the machine. ``python benchmarks/results.py`` (``make bench``)
assembles ``benchmarks/RESULTS.md`` from those files, so every figure there is a
script's output.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["RESULTS_DIR", "abba", "emit", "gold_path", "machine", "positive", "ratio_spread", "spread"]

RESULTS_DIR = Path(__file__).resolve().parent / "sections"
# The command line as the script got it: ALFWorld's planner (fast downward's translate,
# run in-process when a game is generated) rewrites sys.argv, and env_overhead's section
# once named its command "python translate.py domain task".
_ARGV = list(sys.argv)


def machine() -> str:
    """CPU, memory, OS, Python and the versions the figures depend on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    except (ValueError, OSError, AttributeError):
        mem = "?"
    versions = []
    for name, dist in (("torch", "torch"), ("transformers", "transformers"), ("textworld", "textworld"),
                       ("scienceworld", "scienceworld"), ("alfworld", "alfworld"), ("faiss", "faiss-cpu"),
                       ("ray", "ray")):
        module = sys.modules.get(name)
        if module is not None:  # the installed distribution's version: alfworld has no __version__
            try:
                version = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                version = getattr(module, "__version__", "?")
            versions.append(f"{name} {version}")
    gpu = "no GPU"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    return (f"{os.cpu_count()} vCPUs ({cpu}), {mem} GiB RAM, {gpu}, {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}" + (f"; {', '.join(versions)}" if versions else ""))


def gold_path(env: Any, task_id: str) -> list[str]:
    """A task's walkthrough, cut where the (wrapped) env says the episode ended: the same
    actions for every side that replays it."""
    _, info = env.reset(options={"task_id": task_id, "walkthrough": True})
    plan = []
    for action in info["walkthrough"]:
        plan.append(action)
        if env.step(action)[2]:
            break
    return plan


def abba(round_index: int) -> bool:
    """Whether side A goes first in this round (A B B A A B B A ...)."""
    return round_index % 2 == 0


def spread(values: Sequence[float], digits: int = 2) -> str:
    """``median (min-max)``; one value is given alone."""
    if not values:
        return "n/a"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def ratio_spread(numerators: Sequence[float], denominators: Sequence[float], digits: int = 2) -> str:
    """The spread of per-round ratios (rounds paired: each ratio is of one round)."""
    return spread([n / d for n, d in zip(numerators, denominators, strict=True) if d], digits)


def emit(name: str, title: str, body: str, machine_line: str | None = None) -> Path:
    """Print a result section and keep it as ``benchmarks/sections/<name>.md``, or in
    ``$AP_GYM_SECTIONS`` when set: a smoke run at a reduced size (the suite's) must never
    overwrite a section RESULTS.md quotes."""
    directory = Path(os.environ["AP_GYM_SECTIONS"]) if os.environ.get("AP_GYM_SECTIONS") else RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(_ARGV[0]), *_ARGV[1:]])
    date = datetime.date.today().isoformat()
    body = re.sub(r"^## ", "### ", body, flags=re.M)  # a report's own headers sit under the section's
    text = (f"## {title} ({date})\n\n{body.rstrip()}\n\n"
            f"Command: `{command}`. Machine: {machine_line or machine()}.\n")
    path = directory / f"{name}.md"
    path.write_text(text)
    print("\n" + text, flush=True)
    return path


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a size of 0 once rewrote a section the
    README quotes with '0 seeds')."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a size: give at least 1")
    return value
