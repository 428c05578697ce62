"""The ``mistral-conversations`` adapter against a local server: the URL and key, errors
that name what is missing, retries, abort within 50 ms, usage and cost, and pi-ai's
nine-character tool-call ids. The request bodies and events against pi-ai's own adapter:
tests/reference/test_wire_mistral.py.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest

from piagent import AbortController
from piagent.messages import UserMessage
from piagent.models import Model, ModelCost
from piagent.providers import get_model, stream_simple
from piagent.providers.mistral import mistral_tool_call_id, short_hash, stream_mistral
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, ScriptedServer, Stall, sse

API = "mistral-conversations"
KEY = "mistral-SECRET-key-0123456789"


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    return sse({"id": "c1", "choices": [{"index": 0, "delta": delta,
                                         "finish_reason": finish}], **extra})


def _events(text: str = "hi", usage: dict[str, Any] | None = None) -> list[bytes]:
    return [_chunk({"role": "assistant", "content": text}),
            _chunk({"content": ""}, "stop", usage=usage or {
                "prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}),
            b"data: [DONE]\n\n"]


def _model(server: ScriptedServer, **fields: Any) -> Model:
    fields.setdefault("cost", ModelCost(2.0, 6.0, 0.2, 0.0))
    return Model(id="mistral-large-2512", api=API, provider="mistral", base_url=server.url,
                 **fields)


def _context() -> Context:
    return Context([UserMessage(content="Hello")])


def test_url_key_and_body(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=_events()))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(
        WAIT)
    assert (message.stop_reason, message.text, message.api) == ("stop", "hi", API)
    request = sse_server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.json == {"model": "mistral-large-2512", "stream": True, "max_tokens": 16384,
                            "messages": [{"role": "user", "content": "Hello"}]}


def test_catalogue_serves_mistral() -> None:
    model = get_model("mistral", "mistral-large-latest")
    assert (model.api, model.base_url) == (API, "https://api.mistral.ai")


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                        sse_server: ScriptedServer) -> None:
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    message = stream_mistral(_model(sse_server), _context(), StreamOptions()).result(WAIT)
    assert message.error_message == (
        "No API key for provider: mistral. Pass StreamOptions(api_key=...) or set "
        "MISTRAL_API_KEY (looked for in StreamOptions.env and the environment).")
    assert sse_server.requests == []


def test_key_from_env_is_redacted_from_errors(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(status=401, content_type="application/json",
                         body=[b'{"message":"Unauthorized key env-SECRET-m"}']))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(
        env={"MISTRAL_API_KEY": "env-SECRET-m"})).result(WAIT)
    assert message.stop_reason == "error"
    assert "env-SECRET-m" not in message.error_message
    assert message.error_message.startswith("Mistral API error (401)")
    assert len(sse_server.requests) == 1  # a 401 is not retried


def test_429_is_retried_then_succeeds(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(status=429, headers={"retry-after-ms": "1"},
                         content_type="application/json",
                         body=[b'{"message":"Requests rate limit exceeded"}']),
                   Reply(body=_events("ok")))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(
        WAIT)
    assert message.text == "ok"
    assert len(sse_server.requests) == 2


def test_usage_and_cost_with_cached_tokens(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=_events(usage={
        "prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
        "prompt_tokens_details": {"cached_tokens": 800}})))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(
        WAIT)
    usage = message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.total_tokens) == (
        200, 50, 800, 1050)
    assert usage.cost.total == pytest.approx((200 * 2.0 + 50 * 6.0 + 800 * 0.2) / 1e6)


def test_typed_thinking_and_text_parts(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=[
        _chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Hm"}]}]}),
        _chunk({"content": [{"type": "text", "text": "Yes"}]}),
        *_events("!")[0:]]))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(
        WAIT)
    assert [type(b).__name__ for b in message.content] == ["ThinkingContent", "TextContent"]
    assert (message.content[0].thinking, message.text) == ("Hm", "Yes!")


def test_a_chunk_without_choices_fails_the_stream(sse_server: ScriptedServer) -> None:
    sse_server.add(Reply(body=[sse({"object": "error", "message": "boom"})]))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(
        WAIT)
    assert (message.stop_reason, message.error_message) == (
        "error", "Invalid Mistral streaming event")


def test_abort_mid_stream_ends_within_50_ms(sse_server: ScriptedServer,
                                            no_piagent_threads: Any) -> None:
    """Measured five times: the median from ``abort()`` to the last event is under 50 ms."""
    elapsed = []
    for _ in range(5):
        stall = Stall()
        events = _events("partial")
        sse_server.add(Reply(body=[events[0], stall, *events[1:]]))
        controller = AbortController()
        stream = stream_simple(_model(sse_server), _context(),
                               StreamOptions(api_key=KEY, signal=controller.signal))
        it = iter(stream)
        assert [next(it).type for _ in range(3)] == ["start", "text_start", "text_delta"]
        assert stall.reached.wait(WAIT)
        started = time.monotonic()
        controller.abort()
        rest = [e.type for e in it]
        elapsed.append(time.monotonic() - started)
        message = stream.result(WAIT)
        assert rest == ["error"]
        assert (message.stop_reason, message.text) == ("aborted", "partial")
    assert statistics.median(elapsed) < 0.05, elapsed


@pytest.mark.parametrize(("text", "expected"), [
    # pi-ai 1.6.1's shortHash of the same strings (node, utils/hash.js)
    ("call_abc|fc_123", "jp01dsxufnom"), ("toolcall:0", "1nlso9v7di2pi"),
    ("x", "evpdwv6p0anp"), ("héllo😀", "1olj6nu1frhbfw"), ("", "k4n83c7h0j2b"),
])
def test_short_hash_is_pi_ai_s(text: str, expected: str) -> None:
    assert short_hash(text) == expected


def test_tool_call_ids_are_nine_letters_and_digits() -> None:
    assert mistral_tool_call_id("aB3dE5gH7") == "aB3dE5gH7"  # already Mistral's: kept
    assert mistral_tool_call_id("a-B3_dE5gH7") == "aB3dE5gH7"  # stripped to nine
    # else pi-ai's shortHash of the letters and digits, cut to nine
    assert mistral_tool_call_id("call_abc|fc_123") == "18g6kob34"
