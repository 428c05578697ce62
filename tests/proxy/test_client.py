"""``stream_proxy`` never raises and ends every failure with an error event: HTTP errors
("Proxy error: <status> <reason>" or the JSON body's ``error``), a clean close before the
terminal event, the "Received … for non-… content" family, malformed events, unreachable
servers and wrong options. An abort ends the stream ``"aborted"`` promptly and the proxy
then aborts the upstream request, as it does when any client disconnects."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

import pytest
import requests

from piagent.abort import AbortController, AbortSignal
from piagent.messages import UserMessage
from piagent.proxy import ProxyStreamOptions, stream_proxy
from piagent.proxy._protocol import context_to_dict, model_to_dict
from piagent.stream import Context, StreamOptions, TextDeltaEvent
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT

from .conftest import TOKEN

CONTEXT = Context([UserMessage("hi")])
MODEL = ScriptedStreamFn().model


def _options(url: str, **kwargs: Any) -> ProxyStreamOptions:
    return ProxyStreamOptions(proxy_url=url, auth_token=TOKEN, **kwargs)


def _raw_app(status: str, body: Iterable[bytes], content_type: str = "text/event-stream"):
    def app(environ, start_response):
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        start_response(status, [("Content-Type", content_type)])
        return list(body)
    return app


def _events(*events: dict[str, Any]) -> list[bytes]:
    return [f"data: {json.dumps(e)}\n\n".encode() for e in events]


def _run(serve, app) -> tuple[list[str], Any]:
    server = serve(app=app)
    stream = stream_proxy(MODEL, CONTEXT, _options(server.url))
    types = [e.type for e in stream]
    return types, stream.result(WAIT)


def test_http_error_with_json_error_field(serve):
    types, result = _run(serve, _raw_app("429 Too Many Requests",
                                         [b'{"error": "Rate limit reached for this token"}'],
                                         "application/json"))
    assert types == ["error"]
    assert result.stop_reason == "error"
    assert result.error_message == "Proxy error: Rate limit reached for this token"


def test_http_error_without_json_body(serve):
    _, result = _run(serve, _raw_app("502 Bad Gateway", [b"<html>upstream down</html>"],
                                     "text/html"))
    assert result.error_message == "Proxy error: 502 Bad Gateway"


def test_wrong_token_through_proxy_app(serve):
    fn = ScriptedStreamFn([assistant_text("never")])
    server = serve(fn)
    result = stream_proxy(MODEL, CONTEXT, ProxyStreamOptions(
        proxy_url=server.url, auth_token="nope")).result(WAIT)
    assert result.error_message == ("Proxy error: Invalid bearer token: check the token given "
                                    "to the proxy and to the client.")
    assert fn.call_count == 0


def test_clean_close_before_terminal_event(serve):
    types, result = _run(serve, _raw_app("200 OK", _events(
        {"type": "start"}, {"type": "text_start", "contentIndex": 0},
        {"type": "text_delta", "contentIndex": 0, "delta": "Hel"})))
    assert types == ["start", "text_start", "text_delta", "error"]
    assert result.stop_reason == "error"
    assert result.error_message == ("Connection closed by proxy server before the response "
                                    "completed")
    assert result.text == "Hel"


def test_clean_close_on_an_empty_stream(serve):
    types, result = _run(serve, _raw_app("200 OK", [b": nothing here\n\n"]))
    assert types == ["error"]  # no start the proxy never sent (pi's streamProxy)
    assert result.error_message == ("Connection closed by proxy server before the response "
                                    "completed")


@pytest.mark.parametrize(("opener", "event", "message"), [
    ("toolcall_start", "text_delta", "Received text_delta for non-text content"),
    ("toolcall_start", "text_end", "Received text_end for non-text content"),
    ("text_start", "thinking_delta", "Received thinking_delta for non-thinking content"),
    ("text_start", "thinking_end", "Received thinking_end for non-thinking content"),
    ("thinking_start", "toolcall_delta", "Received toolcall_delta for non-toolCall content"),
    (None, "text_delta", "Received text_delta for non-text content"),
])
def test_event_for_the_wrong_kind_of_block(serve, opener, event, message):
    events: list[dict[str, Any]] = [{"type": "start"}]
    if opener is not None:
        events.append({"type": opener, "contentIndex": 0, "id": "c1", "toolName": "t"})
    events.append({"type": event, "contentIndex": 0, "delta": "x"})
    events.append({"type": "done", "reason": "stop", "usage": {}})
    types, result = _run(serve, _raw_app("200 OK", _events(*events)))
    assert types[-1] == "error"
    assert result.stop_reason == "error"
    assert result.error_message == message


def test_unknown_events_are_ignored_and_server_indexes_are_mapped(serve):
    types, result = _run(serve, _raw_app("200 OK", _events(
        {"type": "start"}, {"type": "future_event", "x": 1},
        {"type": "toolcall_start", "contentIndex": 7, "id": "c1", "toolName": "calc"},
        {"type": "toolcall_delta", "contentIndex": 7, "delta": '{"a": 1'},
        {"type": "toolcall_delta", "contentIndex": 7, "delta": ', "b": [2]}'},
        {"type": "toolcall_end", "contentIndex": 7,
         "toolCall": {"type": "toolCall", "id": "c1", "name": "calc",
                      "arguments": {"a": 1, "b": [2]}, "thoughtSignature": "ts"}},
        {"type": "toolcall_end", "contentIndex": 3},
        {"type": "done", "reason": "toolUse", "usage": {"input": 3, "output": 4,
                                                        "totalTokens": 7}})))
    assert types == ["start", "toolcall_start", "toolcall_delta", "toolcall_delta",
                     "toolcall_end", "done"]
    [call] = result.tool_calls
    assert (call.id, call.name, call.arguments, call.thought_signature) == \
        ("c1", "calc", {"a": 1, "b": [2]}, "ts")
    assert (result.stop_reason, result.usage.input, result.usage.total_tokens) == \
        ("toolUse", 3, 7)


def test_signatures_from_end_events(serve):
    _, result = _run(serve, _raw_app("200 OK", _events(
        {"type": "start"}, {"type": "thinking_start", "contentIndex": 0},
        {"type": "thinking_delta", "contentIndex": 0, "delta": "hmm"},
        {"type": "thinking_end", "contentIndex": 0, "contentSignature": "th-sig"},
        {"type": "text_start", "contentIndex": 1},
        {"type": "text_delta", "contentIndex": 1, "delta": "ok"},
        {"type": "text_end", "contentIndex": 1, "contentSignature": "tx-sig"},
        {"type": "done", "reason": "stop", "usage": {}})))
    thinking, text = result.content
    assert (thinking.thinking, thinking.thinking_signature) == ("hmm", "th-sig")
    assert (text.text, text.text_signature) == ("ok", "tx-sig")


def test_error_event_from_the_server(serve):
    _, result = _run(serve, _raw_app("200 OK", _events(
        {"type": "start"},
        {"type": "error", "reason": "error", "errorMessage": "Provider said no",
         "usage": {"input": 1}})))
    assert (result.stop_reason, result.error_message, result.usage.input) == \
        ("error", "Provider said no", 1)


def test_malformed_event_data(serve):
    _, result = _run(serve, _raw_app("200 OK", [b"data: {not json\n\n"]))
    assert result.error_message.startswith(
        "The proxy server sent an event whose data is not valid JSON (")


def test_answer_that_is_not_an_event_stream(serve):
    server = serve(app=_raw_app("200 OK", [b"<html>hello</html>"], "text/html"))
    result = stream_proxy(MODEL, CONTEXT, _options(server.url)).result(WAIT)
    assert result.error_message == (
        f"The proxy server at {server.url}/api/stream did not answer with an event stream "
        "(HTTP 200). Check that proxy_url points at a piagent or pi proxy.")


def test_unreachable_proxy():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = stream_proxy(MODEL, CONTEXT, _options(f"http://127.0.0.1:{port}")).result(WAIT)
    assert result.stop_reason == "error"
    assert result.error_message == (  # the proxy URL once, in the proxy user's words
        f"Could not reach the proxy server at http://127.0.0.1:{port}/api/stream (connection "
        "refused). Check proxy_url and that the proxy server is running.")


def test_plain_stream_options_are_refused_without_raising():
    result = stream_proxy(MODEL, CONTEXT, StreamOptions()).result(WAIT)
    assert result.error_message == (
        "stream_proxy needs ProxyStreamOptions(proxy_url=..., auth_token=...), got "
        "StreamOptions. Pass proxy_stream_fn(proxy_url, auth_token) as the stream function "
        "instead.")


def test_no_model():
    result = stream_proxy(None, CONTEXT, _options("http://127.0.0.1:9")).result(WAIT)
    assert result.stop_reason == "error"
    assert "No model was given" in result.error_message


def test_token_is_not_in_repr():
    assert TOKEN not in repr(_options("http://x"))


# --- abort and disconnect --------------------------------------------------------------------


class _Blocking:
    """A scripted response that reports it started and waits on the server-side signal."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.signal: AbortSignal | None = None

    def __call__(self, context: Context, options: StreamOptions):
        self.signal = options.signal
        self.started.set()
        assert options.signal is not None
        options.signal.wait(WAIT)
        return assistant_text("too late")


class _Reader:
    """Consumes a stream on its own thread (the request is sent once someone reads)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.ended = threading.Event()
        # owner: the test; joined in join()
        self._thread = threading.Thread(target=self._read, name="test-proxy-reader")
        self._thread.start()

    def _read(self) -> None:
        try:
            for _ in self.stream:
                pass
        finally:
            self.ended.set()

    def join(self) -> None:
        self._thread.join(WAIT)
        assert not self._thread.is_alive()


def test_abort_ends_the_stream_promptly_and_aborts_upstream(serve):
    upstream = _Blocking()
    fn = ScriptedStreamFn([upstream])
    server = serve(fn)
    controller = AbortController()
    stream = stream_proxy(MODEL, CONTEXT, _options(server.url, signal=controller.signal))
    reader = _Reader(stream)  # blocked in a socket read while the upstream waits
    assert upstream.started.wait(WAIT)
    began = time.monotonic()
    controller.abort()
    result = stream.result(WAIT)
    elapsed = time.monotonic() - began
    assert reader.ended.wait(WAIT)
    reader.join()
    assert result.stop_reason == "aborted"
    assert result.error_message == "Request aborted by user"  # pi's streamProxy text
    assert elapsed < 1.0
    assert upstream.signal is not None and upstream.signal.wait(WAIT)
    assert upstream.signal.reason == "Client disconnected"


def test_abort_mid_stream_keeps_the_partial_and_ends_upstream(serve):
    fn = ScriptedStreamFn([assistant_text("one two three four five six seven eight nine ten "
                                          "eleven twelve thirteen fourteen fifteen")],
                          chunk_delay=0.05)
    upstream: list[Any] = []

    def recording(model, context, options):
        stream = fn(model, context, options)
        upstream.append((stream, options.signal))
        return stream

    server = serve(recording)
    controller = AbortController()
    stream = stream_proxy(MODEL, CONTEXT, _options(server.url, signal=controller.signal))
    for event in stream:
        if isinstance(event, TextDeltaEvent):
            controller.abort("user-interrupt")
    result = stream.result(WAIT)
    assert result.stop_reason == "aborted"
    assert result.error_message == "Request aborted by user"  # whatever the reason, as pi
    assert result.text.startswith("one")
    [(upstream_stream, upstream_signal)] = upstream
    assert upstream_signal.wait(WAIT)
    assert upstream_stream.result(WAIT).stop_reason == "aborted"


def test_aborted_signal_never_reaches_the_server():
    controller = AbortController()
    controller.abort()
    result = stream_proxy(MODEL, CONTEXT, _options("http://127.0.0.1:9",
                                                   signal=controller.signal)).result(WAIT)
    assert result.stop_reason == "aborted"


def test_client_disconnect_aborts_upstream(serve):
    """Any client (here plain requests) that goes away aborts the provider request."""
    upstream = _Blocking()
    fn = ScriptedStreamFn([upstream])
    server = serve(fn)
    body = {"model": model_to_dict(MODEL), "context": context_to_dict(CONTEXT)}
    with requests.Session() as session:
        session.trust_env = False
        response = session.post(server.url + "/api/stream", json=body, stream=True,
                                headers={"Authorization": f"Bearer {TOKEN}"}, timeout=WAIT)
        assert response.status_code == 200
        assert upstream.started.wait(WAIT)
        response.close()
    assert upstream.signal is not None and upstream.signal.wait(WAIT)
    assert upstream.signal.reason == "Client disconnected"
