"""``ProxyApp`` answers bad input clearly and never calls the stream function for it: 401
(missing, wrong, non-bearer token), 413 (declared and chunked bodies), 400 (malformed JSON,
schema failures, unreadable messages, refused models), 404 and 405; provider keys never
appear in a response; a raising or unterminated stream function still ends the stream;
``close()`` aborts live streams and refuses new ones."""

from __future__ import annotations

import io
import json
import threading
from typing import Any

import pytest
import requests

from piagent.abort import AbortSignal
from piagent.messages import UserMessage
from piagent.proxy import ProxyApp, ProxyStreamOptions, stream_proxy
from piagent.proxy._protocol import context_to_dict, model_to_dict
from piagent.stream import AssistantMessageEventStream, Context
from piagent.testing import ScriptedStreamFn, assistant_error, assistant_text
from tests.conftest import WAIT

from .conftest import SCRIPTED_BASE_URLS, TOKEN

ENDPOINT = "/api/stream"


def _body(fn: ScriptedStreamFn, **extra: Any) -> dict[str, Any]:
    body = {"model": model_to_dict(fn.model),
            "context": context_to_dict(Context([UserMessage("hi")])), "options": {}}
    body.update(extra)
    return body


def _call(app: ProxyApp, body: bytes | None = b"", *, method: str = "POST",
          path: str = ENDPOINT, auth: str | None = f"Bearer {TOKEN}",
          length: bool = True, content_type: str | None = "application/json",
          ) -> tuple[str, dict[str, str], bytes]:
    """Call the WSGI app in-process; returns (status, headers, body)."""
    environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path,
                               "wsgi.input": io.BytesIO(body or b"")}
    if content_type is not None:
        environ["CONTENT_TYPE"] = content_type
    if length and body is not None:
        environ["CONTENT_LENGTH"] = str(len(body))
    elif body is not None:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"  # what a server says of a chunked body
    if auth is not None:
        environ["HTTP_AUTHORIZATION"] = auth
    captured: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        captured["status"], captured["headers"] = status, dict(headers)

    result = app(environ, start_response)
    try:
        data = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return captured["status"], captured["headers"], data


def _error(data: bytes) -> str:
    return json.loads(data)["error"]


@pytest.fixture
def fn() -> ScriptedStreamFn:
    return ScriptedStreamFn([assistant_text("should never be sent")])


@pytest.fixture
def app(fn: ScriptedStreamFn) -> ProxyApp:
    return ProxyApp(fn, auth_tokens=[TOKEN],
                    allowed_base_urls=SCRIPTED_BASE_URLS, max_body_bytes=4096)


@pytest.mark.parametrize(("auth", "answer"), [
    (None, "Missing bearer token: send 'Authorization: Bearer <token>'."),
    ("Bearer wrong-token", "Invalid bearer token: check the token given to the proxy and to "
                           "the client."),
    ("Basic dXNlcjpwYXNz", "The Authorization header must use the Bearer scheme: "
                           "'Bearer <token>'."),
    ("Bearer ", "The Authorization header must use the Bearer scheme: 'Bearer <token>'."),
])
def test_bad_token_is_401(app, fn, auth, answer):
    status, headers, data = _call(app, json.dumps(_body(fn)).encode(), auth=auth)
    assert status == "401 Unauthorized"
    assert headers["WWW-Authenticate"] == 'Bearer realm="piagent-proxy"'
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert _error(data) == answer
    assert fn.call_count == 0


def test_any_configured_token_is_accepted(fn):
    app = ProxyApp(fn, auth_tokens=["old-token", TOKEN], allowed_base_urls=SCRIPTED_BASE_URLS)
    status, _, data = _call(app, json.dumps(_body(fn)).encode())
    assert status == "200 OK"
    assert b'"type":"done"' in data


def test_body_over_limit_is_413(app, fn):
    body = json.dumps(_body(fn, padding="x" * 5000)).encode()
    status, _, data = _call(app, body)
    assert status == "413 Content Too Large"
    assert _error(data) == (f"Request body is {len(body)} bytes; the limit is 4096 bytes "
                            "(ProxyApp max_body_bytes).")
    assert fn.call_count == 0


def test_chunked_body_over_limit_is_413(app, fn):
    body = json.dumps(_body(fn, padding="x" * 5000)).encode()
    status, _, data = _call(app, body, length=False)
    assert status == "413 Content Too Large"
    assert _error(data) == ("Request body exceeds the limit of 4096 bytes "
                            "(ProxyApp max_body_bytes).")
    assert fn.call_count == 0


def test_malformed_json_is_400(app, fn):
    status, _, data = _call(app, b'{"model": ')
    assert status == "400 Bad Request"
    assert _error(data) == ("Request body is not valid JSON: Expecting value: line 1 column 11 "
                            "(char 10).")
    assert fn.call_count == 0


SCHEMA_CASES = {
    "no_model": (lambda b: b.pop("model"),
                 "Request body does not match the proxy protocol at the top level: 'model' is "
                 "a required property."),
    "no_base_url": (lambda b: b["model"].pop("baseUrl"),
                    "Request body does not match the proxy protocol at model: 'baseUrl' is a "
                    "required property."),
    "messages_not_a_list": (lambda b: b["context"].update(messages="hi"),
                            "Request body does not match the proxy protocol at "
                            "context.messages: 'hi' is not of type 'array'."),
    "message_without_role": (lambda b: b["context"]["messages"][0].pop("role"),
                             "Request body does not match the proxy protocol at "
                             "context.messages.0: 'role' is a required property."),
    "bad_option": (lambda b: b.update(options={"maxTokens": "many"}),
                   "Request body does not match the proxy protocol at options.maxTokens: "
                   "'many' is not of type 'integer', 'null'."),
}


@pytest.mark.parametrize("case", list(SCHEMA_CASES))
def test_schema_failure_is_400_with_the_reason(app, fn, case):
    change, answer = SCHEMA_CASES[case]
    body = _body(fn)
    change(body)
    status, _, data = _call(app, json.dumps(body).encode())
    assert status == "400 Bad Request"
    assert _error(data) == answer
    assert fn.call_count == 0


def test_body_that_is_not_an_object_is_400(app, fn):
    status, _, data = _call(app, b"[1, 2]")
    assert status == "400 Bad Request"
    assert _error(data) == ("Request body does not match the proxy protocol at the top level: "
                            "[1, 2] is not of type 'object'.")
    assert fn.call_count == 0


def test_unknown_message_role_is_400(app, fn):
    body = _body(fn)
    body["context"]["messages"].append({"role": "narrator", "content": "once upon a time"})
    status, _, data = _call(app, json.dumps(body).encode())
    assert status == "400 Bad Request"
    assert _error(data) == (
        "context.messages.1 could not be read: Unknown message role 'narrator'; register "
        "application messages with register_message_type(role, cls) before loading them.")
    assert fn.call_count == 0


def test_a_model_resolve_model_refuses_is_403(fn):
    def only_local(model):
        if not model.base_url.startswith("http://localhost"):
            raise ValueError("only local models are served")
        return model

    app = ProxyApp(fn, auth_tokens=TOKEN,
                   allowed_base_urls=SCRIPTED_BASE_URLS, resolve_model=only_local)
    status, _, data = _call(app, json.dumps(_body(fn)).encode())
    assert status == "403 Forbidden"
    assert _error(data) == ("Model scripted/scripted is not served here: only local models are "
                            "served (ProxyApp resolve_model)")
    assert fn.call_count == 0


def test_unknown_path_is_404_and_other_methods_405(app, fn):
    status, _, data = _call(app, b"{}", path="/api/other")
    assert status == "404 Not Found"
    assert _error(data) == "Not found: '/api/other'. The proxy serves only POST /api/stream."
    status, headers, data = _call(app, None, method="GET")
    assert status == "405 Method Not Allowed"
    assert headers["Allow"] == "POST"
    assert _error(data) == "Method GET is not allowed: use POST /api/stream."
    assert fn.call_count == 0


def test_bad_input_over_http(serve, fn):
    """The same answers through a real server, as a client library sees them."""
    server = serve(fn, max_body_bytes=4096)
    with requests.Session() as session:
        session.trust_env = False
        url = server.url + ENDPOINT
        answer = session.post(url, data=b"not json",
                              headers={"Authorization": f"Bearer {TOKEN}",
                                       "Content-Type": "application/json"}, timeout=WAIT)
        assert answer.status_code == 400
        assert answer.json() == {"error": "Request body is not valid JSON: Expecting value: "
                                          "line 1 column 1 (char 0)."}
        answer = session.post(url, json=_body(fn), timeout=WAIT)
        assert answer.status_code == 401
        answer = session.post(url, data=b"x" * 5000,
                              headers={"Authorization": f"Bearer {TOKEN}",
                                       "Content-Type": "application/json"}, timeout=WAIT)
        assert answer.status_code == 413
        assert session.get(server.url + "/", timeout=WAIT).status_code == 404
        assert session.get(url, timeout=WAIT).status_code == 405
    assert fn.call_count == 0


def test_header_only_verdicts_need_no_body(app, fn):
    """401, 415, 411 and a declared 413 come from the request line and headers alone."""
    unread = _Unreadable()
    for auth, content_type, length, status in [
            (None, "application/json", "15000000", "401 Unauthorized"),
            (f"Bearer {TOKEN}", "text/plain", "10", "415 Unsupported Media Type"),
            (f"Bearer {TOKEN}", "application/json", None, "411 Length Required"),
            (f"Bearer {TOKEN}", "application/json", "15000000", "413 Content Too Large")]:
        environ: dict[str, Any] = {"REQUEST_METHOD": "POST", "PATH_INFO": ENDPOINT,
                                   "CONTENT_TYPE": content_type, "wsgi.input": unread}
        if auth is not None:
            environ["HTTP_AUTHORIZATION"] = auth
        if length is not None:
            environ["CONTENT_LENGTH"] = length
        verdict = app.header_verdict(environ)
        assert verdict is not None and verdict[0] == status
        status_of = _call_environ(app, environ)
        assert status_of == status
    assert app.header_verdict({"REQUEST_METHOD": "POST", "PATH_INFO": ENDPOINT,
                               "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
                               "CONTENT_TYPE": "application/json",
                               "CONTENT_LENGTH": "10"}) is None
    assert app.header_verdict({"REQUEST_METHOD": "POST", "PATH_INFO": ENDPOINT,
                               "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
                               "HTTP_TRANSFER_ENCODING": "chunked",
                               "CONTENT_TYPE": "application/json"}) is None
    assert fn.call_count == 0


def _call_environ(app: ProxyApp, environ: dict[str, Any]) -> str:
    answered: list[str] = []
    b"".join(app(environ, lambda status, headers: answered.append(status)))
    return answered[0]


class _Unreadable(io.RawIOBase):
    def read(self, size: int = -1) -> bytes:
        raise AssertionError("the body was read")


def test_a_stranger_declaring_a_huge_body_is_answered_401_at_once(serve, fn):
    """No token, 15 MB declared, nothing sent: 401 from the headers within 1 s, then closed."""
    import socket
    import time

    server = serve(fn)
    with socket.create_connection((server.host, server.port), timeout=WAIT) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /api/stream HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 15000000\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, answer
            answer += chunk
        took = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 401 Unauthorized\r\n")
        assert b"Connection: close" in answer
        assert took < 1.0
        while sock.recv(4096):  # the server closes the connection (after a bounded linger)
            pass
    assert fn.call_count == 0


def test_app_needs_a_token():
    with pytest.raises(ValueError, match="at least one non-empty auth token"):
        ProxyApp(ScriptedStreamFn(), auth_tokens=[])
    with pytest.raises(ValueError, match="at least one non-empty auth token"):
        ProxyApp(ScriptedStreamFn(), auth_tokens="")


def test_stream_frames_are_pi_proxy_events(app, fn):
    """The body is SSE of pi's proxy events: no ``partial``, camelCase keys."""
    fn.set_responses([assistant_text("Hi!")])
    status, headers, data = _call(app, json.dumps(_body(fn)).encode())
    assert status == "200 OK"
    assert headers["Content-Type"] == "text/event-stream; charset=utf-8"
    frames = [f for f in data.decode().split("\n\n") if f.startswith("data: ")]
    events = [json.loads(f[len("data: "):]) for f in frames]
    assert events[:4] == [{"type": "start"}, {"type": "text_start", "contentIndex": 0},
                          {"type": "text_delta", "contentIndex": 0, "delta": "Hi!"},
                          {"type": "text_end", "contentIndex": 0}]
    assert events[4]["type"] == "done"
    assert events[4]["reason"] == "stop"
    assert set(events[4]["usage"]) == {"input", "output", "cacheRead", "cacheWrite",
                                       "totalTokens", "cost"}
    assert all("partial" not in e for e in events)


def test_provider_keys_never_appear_in_a_response(serve, monkeypatch):
    secret = "sk-live-0123456789abcdef"
    monkeypatch.setenv("FAKEPROVIDER_API_KEY", secret)
    fn = ScriptedStreamFn([assistant_error(f"401 from provider: bad key {secret}")])
    server = serve(fn, get_api_key=lambda provider: "server-key-987654321")
    result = stream_proxy(fn.model, Context([UserMessage("hi")]),
                          ProxyStreamOptions(proxy_url=server.url, auth_token=TOKEN)
                          ).result(WAIT)
    assert result.error_message == "401 from provider: bad key [redacted]"
    assert fn.calls[0].options.api_key == "server-key-987654321"


def test_raising_stream_fn_ends_with_an_error_event(serve):
    def broken(model, context, options):
        raise RuntimeError(f"kaboom with token {TOKEN}")

    fn = ScriptedStreamFn()
    server = serve(broken)
    result = stream_proxy(fn.model, Context([UserMessage("hi")]),
                          ProxyStreamOptions(proxy_url=server.url, auth_token=TOKEN)
                          ).result(WAIT)
    assert result.stop_reason == "error"
    assert result.error_message == ("The proxy's stream function raised RuntimeError: kaboom "
                                    "with token [redacted]")


def test_unterminated_stream_fn_ends_with_an_error_event(serve):
    def unterminated(model, context, options):
        stream = AssistantMessageEventStream()
        stream.end()
        return stream

    fn = ScriptedStreamFn()
    server = serve(unterminated)
    result = stream_proxy(fn.model, Context([UserMessage("hi")]),
                          ProxyStreamOptions(proxy_url=server.url, auth_token=TOKEN)
                          ).result(WAIT)
    assert result.error_message == ("The proxy's stream function ended without a done or error "
                                    "event; a stream function must always end with one.")


def test_close_aborts_live_streams_and_refuses_new_ones(serve):
    started_signals: list[AbortSignal] = []
    started = threading.Event()

    def waits(context, options):
        started_signals.append(options.signal)
        started.set()
        options.signal.wait(WAIT)
        return assistant_text("late")

    fn = ScriptedStreamFn([waits])
    server = serve(fn)
    stream = stream_proxy(fn.model, Context([UserMessage("hi")]),
                          ProxyStreamOptions(proxy_url=server.url, auth_token=TOKEN))
    results = []
    # owner: this test; joined below (the request is sent once the stream is read)
    reader = threading.Thread(target=lambda: results.append(stream.result(WAIT)),
                              name="test-proxy-reader")
    reader.start()
    assert started.wait(WAIT)
    server.app.close()
    reader.join(WAIT)
    assert not reader.is_alive()
    [result] = results
    assert result.stop_reason == "aborted"
    assert result.error_message == "The proxy server is shutting down"
    assert started_signals[0].aborted
    status, _, data = _call(server.app, json.dumps(_body(fn)).encode())
    assert status == "503 Service Unavailable"
