"""Hostile and careless clients of the proxy server, over raw sockets on 127.0.0.1.

``ProxyServer`` must not let a client hold a thread for ever: headers that trickle in and
bodies that stop half way get 408 within their deadlines (a trickle does not stretch them),
a chunked body is read within the same limits, requests past ``max_connections`` get 503
with ``Retry-After``, a burst of 50 clients is answered in full, bad bodies get 400/413/415
with a reason (never a traceback), a raising ``get_api_key`` becomes an error event, and
``close()`` returns within its bound with stuck clients connected. Every test ends with
the thread count back where it started.

The waits are socket timeouts and Events bounded by the suite's ``WAIT``, never sleeps.
"""

from __future__ import annotations

import _thread
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from piagent.messages import UserMessage
from piagent.proxy import ProxyApp, ProxyServer, ProxyStreamOptions, serve_proxy, stream_proxy
from piagent.proxy._protocol import context_to_dict, model_to_dict
from piagent.stream import Context
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT

from .conftest import SCRIPTED_BASE_URLS

TOKEN = "reliability-token-1"
FAST = 0.3  # header/body deadlines in tests that expect a 408


# --- helpers -------------------------------------------------------------------------------


def _body(fn: ScriptedStreamFn) -> bytes:
    return json.dumps({"model": model_to_dict(fn.model),
                       "context": context_to_dict(Context([UserMessage("hi")])),
                       "options": {}}).encode()


def _head(*, length: int | None = None, content_type: str = "application/json",
          extra: str = "") -> bytes:
    lines = ["POST /api/stream HTTP/1.1", "Host: 127.0.0.1",
             f"Authorization: Bearer {TOKEN}", f"Content-Type: {content_type}"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def _request(body: bytes, **kwargs: Any) -> bytes:
    return _head(length=len(body), **kwargs) + body


def _connect(server: ProxyServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
    sock.settimeout(WAIT)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (each recv bounded by WAIT)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def _answer(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def _exchange(server: ProxyServer, data: bytes) -> tuple[int, dict[str, str], bytes]:
    with _connect(server) as sock:
        sock.sendall(data)
        return _answer(_read_all(sock))


def _error(body: bytes) -> str:
    return str(json.loads(body)["error"])


def _events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(frame[len(b"data: "):]) for frame in body.split(b"\n\n")
            if frame.startswith(b"data: ")]


def _trickle_until_answered(sock: socket.socket, data: bytes) -> bytes:
    """Send ``data`` one byte per 50 ms (a recv timeout is the pause) until the server
    answers; what it answered. Fails if all of ``data`` went out without an answer."""
    sock.settimeout(0.05)
    try:
        for index in range(len(data)):
            sock.sendall(data[index:index + 1])
            try:
                first = sock.recv(65536)
            except TimeoutError:
                continue
            sock.settimeout(WAIT)
            return first + _read_all(sock)
    finally:
        sock.settimeout(WAIT)
    pytest.fail("the server never answered a client that trickled its request")


def _request_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("piagent-proxy")]


@contextmanager
def _serving(fn: Any = None, app: ProxyApp | None = None,
             **limits: Any) -> Iterator[ProxyServer]:
    """A started server; at the end it is closed and the thread count must be back."""
    baseline = threading.active_count()
    if app is None:
        app = ProxyApp(fn if fn is not None else ScriptedStreamFn(), auth_tokens=TOKEN,
                       allowed_base_urls=SCRIPTED_BASE_URLS,
                       heartbeat_s=0.05)
    server = ProxyServer(app, **limits).start()
    try:
        yield server
    finally:
        server.close(timeout=WAIT)
        for thread in _request_threads():
            thread.join(WAIT)
        assert [t.name for t in _request_threads()] == []
        assert threading.active_count() == baseline


@pytest.fixture
def fn() -> ScriptedStreamFn:
    return ScriptedStreamFn([assistant_text("ok")] * 60)


# --- deadlines -------------------------------------------------------------------------------


def test_headers_that_never_end_get_408(fn):
    with _serving(fn, header_timeout=FAST) as server, _connect(server) as sock:
        sock.sendall(b"POST /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        status, headers, body = _answer(_read_all(sock))
    assert status == 408
    assert headers["connection"] == "close"
    assert _error(body) == ("The request line and headers did not arrive within 0.3 s "
                            "(ProxyServer header_timeout); send them at once.")
    assert fn.call_count == 0


def test_trickled_headers_do_not_stretch_the_deadline(fn):
    """A byte every 50 ms would satisfy a per-read timeout for ever; the deadline holds."""
    with _serving(fn, header_timeout=FAST) as server, _connect(server) as sock:
        status, _, body = _answer(_trickle_until_answered(sock, _request(_body(fn)) * 50))
    assert status == 408
    assert "ProxyServer header_timeout" in _error(body)
    assert fn.call_count == 0


def test_partial_body_gets_408(fn):
    body = _body(fn)
    with _serving(fn, body_timeout=FAST) as server, _connect(server) as sock:
        sock.sendall(_head(length=len(body)) + body[:-10])
        status, _, answer = _answer(_read_all(sock))
    assert status == 408
    assert _error(answer) == ("The request body did not arrive within 0.3 s "
                              "(ProxyServer body_timeout); send it at once.")
    assert fn.call_count == 0


def test_trickled_body_does_not_stretch_the_deadline(fn):
    body = _body(fn)
    with _serving(fn, body_timeout=FAST) as server, _connect(server) as sock:
        sock.sendall(_head(length=len(body)))
        status, _, answer = _answer(_trickle_until_answered(sock, body))
    assert status == 408
    assert "ProxyServer body_timeout" in _error(answer)


def test_thirty_stuck_clients_are_released_and_others_served_meanwhile(fn):
    body = _body(fn)
    with _serving(fn, body_timeout=1.0) as server:
        stuck = [_connect(server) for _ in range(30)]
        try:
            for sock in stuck:
                sock.sendall(_head(length=len(body)) + body[:-10])
            # while they are held, a well-behaved client is served
            message = stream_proxy(fn.model, Context([UserMessage("hi")]), ProxyStreamOptions(
                proxy_url=server.url, auth_token=TOKEN)).result(WAIT)
            assert message.text == "ok"
            statuses = [_answer(_read_all(sock))[0] for sock in stuck]
        finally:
            for sock in stuck:
                sock.close()
        assert statuses == [408] * 30
        for thread in _request_threads():
            if thread.name.startswith("piagent-proxy-request"):
                thread.join(WAIT)
        assert [t.name for t in _request_threads()
                if t.name.startswith("piagent-proxy-request")] == []


# --- chunked bodies ------------------------------------------------------------------------------


def _chunked(body: bytes, size: int = 100) -> bytes:
    chunks = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def test_chunked_body_is_read_and_answered(fn):
    with _serving(fn) as server:
        status, headers, body = _exchange(
            server, _head(extra="Transfer-Encoding: chunked\r\n") + _chunked(_body(fn)))
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert [e["type"] for e in _events(body)][-1] == "done"
    assert fn.calls[0].context.messages[0].content == "hi"


def test_chunked_body_over_the_limit_is_413(fn):
    app = ProxyApp(fn, auth_tokens=TOKEN, allowed_base_urls=SCRIPTED_BASE_URLS, max_body_bytes=1000)
    with _serving(app=app) as server:
        status, _, body = _exchange(server, _head(extra="Transfer-Encoding: chunked\r\n")
                                    + _chunked(b"x" * 5000))
    assert status == 413
    assert _error(body) == ("Request body exceeds the limit of 1000 bytes "
                            "(ProxyApp max_body_bytes).")
    assert fn.call_count == 0


def test_chunked_body_that_stops_gets_408(fn):
    with _serving(fn, body_timeout=FAST) as server, _connect(server) as sock:
        sock.sendall(_head(extra="Transfer-Encoding: chunked\r\n") + b"64\r\n" + b"x" * 10)
        status, _, body = _answer(_read_all(sock))
    assert status == 408
    assert "ProxyServer body_timeout" in _error(body)


@pytest.mark.parametrize(("head", "status", "reason"), [
    (_head(extra="Transfer-Encoding: gzip, chunked\r\n"), 501,
     "Transfer-Encoding 'gzip, chunked' is not supported; send the body with Content-Length "
     "or Transfer-Encoding: chunked."),
    (_head(length=10, extra="Transfer-Encoding: chunked\r\n"), 400,
     "The request has both Transfer-Encoding and Content-Length; send one of them."),
    (_head(extra="Content-Length: ten\r\n"), 400, "Content-Length 'ten' is not a number of bytes."),
    (_head(extra="Transfer-Encoding: chunked\r\n") + b"zz\r\n", 400,
     "Malformed chunked body: bad chunk-size line b'zz\\r\\n'."),
])
def test_malformed_framing_is_answered(fn, head, status, reason):
    with _serving(fn) as server:
        got, _, body = _exchange(server, head)
    assert (got, _error(body)) == (status, reason)
    assert fn.call_count == 0


def test_declared_body_over_the_limit_is_413_and_the_answer_arrives(fn):
    """Answered before the body is read; the lingering close keeps the answer from being
    destroyed by a reset while the client is still sending."""
    app = ProxyApp(fn, auth_tokens=TOKEN, allowed_base_urls=SCRIPTED_BASE_URLS, max_body_bytes=1000)
    with _serving(app=app) as server, _connect(server) as sock:
        sock.sendall(_head(length=200_000) + b"x" * 100_000)
        status, _, body = _answer(_read_all(sock))
    assert status == 413
    assert _error(body) == ("Request body is 200000 bytes; the limit is 1000 bytes "
                            "(ProxyApp max_body_bytes).")


# --- many clients -------------------------------------------------------------------------------


def test_fifty_clients_at_once_are_all_answered(fn):
    results: list[int | str] = []
    lock = threading.Lock()  # guards results, appended by the client threads
    barrier = threading.Barrier(50)

    with _serving(fn) as server:
        request = _request(_body(fn))

        def client() -> None:
            try:
                barrier.wait(WAIT)
                with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as s:
                    s.sendall(request)
                    status, _, body = _answer(_read_all(s))
                    outcome: int | str = status if _events(body)[-1]["type"] == "done" \
                        else "no done"
            except OSError as exc:
                outcome = type(exc).__name__
            with lock:
                results.append(outcome)

        # owner: this test; all joined below
        clients = [threading.Thread(target=client, name=f"test-client-{i}") for i in range(50)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(WAIT * 2)
    assert sorted(results, key=str) == [200] * 50
    assert fn.call_count == 50


def test_requests_past_max_connections_get_503_with_retry_after(fn):
    body = _body(fn)
    with _serving(fn, max_connections=2, body_timeout=WAIT * 2) as server:
        held = [_connect(server) for _ in range(2)]
        try:
            for sock in held:
                sock.sendall(_head(length=len(body)) + body[:-10])
            # connections are accepted in order: the two are held when the third comes
            status, headers, answer = _exchange(server, _request(body))
            assert status == 503
            assert headers["retry-after"] == "1"
            assert _error(answer) == (
                "The proxy server is serving its limit of 2 concurrent requests "
                "(ProxyServer max_connections); retry in 1 s.")
            for sock in held:  # the held clients finish and are served
                sock.sendall(body[-10:])
            assert [_answer(_read_all(sock))[0] for sock in held] == [200, 200]
        finally:
            for sock in held:
                sock.close()
        for thread in _request_threads():  # their threads end once the connections close
            if thread.name.startswith("piagent-proxy-request"):
                thread.join(WAIT)
        status, _, _ = _exchange(server, _request(body))
        assert status == 200


# --- bodies -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "reason"), [
    (b"[" * 100_000, "Request body is JSON nested more than 100 levels deep; the proxy "
                     "refuses it. Flatten the deepest value."),
    (b"[" * 150 + b"]" * 150, "Request body is JSON nested more than 100 levels deep; the "
                              "proxy refuses it. Flatten the deepest value."),
    (b'{"model": ', "Request body is not valid JSON: Expecting value: line 1 column 11 "
                    "(char 10)."),
    (b"\x80abc", "Request body is not valid JSON: 'utf-8' codec can't decode byte 0x80 in "
                  "position 0: invalid start byte."),
])
def test_unparsable_or_too_deep_json_is_400_with_a_reason(fn, body, reason):
    with _serving(fn) as server:
        status, headers, answer = _exchange(server, _request(body))
        assert status == 400
        assert headers["content-type"] == "application/json; charset=utf-8"
        assert _error(answer) == reason
        assert b"Traceback" not in answer
        assert _exchange(server, _request(_body(fn)))[0] == 200  # still serving


@pytest.mark.parametrize(("content_type", "reason"), [
    ("text/plain", "Content-Type 'text/plain' is not supported; the proxy accepts only "
                   "'Content-Type: application/json'."),
    ("application/x-www-form-urlencoded", "Content-Type 'application/x-www-form-urlencoded' "
     "is not supported; the proxy accepts only 'Content-Type: application/json'."),
])
def test_a_body_that_is_not_json_is_415(fn, content_type, reason):
    with _serving(fn) as server:
        status, headers, answer = _exchange(server, _request(_body(fn),
                                                             content_type=content_type))
    assert status == 415
    assert headers["accept-post"] == "application/json"
    assert _error(answer) == reason
    assert fn.call_count == 0


def test_a_body_without_content_type_is_415(fn):
    request = _request(_body(fn)).replace(b"Content-Type: application/json\r\n", b"")
    with _serving(fn) as server:
        status, _, answer = _exchange(server, request)
    assert status == 415
    assert _error(answer) == ("The request has no Content-Type; the proxy accepts only "
                              "'Content-Type: application/json'.")


def test_json_with_a_charset_is_accepted(fn):
    with _serving(fn) as server:
        status, _, _ = _exchange(server, _request(
            _body(fn), content_type="Application/JSON; charset=utf-8"))
    assert status == 200


def test_an_application_that_raises_gets_500_without_a_traceback(caplog):
    def broken(environ: Any, start_response: Any) -> Any:
        raise FileNotFoundError("/etc/secret-config.toml")

    with _serving(app=broken) as server:  # type: ignore[arg-type]
        status, _, body = _exchange(server, _request(b"{}"))
    assert status == 500
    assert b"secret-config" not in body and b"Traceback" not in body
    assert "The WSGI application failed" in caplog.text
    assert "FileNotFoundError: /etc/secret-config.toml" in caplog.text


# --- get_api_key ---------------------------------------------------------------------------------


def test_a_raising_get_api_key_becomes_one_error_event(fn, monkeypatch):
    secret = "sk-vault-0123456789abcdef"
    monkeypatch.setenv("VAULT_API_KEY", secret)
    asked: list[str] = []

    def get_api_key(provider: str) -> str:
        asked.append(provider)
        raise ValueError(f"the vault is sealed (token {secret})")

    app = ProxyApp(fn, auth_tokens=TOKEN,
                   allowed_base_urls=SCRIPTED_BASE_URLS, get_api_key=get_api_key, heartbeat_s=0.05)
    with _serving(app=app) as server:
        options = ProxyStreamOptions(proxy_url=server.url, auth_token=TOKEN)
        message = stream_proxy(fn.model, Context([UserMessage("hi")]), options).result(WAIT)
        assert message.stop_reason == "error"
        assert message.error_message == (
            "The proxy server could not get an API key for provider scripted: ValueError: "
            "the vault is sealed (token [redacted])")
        assert asked == ["scripted"]
        status, _, body = _exchange(server, _request(_body(fn)))
        assert status == 200
        assert [e["type"] for e in _events(body)] == ["error"]  # exactly one event
    assert fn.call_count == 0
    assert asked == ["scripted", "scripted"]


def test_get_api_key_is_called_once_per_request_even_when_the_stream_fails(monkeypatch):
    asked: list[str] = []

    def get_api_key(provider: str) -> str:
        asked.append(provider)
        return "server-key-123456789"

    def failing(model: Any, context: Any, options: Any) -> Any:
        raise RuntimeError(f"provider rejected {options.api_key}")

    app = ProxyApp(failing, auth_tokens=TOKEN,
                   allowed_base_urls=SCRIPTED_BASE_URLS, get_api_key=get_api_key, heartbeat_s=0.05)
    fn = ScriptedStreamFn()
    with _serving(app=app) as server:
        message = stream_proxy(fn.model, Context([UserMessage("hi")]), ProxyStreamOptions(
            proxy_url=server.url, auth_token=TOKEN)).result(WAIT)
    assert message.error_message == ("The proxy's stream function raised RuntimeError: "
                                     "provider rejected [redacted]")
    assert asked == ["scripted"]


def test_get_api_key_returning_a_non_string_is_reported(fn):
    app = ProxyApp(fn, auth_tokens=TOKEN,
                   allowed_base_urls=SCRIPTED_BASE_URLS,
                   get_api_key=lambda provider: 42,  # type: ignore
                   heartbeat_s=0.05)
    with _serving(app=app) as server:
        message = stream_proxy(fn.model, Context([UserMessage("hi")]), ProxyStreamOptions(
            proxy_url=server.url, auth_token=TOKEN)).result(WAIT)
    assert message.error_message == ("The proxy server could not get an API key for provider "
                                     "scripted: its get_api_key returned int, not a str or "
                                     "None.")


# --- close --------------------------------------------------------------------------------------


def _closing(server: ProxyServer, timeout: float) -> Callable[[], bool]:
    """Run ``server.close(timeout)`` on a thread; returns ``finished()`` (bounded join)."""
    # owner: this test; joined by finished()
    thread = threading.Thread(target=server.close, args=(timeout,), name="test-close")
    thread.start()

    def finished() -> bool:
        thread.join(timeout + WAIT)
        return not thread.is_alive()

    return finished


def test_close_returns_with_stuck_clients_and_aborts_live_streams():
    started = threading.Event()

    def waits(context: Any, options: Any) -> Any:
        started.set()
        options.signal.wait(WAIT)
        return assistant_text("late")

    fn = ScriptedStreamFn([waits])
    body = _body(fn)
    baseline = threading.active_count()
    server = ProxyServer(ProxyApp(fn, auth_tokens=TOKEN,
                                  allowed_base_urls=SCRIPTED_BASE_URLS, heartbeat_s=0.05),
                         header_timeout=60, body_timeout=60).start()
    stuck = [_connect(server) for _ in range(6)]
    live = _connect(server)
    try:
        for index, sock in enumerate(stuck):  # half send part of the headers, half of the body
            sock.sendall(_head(length=len(body))[:20] if index % 2 else
                         _head(length=len(body)) + body[:-10])
        live.sendall(_request(body))
        assert started.wait(WAIT)
        finished = _closing(server, 2.0)
        assert finished()  # does not hang: within its bound (plus slack), not 60 s
        for sock in stuck:  # the stuck clients see the connection closed, no answer
            assert _read_all(sock) == b""
        status, _, answer = _answer(_read_all(live))
        assert status == 200
        [*_, last] = _events(answer)
        assert last["type"] == "error"
        assert last["reason"] == "aborted"
        assert last["errorMessage"] == "The proxy server is shutting down"
        with pytest.raises(OSError):  # no longer listening
            socket.create_connection(("127.0.0.1", server.port), timeout=WAIT).close()
    finally:
        for sock in [*stuck, live]:
            sock.close()
    for thread in _request_threads():
        thread.join(WAIT)
    assert threading.active_count() == baseline


def test_close_is_bounded_even_when_a_stream_function_ignores_the_abort():
    release = threading.Event()
    started = threading.Event()

    def stubborn(context: Any, options: Any) -> Any:
        started.set()
        release.wait(WAIT * 3)  # ignores options.signal
        return assistant_text("too late")

    fn = ScriptedStreamFn([stubborn])
    baseline = threading.active_count()
    server = ProxyServer(ProxyApp(fn, auth_tokens=TOKEN,
                                  allowed_base_urls=SCRIPTED_BASE_URLS, heartbeat_s=0.05)).start()
    with _connect(server) as sock:
        sock.sendall(_request(_body(fn)))
        assert started.wait(WAIT)
        finished = _closing(server, 0.5)
        try:
            assert finished()  # returned although a request thread is still alive
            assert any(t.is_alive() for t in _request_threads())
        finally:
            release.set()
    for thread in _request_threads():
        thread.join(WAIT)
    assert threading.active_count() == baseline


def test_close_before_serving_and_twice_returns():
    server = ProxyServer(ProxyApp(ScriptedStreamFn(), auth_tokens=TOKEN,
                                  allowed_base_urls=SCRIPTED_BASE_URLS))
    server.close(timeout=WAIT)
    server.close(timeout=WAIT)
    server.serve_forever()  # closed: returns at once


def test_close_right_after_start_stops_the_serving_thread():
    baseline = threading.active_count()
    for _ in range(20):
        ProxyServer(ProxyApp(ScriptedStreamFn(), auth_tokens=TOKEN,
                             allowed_base_urls=SCRIPTED_BASE_URLS)).start().close(WAIT)
    assert [t.name for t in _request_threads()] == []
    assert threading.active_count() == baseline


def test_serving_twice_is_refused(fn):
    with _serving(fn) as server:
        assert _exchange(server, _request(_body(fn)))[0] == 200  # its thread is serving
        with pytest.raises(RuntimeError, match="already serving"):
            server.serve_forever()


@pytest.mark.usefixtures("sigint_raises")  # also from a shell ignoring SIGINT
def test_ctrl_c_in_serve_proxy_returns_with_a_stuck_client(fn):
    """``piagent proxy`` runs ``serve_proxy``; Ctrl-C must not wait for a stuck client
    (its deadlines here are 60 s, past the suite's per-test timeout)."""
    stuck: list[socket.socket] = []
    served: list[int] = []

    def client(port: int) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
            stuck.append(sock)
            sock.sendall(_head(length=100) + b"{")
            # connections are accepted in order: once this one is answered, the stuck one
            # has its request thread
            with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as other:
                other.sendall(_request(_body(fn)))
                served.append(_answer(_read_all(other))[0])
        finally:
            _thread.interrupt_main()  # what Ctrl-C does

    threads: list[threading.Thread] = []

    def ready(url: str) -> None:
        # owner: this test; joined below
        threads.append(threading.Thread(target=client, args=(int(url.rsplit(":", 1)[1]),),
                                        name="test-ctrl-c-client"))
        threads[0].start()

    baseline = threading.active_count()
    try:
        with pytest.raises(KeyboardInterrupt):
            serve_proxy(ProxyApp(fn, auth_tokens=TOKEN,
                                 allowed_base_urls=SCRIPTED_BASE_URLS), "127.0.0.1", 0, ready=ready,
                        close_timeout=1.0, header_timeout=60, body_timeout=60)
        threads[0].join(WAIT)
        assert served == [200]
        assert _read_all(stuck[0]) == b""  # closed by the server, unanswered
    finally:
        for sock in stuck:
            sock.close()
    for thread in _request_threads():
        thread.join(WAIT)
    assert threading.active_count() == baseline


@pytest.mark.parametrize(("name", "value"), [
    ("header_timeout", 0), ("body_timeout", -1.0), ("write_timeout", float("inf")),
    ("max_connections", 0), ("max_connections", 2.5), ("backlog", True),
    ("max_body_bytes", 0),
])
def test_limits_are_checked(name, value):
    with pytest.raises(ValueError, match=f"^{name} must be a positive"):
        ProxyServer(ProxyApp(ScriptedStreamFn(), auth_tokens=TOKEN,
                             allowed_base_urls=SCRIPTED_BASE_URLS), **{name: value})


def test_the_listen_backlog_is_somaxconn_by_default():
    server = ProxyServer(ProxyApp(ScriptedStreamFn(), auth_tokens=TOKEN,
                                  allowed_base_urls=SCRIPTED_BASE_URLS))
    try:
        assert server.backlog == socket.SOMAXCONN
    finally:
        server.close(timeout=WAIT)

