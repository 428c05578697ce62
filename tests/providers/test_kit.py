"""The adapter kit (``piagent.providers.kit``) against a real local server.

Covers: the event sequence built by ``MessageBuilder``; retries on 429/5xx/connection
errors honouring ``retry-after-ms``/``retry-after``; the retry cap; no retry once the body
started; non-SSE content types; a stream without its terminal marker; a connection cut
mid-event (chunked and close-delimited); malformed ``data:`` JSON; chunks split mid-line
and mid-UTF-8; Gemini-style bare JSON tails; abort while the stream stalls, while waiting
for headers and during a retry sleep; the API key never appearing in messages; worker
threads ending.

The adapter used here is a minimal one written against the public kit (events
``{"text": …}``, ``{"think": …}``, ``{"tool": [id, name, json]}``, ``{"end": reason}``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from piagent.abort import AbortController
from piagent.errors import ProviderResponseError
from piagent.messages import AssistantMessage, UserMessage
from piagent.models import Model, ModelCost
from piagent.providers.kit import (
    HttpClient,
    ProviderCall,
    SSERequest,
    format_http_error,
    parse_event_json,
    start_stream,
)
from piagent.stream import AssistantMessageEventStream, Context, StreamOptions

from .sse_script import CUT, WAIT, Reply, ScriptedServer, Stall, sse, sse_events

KEY = "sk-test-SECRET-abcdef123456"
_CLIENT = HttpClient("test")


def _run(call: ProviderCall) -> Iterator[None]:
    request = SSERequest(url=call.model.base_url + "/stream", body={"m": call.model.id},
                         headers={"Authorization": f"Bearer {call.options.api_key}"})
    reason = None
    text = tool = None
    with call.open_sse(request) as response:
        for event in response.events():
            data = parse_event_json(event, call.label)
            if "text" in data:
                if text is None:
                    text = call.out.open_text()
                call.out.add_text(text, data["text"])
            elif "think" in data:
                i = call.out.open_thinking()
                call.out.add_thinking(i, data["think"])
                call.out.close_block(i)
            elif "tool" in data:
                call_id, name, args = data["tool"]
                tool = call.out.open_tool_call(call_id, name)
                for piece in args:
                    call.out.add_tool_arguments(tool, piece)
            elif "args" in data:
                call.out.add_tool_arguments(tool, data["args"])
            elif "usage" in data:
                call.out.set_usage(**data["usage"])
            elif "end" in data:
                reason = data["end"]
            yield
        tail = response.trailing_text
    if reason is None:
        detail = f" ({tail})" if tail else ""
        msg = f"Test stream ended without an end event{detail}."
        raise ProviderResponseError(msg)
    call.out.close_open_blocks()
    call.out.finish(reason)


def _model(server: ScriptedServer, cost: ModelCost | None = None) -> Model:
    return Model(id="m1", api="test-api", provider="test", base_url=server.url,
                 cost=cost or ModelCost())


def _consume_in_background(stream: AssistantMessageEventStream
                           ) -> tuple[threading.Thread, list[AssistantMessage]]:
    """Read ``stream`` to its result on another thread (the stream is driven by its reader)."""
    results: list[AssistantMessage] = []
    consumer = threading.Thread(target=lambda: results.append(stream.result(WAIT)),
                                name="test-consumer", daemon=True)
    consumer.start()
    return consumer, results


def _stream(server: ScriptedServer, **options: object) -> AssistantMessageEventStream:
    opts = StreamOptions(api_key=KEY, **options)  # type: ignore[arg-type]
    context = Context(messages=[UserMessage(content="hi")])
    return start_stream(_model(server), opts, _run, context=context, client=_CLIENT,
                        api="test-api", label="Test")


def _collect(stream: AssistantMessageEventStream) -> tuple[list[str], AssistantMessage]:
    types = [event.type for event in stream]
    return types, stream.result(WAIT)


def test_event_sequence_text_thinking_tool(sse_server, no_piagent_threads):
    """Every block kind produces pi's start/delta/end events, in order, then done."""
    sse_server.add(Reply(body=sse_events(
        {"think": "hmm"}, {"text": "Hel"}, {"text": "lo"},
        {"tool": ["c1", "get", ['{"city":', ' "Pa', 'ris"}']]},
        {"usage": {"input": 10, "output": 5, "cache_read": 2}}, {"end": "toolUse"})))
    types, message = _collect(_stream(sse_server))
    assert types == ["start", "thinking_start", "thinking_delta", "thinking_end",
                     "text_start", "text_delta", "text_delta", "toolcall_start",
                     "toolcall_delta", "toolcall_delta", "toolcall_delta", "text_end",
                     "toolcall_end", "done"]
    assert message.stop_reason == "toolUse"
    assert message.text == "Hello"
    assert message.content[0].thinking == "hmm"
    assert message.tool_calls[0].arguments == {"city": "Paris"}
    assert (message.usage.input, message.usage.output, message.usage.cache_read,
            message.usage.total_tokens) == (10, 5, 2, 17)
    assert sse_server.requests[0].json == {"m": "m1"}
    assert sse_server.requests[0].headers["Accept"] == "text/event-stream"


def test_tool_arguments_parse_while_streaming(sse_server):
    """Each toolcall_delta carries the arguments parsed from the buffer so far."""
    stall = Stall()
    sse_server.add(Reply(body=[*sse_events({"tool": ["c1", "get", ['{"path": "/tm']]}), stall,
                               *sse_events({"args": 'p"}'}, {"end": "toolUse"})]))
    seen = []
    for event in _stream(sse_server):
        if event.type == "toolcall_delta":
            seen.append((event.delta, dict(event.partial.content[event.content_index].arguments)))
            stall.release.set()  # the server sends the rest only after we looked
    assert seen == [('{"path": "/tm', {"path": "/tm"}), ('p"}', {"path": "/tmp"})]


def test_usage_cost_uses_model_prices(sse_server):
    """Cost is dollars per million tokens times the counters."""
    sse_server.add(Reply(body=sse_events(
        {"usage": {"input": 1_000_000, "output": 2_000_000}}, {"end": "stop"})))
    model = _model(sse_server, ModelCost(input=1.0, output=3.0))
    stream = start_stream(model, StreamOptions(), _run, context=Context([]), client=_CLIENT,
                          api="test-api", label="Test")
    message = stream.result(WAIT)
    assert message.usage.cost.input == pytest.approx(1.0)
    assert message.usage.cost.output == pytest.approx(6.0)
    assert message.usage.cost.total == pytest.approx(7.0)


def test_split_chunks_mid_line_and_mid_utf8(sse_server):
    """Events split across HTTP chunks (inside a line and inside a character) reassemble."""
    raw = sse({"text": "héllo ✅"}) + sse({"end": "stop"})
    cut = raw.index("✅".encode()) + 1
    pieces = [raw[:5], raw[5:cut], raw[cut:]]
    sse_server.add(Reply(body=pieces))
    assert _stream(sse_server).result(WAIT).text == "héllo ✅"


def test_close_delimited_body_delivers_last_event_promptly(sse_server):
    """A body without chunked framing still streams (read1, not 128-byte reads)."""
    stall = Stall()
    sse_server.add(Reply(chunked=False, body=[sse({"text": "x"}), stall, sse({"end": "stop"})]))
    stream = _stream(sse_server)
    it = iter(stream)
    assert [next(it).type, next(it).type, next(it).type] == ["start", "text_start", "text_delta"]
    stall.release.set()
    assert [e.type for e in it] == ["text_end", "done"]


# --- errors ---------------------------------------------------------------------------------


def test_http_error_message_has_provider_text_and_no_key(sse_server):
    """A 401 ends with the provider's own text and a hint; the key is redacted."""
    body = ('{"error":{"message":"Incorrect API key provided: ' + KEY + '",'
            '"type":"invalid_request_error","code":"invalid_api_key"}}').encode()
    sse_server.add(Reply(status=401, content_type="application/json", body=[body]))
    types, message = _collect(_stream(sse_server))
    assert types == ["error"]
    assert message.stop_reason == "error"
    assert message.error_message.startswith("Test API error (401, invalid_api_key): "
                                            "Incorrect API key provided: [redacted]")
    assert "Check the API key" in message.error_message
    assert KEY not in message.error_message
    assert len(sse_server.requests) == 1  # 401 is not retried


def test_retries_429_honouring_retry_after_ms(sse_server):
    """429 then 503 are retried after the server's delay; the third attempt streams."""
    sse_server.add(
        Reply(status=429, headers={"retry-after-ms": "10"}, content_type="application/json",
              body=[b'{"error":{"message":"slow down"}}']),
        Reply(status=503, headers={"retry-after": "0"}, content_type="text/plain",
              body=[b"overloaded"]),
        Reply(body=sse_events({"text": "ok"}, {"end": "stop"})),
    )
    message = _stream(sse_server).result(WAIT)
    assert message.text == "ok"
    assert len(sse_server.requests) == 3


def test_retries_exhausted_reports_last_error(sse_server):
    """After max_retries the last HTTP error becomes the message."""
    for _ in range(3):
        sse_server.add(Reply(status=500, headers={"retry-after-ms": "1"},
                             content_type="application/json",
                             body=[b'{"error":{"message":"boom","type":"server_error"}}']))
    message = _stream(sse_server).result(WAIT)
    assert message.error_message == ("Test API error (500, server_error): boom. "
                                     "The provider had a server error; retry later.")
    assert len(sse_server.requests) == 3  # the first attempt plus DEFAULT_MAX_RETRIES


@pytest.mark.parametrize("max_retries", [0, 1])
def test_stream_options_max_retries_sets_the_retry_count(sse_server, max_retries):
    """``StreamOptions.max_retries`` (pi's ``maxRetries``) replaces the default of 2."""
    for _ in range(3):
        sse_server.add(Reply(status=500, headers={"retry-after-ms": "1"},
                             content_type="application/json",
                             body=[b'{"error":{"message":"boom"}}']))
    message = _stream(sse_server, max_retries=max_retries).result(WAIT)
    assert message.stop_reason == "error"
    assert len(sse_server.requests) == 1 + max_retries


def test_retry_delay_above_cap_fails_fast(sse_server):
    """A server delay longer than max_retry_delay_ms fails at once, saying so."""
    sse_server.add(Reply(status=429, headers={"retry-after": "3600"},
                         content_type="application/json",
                         body=[b'{"error":{"message":"quota"}}']))
    message = _stream(sse_server, max_retry_delay_ms=1000).result(WAIT)
    assert message.error_message.startswith("Server requested 3600s retry delay (max: 1s). "
                                            "Test API error (429): quota")
    assert len(sse_server.requests) == 1


def test_insufficient_quota_is_not_retried(sse_server):
    sse_server.add(Reply(status=429, content_type="application/json",
                         body=[b'{"error":{"message":"pay up","code":"insufficient_quota"}}']))
    message = _stream(sse_server).result(WAIT)
    assert "insufficient_quota" in message.error_message
    assert len(sse_server.requests) == 1


def test_connection_refused_is_retried_then_reported():
    """Nobody listening: retried with back-off clamped to the cap, then a clear message."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: the port refuses connections
    model = Model(id="m1", api="test-api", provider="test", base_url=f"http://127.0.0.1:{port}")
    opts = StreamOptions(api_key=KEY, max_retry_delay_ms=5)
    message = start_stream(model, opts, _run, context=Context([]), client=_CLIENT,
                           api="test-api", label="Test").result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message == (
        f"Could not connect to Test at 127.0.0.1:{port} (connection refused) for "
        f"http://127.0.0.1:{port}/stream; is the server running? Check base_url.")
    assert "urllib3" not in message.error_message
    assert KEY not in message.error_message


def test_non_sse_content_type_is_an_error(sse_server):
    """A 200 JSON answer (a server ignoring stream=true) is reported, not silently empty."""
    sse_server.add(Reply(content_type="application/json", body=[b'{"choices":[]}']))
    message = _stream(sse_server).result(WAIT)
    assert message.error_message.startswith(
        "Test answered with Content-Type 'application/json' instead of an event stream")
    assert len(sse_server.requests) == 1


def test_stream_without_terminal_marker(sse_server):
    sse_server.add(Reply(body=sse_events({"text": "par"})))
    types, message = _collect(_stream(sse_server))
    assert types == ["start", "text_start", "text_delta", "error"]
    assert message.error_message == "Test stream ended without an end event."
    assert message.text == "par"  # partial content is kept


def test_bare_json_tail_is_available(sse_server):
    """Gemini-style bare JSON after the last event is kept as trailing_text."""
    tail = b'{\n  "error": {\n    "code": 503,\n    "message": "overloaded"\n  }\n}\n'
    sse_server.add(Reply(body=[sse({"text": "a"}), tail]))
    message = _stream(sse_server).result(WAIT)
    assert message.error_message.startswith('Test stream ended without an end event ({\n  "error"')


def test_connection_cut_mid_event_chunked(sse_server):
    """A chunked body cut short is a broken connection, not a success."""
    sse_server.add(Reply(body=[sse({"text": "a"}), b'data: {"text": "b', CUT]))
    message = _stream(sse_server).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "The connection to Test broke in the middle of the response")
    assert message.text == "a"


def test_connection_cut_mid_event_close_delimited(sse_server):
    """A close-delimited body ending inside an event reports the truncation."""
    sse_server.add(Reply(chunked=False, body=[sse({"text": "a"}), b'data: {"text": "b']))
    message = _stream(sse_server).result(WAIT)
    assert message.error_message.startswith(
        "The Test stream was cut off in the middle of an event (incomplete data '{\"text\": \"b'")


def test_malformed_data_json(sse_server):
    sse_server.add(Reply(body=[sse({"text": "a"}), b"data: {not json}\n\n", sse({"end": "stop"})]))
    message = _stream(sse_server).result(WAIT)
    assert message.error_message.startswith("Test sent an event whose data is not valid JSON")
    assert "'{not json}'" in message.error_message


def test_model_none_error_says_to_pass_a_model():
    stream = start_stream(None, None, _run, context=Context([]), client=_CLIENT,
                          api="test-api", label="Test")
    message = stream.result(WAIT)
    assert message.stop_reason == "error"
    assert "Pass a model" in message.error_message


def test_format_http_error_variants():
    assert format_http_error("X", 404, '{"error":"no such model"}') == (
        "X API error (404): no such model. Check the model id and the base URL.")
    assert format_http_error("X", 400, "") == "X API error (400): (no body)"
    assert format_http_error("X", 503, '[{"error":{"code":503,"message":"busy",'
                                       '"status":"UNAVAILABLE"}}]') == (
        "X API error (503, UNAVAILABLE): busy. The provider had a server error; retry later.")


# --- abort -----------------------------------------------------------------------------------


def test_abort_during_stalled_stream(sse_server, no_piagent_threads):
    """An abort while the server holds the stream open ends it at once, content kept."""
    stall = Stall()
    sse_server.add(Reply(body=[sse({"text": "partial"}), stall, sse({"end": "stop"})]))
    controller = AbortController()
    stream = _stream(sse_server, signal=controller.signal)
    it = iter(stream)
    assert [next(it).type for _ in range(3)] == ["start", "text_start", "text_delta"]
    assert stall.reached.wait(WAIT)
    started = time.monotonic()
    controller.abort()
    rest = [e.type for e in it]
    elapsed = time.monotonic() - started
    assert rest == ["error"]
    message = stream.result(WAIT)
    assert (message.stop_reason, message.error_message) == ("aborted", "Request was aborted")
    assert message.text == "partial"
    assert elapsed < 1.0  # bounded far above the ~ms it takes, to stay deterministic


def test_abort_while_waiting_for_headers(sse_server, no_piagent_threads):
    """An abort before the response headers arrive wakes the worker's blocked read."""
    release = threading.Event()
    accepted = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def silent_server() -> None:
            conn, _ = listener.accept()
            with conn:
                accepted.set()
                release.wait(WAIT)

        server = threading.Thread(target=silent_server, name="test-silent", daemon=True)
        server.start()
        model = Model(id="m", api="test-api", provider="test", base_url=f"http://127.0.0.1:{port}")
        controller = AbortController()
        stream = start_stream(model, StreamOptions(signal=controller.signal), _run,
                              context=Context([]), client=_CLIENT, api="test-api", label="Test")
        consumer, results = _consume_in_background(stream)  # the reader blocks in the request
        assert accepted.wait(WAIT)
        controller.abort("user pressed stop")
        consumer.join(WAIT)
        message = results[0]
        assert message.stop_reason == "aborted"
        assert message.error_message == "Request was aborted: user pressed stop"
        release.set()
        server.join(WAIT)


def test_abort_during_retry_sleep(sse_server, no_piagent_threads):
    """An abort wakes the back-off wait: no second request is made."""
    sse_server.add(Reply(status=503, headers={"retry-after": "30"},
                         content_type="application/json", body=[b'{"error":"busy"}']))
    controller = AbortController()
    stream = _stream(sse_server, signal=controller.signal)
    consumer, results = _consume_in_background(stream)  # the reader sleeps before its retry
    assert sse_server.reached(1).wait(WAIT)
    controller.abort()
    consumer.join(WAIT)
    assert results[0].stop_reason == "aborted"
    assert len(sse_server.requests) == 1


def test_aborted_signal_never_starts_a_request(sse_server):
    controller = AbortController()
    controller.abort()
    message = _stream(sse_server, signal=controller.signal).result(WAIT)
    assert message.stop_reason == "aborted"
    assert sse_server.requests == []


def test_connection_reused_across_requests(sse_server):
    """Sequential requests from one client reuse the session's connection."""
    for _ in range(2):
        sse_server.add(Reply(body=sse_events({"text": "x"}, {"end": "stop"})))
    client = HttpClient("reuse")
    for _ in range(2):
        stream = start_stream(_model(sse_server), StreamOptions(), _run, context=Context([]),
                              client=client, api="test-api", label="Test")
        assert stream.result(WAIT).text == "x"
    assert len(sse_server.requests) == 2
    assert sse_server.requests[0].peer == sse_server.requests[1].peer
    client.close()
