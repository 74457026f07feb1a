from __future__ import annotations

import socket

import pytest

from ap_gym.backbones import GenerationConfig, OpenAIBackbone
from ap_gym.backbones.server import BackboneServer
from ap_gym.errors import BackboneError

MSGS = [{"role": "system", "content": "you are an agent"}, {"role": "user", "content": "go north look take apple"}]


@pytest.fixture()
def server(tiny_backbone):
    srv = BackboneServer(tiny_backbone, port=0, model_name="tiny").start()
    yield srv
    srv.stop()


def test_served_greedy_text_equals_in_process(server, tiny_backbone):
    client = OpenAIBackbone(server.url)
    assert client.model == "tiny"
    config = GenerationConfig(max_new_tokens=8)
    remote = client.generate(MSGS, config)
    local = tiny_backbone.generate(MSGS, config)
    assert remote.text == local.text
    assert (remote.prompt_tokens, remote.completion_tokens) == (local.prompt_tokens, local.completion_tokens)
    assert [c.text for c in client.generate_batch([MSGS, MSGS], config)] == [local.text] * 2
    candidates = ["look", "go north"]
    remote_scores, local_scores = client.score(MSGS, candidates), tiny_backbone.score(MSGS, candidates)
    assert list(remote_scores.values) == pytest.approx(list(local_scores.values), abs=1e-5)
    # served scoring counts its tokens as in-process scoring does
    assert remote_scores.tokens == local_scores.tokens > 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_raises_backbone_error_after_retries():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(BackboneError, match="after 3 attempts"):
        OpenAIBackbone(url, model="m", max_retries=2, backoff_s=0.01).generate(MSGS)


def test_client_errors_are_not_retried(server):
    client = OpenAIBackbone(server.url, max_retries=5, backoff_s=5)
    with pytest.raises(BackboneError, match="HTTP 400"):
        client._request("POST", "/chat/completions", {"messages": "not a list"})
