"""`make demo`, part by part, from an empty cache: the README's first command timed.

The parts are read from the Makefile's ``demo`` target (so this never times a demo the
Makefile no longer runs) and run in order, each as its own process, in a fresh directory
with an empty ``AP_GYM_CACHE`` shared by the parts (the first one converts the packaged
GGUF and generates the games; later parts find them, as on a user's first run). The venv
is this one (installing is not timed). ``results/train`` is linked in when ``--trained``
names a directory that holds a trained agent, so the demo's last part plays it; without
one that part only prints the command that trains one, as on a fresh machine. Wall clock
per part, the peak resident memory of the part's process tree, and the total against the
target (10 minutes on a quiet 2-core machine).

    python benchmarks/demo_time.py [--trained results/train]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._bench import emit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 600.0


def demo_parts(makefile: Path = ROOT / "Makefile") -> list[list[str]]:
    """The ``demo`` target's commands, as argument lists for this venv's executables."""
    lines = makefile.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^demo\s*:", line))
    parts = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        words = shlex.split(line.strip())
        words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]  # HF_HUB_OFFLINE=1: set below for every part
        parts.append([w.replace("$(BIN)/", str(Path(sys.executable).parent) + "/") for w in words])
    if not parts:
        raise SystemExit(f"{makefile} has no demo target with commands")
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = ROOT / "results" / "train"
    parser.add_argument("--trained", type=Path, default=default if default.is_dir() else None,
                        help="a results/train to link in, so the demo's trained part plays it (default: this "
                             "checkout's, when it has one)")
    parser.add_argument("--limit", type=float, default=3600.0, help="seconds before a part counts as hung")
    args = parser.parse_args()
    parts = demo_parts()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ap-gym-demo-") as tmp:
        work = Path(tmp) / "work"
        (work / "benchmarks").mkdir(parents=True)
        (work / "benchmarks" / "smoke.yaml").write_text((ROOT / "benchmarks" / "smoke.yaml").read_text())
        if args.trained is not None:
            (work / "results").mkdir()
            os.symlink(args.trained.resolve(), work / "results" / "train")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "AP_GYM_CACHE": str(Path(tmp) / "cache"), "PYTHONPATH": str(ROOT)}
        env.pop("AP_GYM_SECTIONS", None)
        for argv in parts:
            name = " ".join(a.rsplit("/", 1)[-1] if a.startswith("/") else a for a in argv)
            print(f"[demo_time] {name}", flush=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            t = time.perf_counter()
            try:
                rc = subprocess.run(argv, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, timeout=args.limit).returncode
            except subprocess.TimeoutExpired:
                rc = "hung"
            seconds = time.perf_counter() - t
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            rows.append((name, seconds, rc, max(peak, before) / 1024))
            print(f"[demo_time]   {seconds:.0f} s, exit {rc}", flush=True)
    total = sum(s for _, s, _, _ in rows)
    load = os.getloadavg()[0]
    lines = ["Each part of the Makefile's `demo` target, in order, in a fresh directory with an empty `AP_GYM_CACHE` "
             "(the venv installed beforehand, not timed): wall clock, exit status, and the largest resident memory "
             "of any process so far.", "",
             "| part | wall clock | exit | peak RSS so far (MB) |", "|---|---|---|---|"]
    lines += [f"| `{n}` | {s // 60:.0f} min {s % 60:.0f} s | {rc} | {mb:.0f} |" for n, s, rc, mb in rows]
    ok = all(rc == 0 for _, _, rc, _ in rows)
    lines += ["", f"Total **{total // 60:.0f} min {total % 60:.0f} s** against the target of 10 minutes: "
              f"{'met' if total <= TARGET_S and ok else 'not met'}. The trained part "
              + (f"played the agent in `{args.trained}` (linked in as results/train)." if args.trained is not None
                 else "found no trained agent and printed the command that trains one, as on a fresh machine.")
              + f" Load average when it ended: {load:.1f}."]
    emit("demo", "`demo_time.py`: `make demo` part by part from an empty cache", "\n".join(lines))
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
