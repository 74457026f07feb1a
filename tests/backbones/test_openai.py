from __future__ import annotations

import json
import socket

import pytest

from ap_gym.backbones import GenerationConfig, OpenAIBackbone
from ap_gym.backbones.server import BackboneServer
from ap_gym.errors import BackboneError, PromptRejected

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
        OpenAIBackbone(url, model="m", retries=2, backoff_s=0.01).generate(MSGS)


def test_client_errors_are_not_retried(server):
    client = OpenAIBackbone(server.url, retries=5, backoff_s=5)
    with pytest.raises(BackboneError, match="HTTP 400"):
        client._request("POST", "/chat/completions", {"messages": "not a list"})


class Misbehaving:
    """A TCP server that answers every request badly: slowly, one byte a second, or never."""

    def __init__(self, mode: str) -> None:
        import threading

        self.mode, self.requests = mode, 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import threading
        import time

        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.requests += 1

            def answer(conn=conn) -> None:
                try:
                    conn.recv(65536)
                    if self.mode == "drip":
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
                        for _ in range(1000):
                            conn.sendall(b" ")
                            time.sleep(1.0)
                    else:  # silent
                        time.sleep(60)
                except OSError:
                    pass
                finally:
                    conn.close()

            threading.Thread(target=answer, daemon=True).start()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.mark.timeout(300)  # a hang guard: a per-read timeout alone would wait on the drip forever
@pytest.mark.parametrize("mode", ["drip", "silent"])
def test_an_overall_deadline_cuts_off_a_slow_or_silent_server(mode):
    bad = Misbehaving(mode)
    try:
        client = OpenAIBackbone(bad.url, model="m", deadline_s=1.5, retries=1, backoff_s=0.01)
        with pytest.raises(BackboneError, match=r"did not answer in 2 attempts of at most 1.5 s each .*not an outage.*raise the deadline"):
            client.generate(MSGS)
        assert bad.requests == 2
    finally:
        bad.close()


@pytest.mark.timeout(300)
def test_a_hanging_model_list_fails_fast_at_start():
    bad = Misbehaving("silent")
    try:  # the start-up check's own deadline (1 s), not a call's (120 s)
        with pytest.raises(BackboneError, match=r"/models did not answer in 2 attempts of at most 1 s each .*not an outage"):
            OpenAIBackbone(bad.url, check_deadline_s=1.0)
    finally:
        bad.close()


def test_a_server_that_cannot_score_is_refused_at_the_start(tiny_backbone):
    """A chat-only server: the run refuses at once and names the modes that work."""
    from fastapi import FastAPI

    from ap_gym.backbones.server import BackboneServer

    server = BackboneServer(tiny_backbone, port=0, model_name="chat-only")
    chat_only = FastAPI()
    for route in server.app.routes:
        if getattr(route, "path", "") in ("/v1/models", "/v1/chat/completions"):
            chat_only.router.routes.append(route)
    server.app = chat_only
    server._config.app = server._config.app.__class__(chat_only, 30.0, 1 << 20)
    server.start()
    try:
        client = OpenAIBackbone(server.url)
        assert client.check(scoring=False)["scoring"] is None
        with pytest.raises(BackboneError, match="cannot score candidate commands.*'generate' or 'react'"):
            client.check(scoring=True)
    finally:
        server.stop()


def test_timeout_s_of_older_scripts_sets_the_deadline_with_a_warning_and_a_typo_is_named():
    # a model name is given, so nothing is asked of the (absent) server
    with pytest.warns(DeprecationWarning, match="deadline_s"):
        client = OpenAIBackbone("http://127.0.0.1:9/v1", "m", timeout_s=3)
    assert client.options.deadline_s == 3
    with pytest.raises(TypeError, match="deadlin_s.*the serving options are .*deadline_s"):
        OpenAIBackbone("http://127.0.0.1:9/v1", "m", deadlin_s=3)


class Scripted:
    """A raw HTTP server that answers requests with the responses given, in order (the
    last one repeats): each ``(status, headers, body)``, or ``None`` to close the
    connection without answering (a fault)."""

    def __init__(self, responses: list) -> None:
        import threading

        self.responses, self.seen = list(responses), []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import time

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(65536).split(b"\r\n", 1)[0].decode()
                self.seen.append((time.monotonic(), head))
                answer = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
                if answer is None:
                    continue
                status, headers, body = answer
                body = body if isinstance(body, bytes) else json.dumps(body).encode()
                extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
                             f"{extra}\r\n".encode() + body)

    def close(self) -> None:
        self.sock.close()


MODELS = (200, {}, {"data": [{"id": "m"}]})


def test_retry_after_is_honoured_and_capped():
    server = Scripted([(429, {"Retry-After": "1"}, {"error": "slow down"}), MODELS])
    try:
        OpenAIBackbone(server.url, retries=2, backoff_s=0.01)
        (t0, _), (t1, _) = server.seen[:2]
        assert t1 - t0 >= 0.9  # waited as asked, not the 0.01 s backoff
    finally:
        server.close()
    server = Scripted([(503, {"Retry-After": "3600"}, {}), MODELS])
    try:
        OpenAIBackbone(server.url, retries=2, backoff_s=0.01, max_retry_after_s=0.5)
        (t0, _), (t1, _) = server.seen[:2]
        assert 0.4 <= t1 - t0 < 5  # an hour asked, the cap taken
    finally:
        server.close()


@pytest.mark.parametrize("fault", [(500, {}, {"error": "boom"}), (200, {}, b"{not json"), (200, {}, {"tokens": "abc"}),
                                   (404, {}, {"detail": "Not Found"})])
def test_the_scoring_probe_names_what_the_server_answered(fault):
    server = Scripted([MODELS, MODELS, fault])
    try:
        client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01, check_deadline_s=2)
        with pytest.raises(BackboneError) as e:
            client.check(scoring=True)
        text = str(e.value)
        assert "/tokenize" in text or "failed after" in text
        if fault[0] == 404:
            assert "Not Found" in text and "'generate' or 'react'" in text
    finally:
        server.close()


def test_an_outage_during_the_probe_is_not_taken_for_a_verdict():
    """Down during the start-up probe (connections closed), then back: the next check
    probes again instead of keeping 'cannot score'."""
    tokens = (200, {}, {"tokens": [5, 6]})
    logprobs = (200, {}, {"choices": [{"index": 0, "prompt_logprobs": [None, {"6": {"logprob": -1.0}},
                                                                          {"5": {"logprob": -2.0}},
                                                                          {"6": {"logprob": -0.5}}]}]})
    server = Scripted([MODELS, MODELS, None, None, MODELS, tokens, logprobs])
    try:
        client = OpenAIBackbone(server.url, retries=1, backoff_s=0.01, check_deadline_s=2)
        with pytest.raises(BackboneError, match="failed after 2 attempts"):
            client.check(scoring=True)
        assert client.check(scoring=True)["scoring"] == "prompt_logprobs"
    finally:
        server.close()


def test_nan_scores_from_a_server_are_an_infrastructure_failure():
    tokens = (200, {}, {"tokens": [5]})
    nan = (200, {}, b'{"choices": [{"index": 0, "prompt_logprobs": [null, {"5": {"logprob": NaN}}]}]}')
    server = Scripted([MODELS, tokens, tokens, nan])  # the prompt, the candidate, then the scores
    try:
        client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01)
        client._scoring = "prompt_logprobs"
        with pytest.raises(BackboneError, match="log-probability of nan"):
            client.score(MSGS, ["look"])
    finally:
        server.close()


def test_a_key_goes_only_to_https_or_loopback(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.delenv("AP_GYM_API_KEY", raising=False)
    with pytest.warns(UserWarning, match="not sending"):
        remote = OpenAIBackbone("http://203.0.113.5:8000/v1", "m")
    assert "authorization" not in remote._client.headers
    assert OpenAIBackbone("https://203.0.113.5/v1", "m")._client.headers["authorization"] == "Bearer sk-secret"
    assert OpenAIBackbone("http://127.0.0.2:8000/v1", "m")._client.headers["authorization"] == "Bearer sk-secret"
    with pytest.raises(BackboneError, match="clear text"):
        OpenAIBackbone("http://203.0.113.5:8000/v1", "m", api_key="sk-mine")
    allowed = OpenAIBackbone("http://203.0.113.5:8000/v1", "m", api_key="sk-mine", insecure_credentials=True)
    assert allowed._client.headers["authorization"] == "Bearer sk-mine"


def _chat(text, logprobs=(-0.5, -0.25)):
    return (200, {}, {"choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop",
                                   "logprobs": {"content": [{"token": "t", "logprob": v} for v in logprobs]}}],
                      "usage": {"prompt_tokens": 30, "completion_tokens": 2}})


def test_a_constrained_choice_is_named_and_its_post_mask_value_is_no_log_likelihood():
    """Greedy decoding under a choice grammar runs only when asked for by name; what it
    reports is a log-probability after the mask, kept as masked_logprob, never as a
    candidate's log-likelihood."""
    from ap_gym.policies.react import ReActAgent

    server = Scripted([MODELS, _chat("zq-apgym-probe-two"), _chat("open door")])
    try:
        client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01)
        assert client.supports_choice()
        agent = ReActAgent(client, {"choose_method": "constrained"}, seed=0)
        info = {"task_id": "t/1", "instruction": "leave", "admissible_commands": ["go north", "open door"]}
        agent.begin("A door.", info)
        assert agent.act("A door.", info) == "open door"
        trace = agent.trace()
        assert trace.info["choice_method"] == "constrained" and trace.steps[-1].reduction == "constrained"
        assert trace.steps[-1].candidates is None and trace.steps[-1].masked_logprob == -0.75
        assert len(server.seen) == 3  # models, the probe, one request for the step
    finally:
        server.close()


def test_a_server_that_ignores_the_choice_is_not_trusted_with_it():
    server = Scripted([MODELS, _chat("Sure! Here is a free answer.")])
    try:
        client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01)
        assert not client.supports_choice()
    finally:
        server.close()
    server = Scripted([MODELS, _chat("dance wildly")])
    try:
        client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01)
        with pytest.raises(BackboneError, match="not one of the 2 choices"):
            client.choose(MSGS, ["go north", "open door"])
    finally:
        server.close()


VLLM_TOO_LONG = (400, {}, {"object": "error", "message": "This model's maximum context length is 4096 tokens. However, "
                           "you requested 9000 tokens (200 in the messages, 8800 in the completion).", "code": 400})


@pytest.mark.parametrize(("answers", "outcome"), [
    # the prompt fits; max_tokens is the misconfiguration: an infrastructure failure
    ([(200, {}, {"data": [{"id": "m", "max_model_len": 4096}]}), VLLM_TOO_LONG,
      (200, {}, {"data": [{"id": "m", "max_model_len": 4096}]}), (200, {}, {"tokens": [1] * 200})], BackboneError),
    # a wrong parameter whose wording mentions a length and "context"
    ([(200, {}, {"data": [{"id": "m", "max_model_len": 4096}]}),
      (400, {}, {"message": "unknown parameter 'context_length_penalty' (max length 64)"}),
      (200, {}, {"data": [{"id": "m", "max_model_len": 4096}]}), (200, {}, {"tokens": [1] * 200})], BackboneError),
    # a rate limit on input tokens
    ([(200, {}, {"data": [{"id": "m", "max_model_len": 4096}]}),
      (422, {}, {"message": "rate limit: too many input tokens per minute"}),
      (200, {}, {"data": [{"id": "m", "max_model_len": 4096}]}), (200, {}, {"tokens": [1] * 30})], BackboneError),
    # the server declares no context: whether the prompt was at fault cannot be told
    ([MODELS, VLLM_TOO_LONG, MODELS], BackboneError),
    # the prompt itself overflows the declared context: the method's failure
    ([(200, {}, {"data": [{"id": "m", "max_model_len": 4096}]}), VLLM_TOO_LONG,
      (200, {}, {"data": [{"id": "m", "max_model_len": 4096}]}), (200, {}, {"tokens": [1] * 4090})], PromptRejected),
])
def test_a_refusal_is_the_prompts_fault_only_when_the_prompt_did_not_fit(answers, outcome):
    """Issue 42 item 1: the 'prompt at fault' test was a regex over the error text, so a
    max_tokens that fits no prompt, a parameter or model name mentioning a length, a rate
    limit on input tokens were filed as the method's failure: a misconfigured server made a
    whole run 'success 0.0, 0 infrastructure failures'."""
    server = Scripted(answers)
    try:
        client = OpenAIBackbone(server.url, retries=0, backoff_s=0.01)
        with pytest.raises(outcome) as raised:
            client.generate(MSGS, GenerationConfig(max_new_tokens=64))
        assert type(raised.value) is outcome  # PromptRejected is no BackboneError, nor the reverse
    finally:
        server.close()
