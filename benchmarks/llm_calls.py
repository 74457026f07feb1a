"""Mean LLM calls per held-out task for every memory design, on the same tasks and backbone.

Runs the paper's protocol for every registered memory design (and the no-memory agent)
with one configuration: the same training sample (fixed by seed and iteration), the same
held-out tasks, the same backbone and embedder. Prints, per design and per iteration,
the held-out means the spec defines: LLM calls (acting + synthesis), acting calls,
synthesis calls, trajectory length and success. Nothing is tuned: what the designs do
with a small model is what is counted.

    python benchmarks/llm_calls.py [--backbone tiny|default] [--benchmark textworld] \\
        [--iterations 2] [--train 8] [--heldout 8] [--max-steps 15] [--out results]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ap_gym.protocol import RunConfig, load_headers, run, summarise

DESIGNS = ["no_memory", "trajectory", "abstraction", "joint", "reflexion", "autorefine", "anti_persistence"]


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._bench import emit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="tiny")
    parser.add_argument("--benchmark", default="textworld")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--train", type=int, default=8)
    parser.add_argument("--heldout", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default="results")
    args = parser.parse_args()
    config = RunConfig.from_dict({
        "name": f"llm_calls-{args.benchmark}-{args.backbone}", "benchmarks": [args.benchmark],
        "backbone": args.backbone, "policies": DESIGNS, "iterations": args.iterations,
        "train_per_iter": args.train, "heldout": args.heldout, "max_steps": args.max_steps,
        "workers": args.workers, "out": args.out,
    })
    t = time.perf_counter()
    run_dir = run(config)
    out = [f"{args.benchmark}, backbone `{args.backbone}`: {args.iterations} iterations x {args.train} training tasks, "
           f"{args.heldout} held-out tasks, at most {args.max_steps} steps ({time.perf_counter() - t:.0f} s). LLM calls "
           "per held-out task as the spec defines them (acting plus synthesis, reflection and maintenance).", "",
           "| design | iteration | LLM calls | acting | synthesis | steps | success |", "|---|---|---|---|---|---|---|"]
    settings = summarise(run_dir)["settings"]
    for design in DESIGNS:
        for entry in settings[f"{args.benchmark}/{design}/seed0"]:
            out.append(f"| {design} | {entry['iteration']} | {entry['mean_llm_calls']:.2f} | "
                       f"{entry['mean_acting_calls']:.2f} | {entry['mean_synthesis_calls']:.2f} | "
                       f"{entry['mean_steps']:.2f} | {entry['success_rate']:.3f} |")
    # Not the spec's metric, but where the designs differ: what memory costs while it is built.
    out += ["", "Training episodes (memory being built), mean per task (not the spec's metric):", "",
            "| design | LLM calls | acting | synthesis | embeddings |", "|---|---|---|---|---|"]
    lines = [h for h in load_headers(run_dir) if h.phase == "train"]
    for design in DESIGNS:
        eps = [h for h in lines if h.policy == design]
        if not eps:
            out.append(f"| {design} | stateless: no training episodes | | | |")
            continue
        n = len(eps)
        acting = sum(h.usage.calls_for("acting") for h in eps) / n
        total = sum(h.usage.llm_calls for h in eps) / n
        embeddings = sum(h.usage.embedding_calls for h in eps) / n
        out.append(f"| {design} | {total:.2f} | {acting:.2f} | {total - acting:.2f} | {embeddings:.2f} |")
    emit("llm_calls", "`llm_calls.py`: LLM calls per held-out task, every memory design", "\n".join(out))
    print(f"results: {run_dir}")

if __name__ == "__main__":
    main()
