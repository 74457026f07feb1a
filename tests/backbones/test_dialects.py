"""The served backbone's dialect seam (issue 49 item 5): what an engine offers beyond chat
completions is declared by one class, and a second dialect is that one class. Shown against
a real ``ap-gym serve`` with a tiny model."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from ap_gym.backbones import GenerationConfig, OpenAIBackbone
from ap_gym.backbones.dialects import DIALECTS, VLLMDialect, get_dialect, register_dialect
from ap_gym.backbones.server import BackboneServer
from ap_gym.errors import BackboneError

MSGS = [{"role": "system", "content": "you are an agent"}, {"role": "user", "content": "go north look take apple"}]
CANDIDATES = ["go north", "look", "take apple from table"]


@pytest.fixture(scope="module")
def server(tiny_backbone):
    srv = BackboneServer(tiny_backbone, port=0, model_name="tiny", max_tokens_cap=64).start()
    yield srv
    srv.stop()


def _paths(client: OpenAIBackbone) -> list[str]:
    """Every path the client sends from now on (an httpx hook on its own transport)."""
    seen: list[str] = []
    client._client.event_hooks["request"].append(lambda request: seen.append(request.url.path))
    return seen


def test_the_plain_openai_dialect_generates_and_asks_nothing_it_lacks(server):
    client = OpenAIBackbone(server.url, dialect="openai")
    paths = _paths(client)
    text = client.generate(MSGS, GenerationConfig(max_new_tokens=4)).text
    assert isinstance(text, str)
    with pytest.raises(BackboneError, match="openai dialect.*'generate' or 'react'"):
        client.check(scoring=True)
    assert client.scoring_method() is None and not client.supports_choice() and not client.supports_search()
    # chat completions and the model list only: no /tokenize, no /v1/completions, no probe
    assert set(paths) <= {"/v1/chat/completions", "/v1/models"}, paths
    assert client.describe()["dialect"] == "openai"
    assert client.check(scoring=False)["scoring"] is None  # a generate/react run starts


def test_the_same_server_scores_under_the_vllm_dialect(server, tiny_backbone):
    client = OpenAIBackbone(server.url)  # the default: vLLM's wire format, which ap-gym serve speaks
    assert client.dialect.name == "vllm"
    assert client.check(scoring=True)["scoring"] == "prompt_logprobs"
    assert list(client.score(MSGS, CANDIDATES).values) == pytest.approx(
        list(tiny_backbone.score(MSGS, CANDIDATES).values), abs=1e-4)


def test_a_new_engine_is_one_class(server, tiny_backbone):
    """An engine that scores only by the legacy echo route: one subclass, registered, chosen by
    name from the serving options, and the scores are the in-process model's."""

    class EchoOnly(VLLMDialect):
        name: ClassVar[str] = "echo-only-test"
        scoring: ClassVar[tuple[str, ...]] = ("echo",)
        choice: ClassVar[bool] = False
        next_token_ids: ClassVar[bool] = False

    register_dialect(EchoOnly)
    try:
        client = OpenAIBackbone(server.url, dialect="echo-only-test")
        paths = _paths(client)
        assert client.check(scoring=True) == {"model": "tiny", "scoring": "echo", "search": False, "choice": False}
        assert list(client.score(MSGS, CANDIDATES, "mean").values) == pytest.approx(
            list(tiny_backbone.score(MSGS, CANDIDATES, "mean").values), abs=1e-4)
        assert "/v1/chat/completions" not in paths  # no choice probe: the class says it has none
        from ap_gym.backbones.openai import ServingOptions

        assert OpenAIBackbone(server.url, options=ServingOptions(dialect="echo-only-test")).dialect.name == \
            "echo-only-test"
    finally:
        DIALECTS.pop("echo-only-test", None)


def test_an_unknown_dialect_is_refused_with_the_known_ones():
    with pytest.raises(BackboneError, match="unknown server dialect 'sglang'.*openai, vllm"):
        get_dialect("sglang")
    with pytest.raises(TypeError):
        register_dialect(dict)  # type: ignore[arg-type]  # the refusal is the subject

    class Unnamed(VLLMDialect):
        name: ClassVar[str] = "vllm"

    with pytest.raises(ValueError, match="already registered"):
        register_dialect(Unnamed)


def test_a_malformed_answer_is_the_servers_fault_quoted(server):
    """A dialect's reader that finds no field raises; the backbone names the route and quotes."""

    class Wrong(VLLMDialect):
        name: ClassVar[str] = "wrong-field-test"

        def read_scoring(self, choice: Any, ids: Any, method: str) -> list[float | None]:
            return [None] + [float(e[str(t)]["logprob"]) for e, t in zip(choice["no_such_field"], ids, strict=True)]

    client = OpenAIBackbone(server.url, dialect=Wrong())
    with pytest.raises(BackboneError, match="answered no prompt_logprobs"):
        client._prompt_logprobs([[1, 2, 3]], "prompt_logprobs")
