"""Shared fixtures. Tests never touch a hub: HF_HUB_OFFLINE is forced on."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under ``pytest -n N`` the test processes share the cores: each takes its share of torch
# threads (its subprocesses, CLI runs and workers inherit it through the environment).
# Two processes with two threads each on two cores ran tiny-model tests ~10x slower than
# with one each: OpenMP threads spin waiting for a core the other process holds.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "").isdigit():
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1)
                                                     // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import gymnasium as gym  # noqa: E402
import pytest  # noqa: E402

import ap_gym  # noqa: E402, F401


@pytest.fixture(scope="session")
def sw_env():
    """One ScienceWorld env (one JVM) shared by the tests that only read from it."""
    env = gym.make("ap_gym/ScienceWorld-v0", split="test", max_episode_steps=10_000)
    yield env
    env.close()


@pytest.fixture(scope="session")
def tw_env():
    env = gym.make("ap_gym/TextWorld-v0", split="test", max_episode_steps=1000)
    yield env
    env.close()


@pytest.fixture(scope="session")
def tiny_backbone():
    """A tiny random-weight Llama behind the real TransformersBackbone (ms to build)."""
    from ap_gym.backbones import make_backbone

    return make_backbone("tiny")


@pytest.fixture(scope="session")
def default_backbone():
    """The packaged SmolLM2-135M-Instruct (converted once to safetensors in the cache)."""
    from ap_gym.backbones import TransformersBackbone

    return TransformersBackbone()


@pytest.fixture(scope="session")
def embedder():
    from ap_gym.backbones import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def pytest_collection_modifyitems(config, items):
    """Files with slow or real-server tests first, each file's tests in their own order.

    ``make test`` hands whole files to two processes (``-n 2 --dist loadfile``) in collection
    order: with the long files first, the run ends on short ones instead of one process
    finishing a long file while the other waits (the longest-first rule).
    """
    heavy = {item.path for item in items if item.get_closest_marker("slow") or item.get_closest_marker("vllm")}
    items.sort(key=lambda item: item.path not in heavy)
