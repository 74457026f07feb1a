"""``ap-gym serve`` speaks vLLM's standard routes, refuses bad requests with 4xx, and keeps
episodes' KV caches apart."""

from __future__ import annotations

import httpx
import pytest

from ap_gym.backbones import GenerationConfig, OpenAIBackbone
from ap_gym.backbones.server import BackboneServer

MSGS = [{"role": "system", "content": "you are an agent"}, {"role": "user", "content": "go north look take apple"}]


@pytest.fixture(scope="module")
def server(tiny_backbone, embedder):
    srv = BackboneServer(tiny_backbone, port=0, model_name="tiny", embedder=embedder, max_tokens_cap=64).start()
    yield srv
    srv.stop()


def post(server, path, body, **kw):
    root = server.url[:-3] if path == "/tokenize" else server.url
    return httpx.post(root + path, json=body, timeout=30, **kw)


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/chat/completions", ["not", "an", "object"], 400, "body"),
    ("/chat/completions", "a string", 400, "body"),
    ("/chat/completions", {"messages": [{"role": "user"}]}, 400, "content"),
    ("/chat/completions", {"messages": MSGS, "seed": "abc"}, 400, "seed"),
    ("/chat/completions", {"messages": MSGS, "max_tokens": 0}, 400, "max_tokens"),
    ("/chat/completions", {"messages": MSGS, "max_tokens": -5}, 400, "max_tokens"),
    ("/chat/completions", {"messages": MSGS, "max_tokens": 65}, 400, "cap of 64"),
    ("/chat/completions", {"messages": []}, 400, "messages"),
    ("/chat/completions", {"messages": MSGS, "stream": True}, 400, "streaming"),
    ("/completions", {"prompt": [[1, 2], []], "prompt_logprobs": 0}, 400, "empty prompt"),
    ("/completions", {"prompt": [5] * 9000, "max_tokens": 1}, 400, "context"),
    ("/tokenize", {}, 400, "prompt or messages"),
    ("/embeddings", {"input": 3}, 400, "input"),
])
def test_client_errors_are_answered_4xx(server, path, body, status, message):
    response = post(server, path, body)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"]


@pytest.fixture(scope="module")
def default_server(tiny_backbone):
    """Built with only what every version of the server took, so its limits are the defaults
    (and the test below also runs against the server from before issue 15's fixes)."""
    srv = BackboneServer(tiny_backbone, port=0, model_name="tiny").start()
    yield srv
    srv.stop()


@pytest.mark.parametrize(("body", "message"), [
    (["not", "an", "object"], "body"),
    ("a string", "body"),
    ({"messages": [{"role": "user"}]}, "content"),
    ({"messages": MSGS, "seed": "abc"}, "seed"),
    ({"messages": MSGS, "max_tokens": 0}, "max_tokens"),
    ({"messages": MSGS, "max_tokens": -5}, "max_tokens"),
    ({"messages": MSGS, "max_tokens": 8000}, "cap of 1024"),
])
def test_a_server_with_its_default_limits_answers_bad_chat_requests_400(default_server, body, message):
    """Issue 15 items 7 and 12: these were answered 500 (so clients retried them), generated
    256 tokens for ``max_tokens: 0``, or held the model for minutes (8000 tokens, no cap)."""
    response = post(default_server, "/chat/completions", body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]


def test_standard_routes_score_like_the_backbone_in_process(server, tiny_backbone):
    client = OpenAIBackbone(server.url)
    assert client.check(scoring=True) == {"model": "tiny", "scoring": "prompt_logprobs", "search": False,
                                          "choice": False}
    candidates = ["go north", "look", "take apple from table"]
    remote, local = client.score(MSGS, candidates), tiny_backbone.score(MSGS, candidates)
    assert list(remote.values) == pytest.approx(list(local.values), abs=1e-4)
    assert (remote.prompt_tokens, remote.candidate_tokens) == (local.prompt_tokens, local.candidate_tokens)
    client._scoring = "echo"  # the legacy route gives the same scores
    assert list(client.score(MSGS, candidates, "mean").values) == \
        pytest.approx(list(tiny_backbone.score(MSGS, candidates, "mean").values), abs=1e-4)
    tokens = post(server, "/tokenize", {"messages": MSGS, "add_generation_prompt": True}).json()["tokens"]
    assert tokens == tiny_backbone.tokenizer(tiny_backbone.render(MSGS), add_special_tokens=False)["input_ids"]


def test_sessions_keep_kv_caches_apart(server, tiny_backbone):
    config = GenerationConfig(max_new_tokens=6)
    alone = tiny_backbone.generate(MSGS, config).text
    a, b = OpenAIBackbone(server.url), OpenAIBackbone(server.url)
    other = [MSGS[0], {"role": "user", "content": "open door box key"}]
    for _ in range(2):  # interleaved episodes of two clients give what each gives alone
        assert a.generate(MSGS, config).text == alone
        b.generate(other, config)
    a.reset_cache()
    assert a.session != b.session


def test_embeddings_route_and_served_embedder(server, embedder):
    from ap_gym.backbones.embedders import OpenAIEmbedder

    served = OpenAIEmbedder(server.url)
    assert served.dim == embedder.dim
    texts = ["take the apple", "go north"]
    assert served.embed(texts) == pytest.approx(embedder.embed(texts), abs=1e-5)


def test_an_api_key_is_required_beyond_loopback(tiny_backbone):
    with pytest.raises(ValueError, match="--api-key"):
        BackboneServer(tiny_backbone, host="0.0.0.0", port=0)
    keyed = BackboneServer(tiny_backbone, port=0, api_key="s3cret").start()
    try:
        assert httpx.get(keyed.url + "/models").status_code == 401
        assert httpx.get(keyed.url + "/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert OpenAIBackbone(keyed.url, api_key="s3cret").model
    finally:
        keyed.stop()


def test_a_body_that_never_arrives_is_answered_408(tiny_backbone):
    import socket

    slow = BackboneServer(tiny_backbone, port=0, body_timeout_s=1.0).start()
    try:
        host, port = slow.url.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"messages\": ")
            answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408")
        assert httpx.get(slow.url + "/models").status_code == 200  # the server goes on
    finally:
        slow.stop()


def test_requests_without_a_session_share_no_cache(server, tiny_backbone):
    config = {"messages": MSGS, "max_tokens": 6}
    alone = tiny_backbone.generate(MSGS, GenerationConfig(max_new_tokens=6)).text
    before = dict(tiny_backbone.stats)
    for _ in range(2):
        assert post(server, "/chat/completions", config).json()["choices"][0]["message"]["content"] == alone
    assert tiny_backbone.stats["reused_tokens"] == before["reused_tokens"]  # each computed its prompt whole
