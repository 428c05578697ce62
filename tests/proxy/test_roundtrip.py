"""Proxy round trips: ``ProxyApp`` on a local port with ``ScriptedStreamFn`` behind it and
``stream_proxy`` in front give the same events and final message as calling the scripted
stream function directly (text, thinking, parallel tool calls, errors, usage), the partial
is rebuilt client-side, and only the serialisable options travel."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from piagent.abort import AbortController
from piagent.messages import (
    AssistantMessage,
    Cost,
    TextContent,
    ThinkingContent,
    Usage,
    UserMessage,
    message_to_dict,
)
from piagent.proxy import ProxyServer, ProxyStreamOptions, proxy_stream_fn, stream_proxy
from piagent.proxy._protocol import (
    model_from_dict,
    model_to_dict,
    options_to_dict,
    validate_request,
)
from piagent.stream import Context, StreamOptions, ToolCallDeltaEvent
from piagent.testing import ScriptedStreamFn, assistant_error, assistant_text, assistant_tool_calls
from tests.conftest import WAIT

from .conftest import TOKEN


def _normalised(message: AssistantMessage) -> dict[str, Any]:
    data = message_to_dict(message)
    data.pop("timestamp")
    data.pop("durationMs", None)  # measured: each stream times its own response
    return data


def _options(server: ProxyServer, **kwargs: Any) -> ProxyStreamOptions:
    return ProxyStreamOptions(proxy_url=server.url, auth_token=TOKEN, **kwargs)


def _thinking_message() -> AssistantMessage:
    return AssistantMessage(
        content=[ThinkingContent("Let me think about the weather in Paris first.", "sig-1"),
                 TextContent("It is sunny in Paris today, 21 degrees.", "text-sig")],
        api="scripted", provider="scripted", model="scripted",
        usage=Usage(12, 34, 5, 6, 57, Cost(0.1, 0.2, 0.01, 0.02, 0.33)),
        provider_thinking_level="medium")  # carried by the done event, as pi's proxy does


CASES = {
    "text": lambda: assistant_text("Hello there! A longer answer, streamed in several deltas."),
    "thinking": _thinking_message,
    "parallel_tools": lambda: assistant_tool_calls(
        ("get_weather", {"city": "Paris", "days": 3, "units": {"temp": "C"}}),
        ("get_time", {"zone": "Europe/Paris", "format": ["iso", "24h"]}, "call_b"),
        text="I will check both."),
    "length": lambda: assistant_text("cut off", stop_reason="length"),
    "error": lambda: assistant_error("The model is overloaded; retry later."),
}


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip_matches_direct_call(serve, case):
    """The proxied stream has the direct stream's event types and final message."""
    direct_fn = ScriptedStreamFn([CASES[case]()])
    proxied_fn = ScriptedStreamFn([CASES[case]()])
    context = Context([UserMessage("What is the weather?")])
    direct = direct_fn(direct_fn.model, context, StreamOptions())
    direct_types = [e.type for e in direct]
    server = serve(proxied_fn)

    stream = stream_proxy(proxied_fn.model, context, _options(server))
    proxy_types = [e.type for e in stream]

    # the client pushes "start" when the proxy sends it, as pi's streamProxy: an upstream
    # that failed before any output reads the same through the proxy
    assert proxy_types == direct_types
    assert _normalised(stream.result(WAIT)) == _normalised(direct.result(WAIT))
    assert isinstance(stream.result(WAIT).duration_ms, int)  # the client's request started
    assert proxied_fn.call_count == 1
    assert [message_to_dict(m) for m in proxied_fn.calls[0].context.messages] == \
        [message_to_dict(m) for m in context.messages]


def test_round_trip_rebuilds_tool_arguments_from_the_deltas(serve):
    """Tool arguments arrive as JSON fragments and are parsed into the partial's block."""
    args = {"query": "a fairly long search query", "limit": 10, "tags": ["x", "y"]}
    fn = ScriptedStreamFn([assistant_tool_calls(("search", args))])
    server = serve(fn)
    stream = stream_proxy(fn.model, Context([UserMessage("go")]), _options(server))
    deltas = []
    for event in stream:
        if isinstance(event, ToolCallDeltaEvent):
            deltas.append(event.delta)
            assert event.partial.content[event.content_index].name == "search"
    assert len(deltas) > 2
    assert json.loads("".join(deltas)) == args
    assert stream.result(WAIT).tool_calls[0].arguments == args


def test_only_serialisable_options_travel(serve):
    """The request has camelCase options and never the signal, key, URL or token."""
    bodies: list[dict[str, Any]] = []
    fn = ScriptedStreamFn([assistant_text("ok")])
    inner = serve(fn).app

    def recording_app(environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length)
        bodies.append({"body": json.loads(raw), "auth": environ.get("HTTP_AUTHORIZATION")})
        import io
        environ = dict(environ, **{"wsgi.input": io.BytesIO(raw)})
        return inner(environ, start_response)

    server = serve(app=recording_app)
    options = _options(server, api_key="client-side-key", signal=AbortController().signal,
                       temperature=0.3, max_tokens=99, reasoning="high", session_id="s-1",
                       headers={"X-A": "1"}, metadata={"user": "u"}, transport="sse",
                       thinking_budgets={"high": 2048}, max_retry_delay_ms=1000,
                       cache_retention="short", sampling_params={"top_p": 0.9})
    result = stream_proxy(fn.model, Context([UserMessage("hi")]), options).result(WAIT)

    assert result.stop_reason == "stop", result.error_message
    [sent] = bodies
    assert sent["auth"] == f"Bearer {TOKEN}"
    assert sent["body"]["options"] == {
        "temperature": 0.3, "samplingParams": {"top_p": 0.9}, "maxTokens": 99,
        "reasoning": "high", "cacheRetention": "short", "sessionId": "s-1",
        "headers": {"X-A": "1"}, "metadata": {"user": "u"}, "transport": "sse",
        "thinkingBudgets": {"high": 2048}, "maxRetryDelayMs": 1000}
    assert set(sent["body"]) == {"model", "context", "options"}
    assert "client-side-key" not in json.dumps(sent)
    received = fn.calls[0].options
    assert received.api_key is None
    assert (received.temperature, received.max_tokens, received.session_id) == (0.3, 99, "s-1")
    assert received.signal is not None and not received.signal.aborted


def test_model_json_round_trips():
    fn = ScriptedStreamFn()
    model = dataclasses.replace(fn.model, headers={"X": "y"}, compat={"a": True},
                                reasoning=True, input=("text", "image"))
    assert model_from_dict(model_to_dict(model)) == model


def test_model_cost_tiers_travel():
    """The proxy sends pi-ai's cost.tiers, so the server prices as the client would."""
    from piagent.providers import get_model

    model = get_model("google", "gemini-2.5-pro")
    assert model.cost.tiers
    assert model_to_dict(model)["cost"]["tiers"] == [{
        "inputTokensAbove": 200_000, "input": 2.5, "output": 15.0, "cacheRead": 0.25,
        "cacheWrite": 0.0}]
    assert model_from_dict(model_to_dict(model)).cost == model.cost
    validate_request({"model": model_to_dict(model), "context": {"messages": []}})
    assert "tiers" not in model_to_dict(get_model("google", "gemini-2.5-flash"))["cost"]


def test_proxy_stream_fn_upgrades_loop_options(serve):
    """proxy_stream_fn keeps the loop's options and adds the proxy URL and token."""
    fn = ScriptedStreamFn([assistant_text("ok")])
    server = serve(fn)
    stream_fn = proxy_stream_fn(server.url, TOKEN)
    result = stream_fn(fn.model, Context([UserMessage("hi")]),
                       StreamOptions(session_id="abc")).result(WAIT)
    assert result.text == "ok"
    assert fn.calls[0].options.session_id == "abc"


def test_disable_continuation_reaches_the_server_s_stream_fn(serve):
    """pi-ai 1.6's disableContinuation travels as pi-agent-core 1.6's proxy sends it."""
    fn = ScriptedStreamFn([assistant_text("ok"), assistant_text("again")])
    server = serve(fn)
    stream_fn = proxy_stream_fn(server.url, TOKEN)
    for value in (True, None):
        result = stream_fn(fn.model, Context([UserMessage("hi")]),
                           StreamOptions(disable_continuation=value)).result(WAIT)
        assert result.stop_reason == "stop", result.error_message
    assert [call.options.disable_continuation for call in fn.calls] == [True, None]
    assert options_to_dict(StreamOptions(session_id="s", disable_continuation=True)) == {
        "sessionId": "s", "disableContinuation": True}
    with pytest.raises(TypeError, match="disable_continuation must be a bool or None, got str"):
        StreamOptions(disable_continuation="yes")  # type: ignore[arg-type]


def test_consecutive_requests_reuse_the_client(serve):
    fn = ScriptedStreamFn([assistant_text(f"answer {i}") for i in range(5)])
    server = serve(fn)
    texts = [stream_proxy(fn.model, Context([UserMessage("q")]), _options(server))
             .result(WAIT).text for _ in range(5)]
    assert texts == [f"answer {i}" for i in range(5)]
