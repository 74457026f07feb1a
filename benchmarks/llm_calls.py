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
import time

from ap_gym.protocol import RunConfig, load_episodes, run, summarise

DESIGNS = ["no_memory", "trajectory", "abstraction", "joint", "reflexion", "autorefine", "anti_persistence"]


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
    print(f"\n{args.benchmark}, backbone {args.backbone}: {args.iterations} iterations x {args.train} training "
          f"tasks, {args.heldout} held-out tasks, at most {args.max_steps} steps ({time.perf_counter() - t:.0f} s)")
    print(f"{'design':18} {'iter':>4} {'LLM calls':>9} {'acting':>7} {'synthesis':>9} {'steps':>6} {'success':>7}")
    settings = summarise(run_dir)["settings"]
    for design in DESIGNS:
        for entry in settings[f"{args.benchmark}/{design}/seed0"]:
            print(f"{design:18} {entry['iteration']:>4} {entry['mean_llm_calls']:>9.2f} "
                  f"{entry['mean_acting_calls']:>7.2f} {entry['mean_synthesis_calls']:>9.2f} "
                  f"{entry['mean_steps']:>6.2f} {entry['success_rate']:>7.3f}")
    # Not the spec's metric, but where the designs differ: what memory costs while it is built.
    print("\ntraining episodes (memory being built), mean per task:")
    print(f"{'design':18} {'LLM calls':>9} {'acting':>7} {'synthesis':>9} {'embeddings':>10}")
    lines = [x for x in load_episodes(run_dir) if x["phase"] == "train"]
    for design in DESIGNS:
        eps = [x for x in lines if x["policy"] == design]
        if not eps:
            print(f"{design:18} {'(stateless: no training episodes)':>40}")
            continue
        n = len(eps)
        acting = sum(x["usage"]["calls"].get("acting", 0) for x in eps) / n
        total = sum(x["usage"]["llm_calls"] for x in eps) / n
        embeddings = sum(x["usage"].get("embedding_calls", 0) for x in eps) / n
        print(f"{design:18} {total:>9.2f} {acting:>7.2f} {total - acting:>9.2f} {embeddings:>10.2f}")
    print(f"results: {run_dir}")


if __name__ == "__main__":
    main()
