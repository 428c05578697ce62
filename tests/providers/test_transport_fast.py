"""The request path's shortcuts against a real local server (a raw socket server that
records the exact bytes of every request and counts accepted connections).

``_sockets.post`` sends a copy of a request prepared once per (URL, headers) instead of
``session.post``: the bytes on the wire must be the very ones ``session.post`` sends (request
line, header order, body, cookies set by earlier responses), a session whose settings
``prepare_request`` reads (auth, params, hooks, proxies, ``trust_env``, changed headers)
must behave as with ``session.post``, and the connection must still be reused.
``HttpClient.environment`` caches by URL (bounded) and still reads once per origin.
"""

from __future__ import annotations

import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import requests.adapters

from piagent.providers._pool import HttpClient
from piagent.providers._sockets import _PREPARED_LIMIT, new_session, post

from .sse_script import WAIT

_BODY = b'{"model":"m","messages":[{"role":"user","content":"hi \xc3\xa9"}]}'
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream",
            "Accept-Encoding": "identity", "User-Agent": "piagent/test",
            "Authorization": "Bearer sk-test"}


class RawServer:
    """Answers every request with a one-event SSE stream (keep-alive, chunked).

    ``?cookie=NAME`` in the request line makes the answer set the cookie ``NAME=1``.
    ``requests`` holds each request's raw head and body, ``connections`` counts accepted
    sockets.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards requests, connections, _conns, _threads
        self.requests: list[bytes] = []
        self.connections = 0
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._accept_thread = threading.Thread(target=self._accept, name="test-raw-server",
                                               daemon=True)
        self._accept_thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = self._recv(conn)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    data = self._recv(conn)
                    if not data:
                        return
                    buffer += data
                body, buffer = buffer[:length], buffer[length:]
                with self._lock:
                    self.requests.append(head + b"\r\n\r\n" + body)
                target = head.split(b"\r\n")[0].split(b" ")[1].decode()
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
                extra = b"".join(b"Set-Cookie: %s=1; Path=/\r\n" % name.encode()
                                 for name in query.get("cookie", []))
                event = b"data: {}\n\n"
                try:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n" + extra + b"\r\n"
                                 + b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
                except OSError:
                    return

    @staticmethod
    def _recv(conn: socket.socket) -> bytes:
        try:
            return conn.recv(65536)
        except OSError:
            return b""

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in [self._accept_thread, *threads]:
            thread.join(WAIT)


@pytest.fixture
def raw_server() -> Iterator[RawServer]:
    server = RawServer()
    try:
        yield server
    finally:
        server.close()


def _fast(session: requests.Session, url: str, body: bytes = _BODY,
          headers: dict[str, str] | None = None) -> None:
    response = post(session, url, body, _HEADERS if headers is None else headers,
                    timeout=(WAIT, WAIT), proxies={}, verify=True)
    assert response.ok
    assert response.content == b"data: {}\n\n"  # read to the end, as an adapter does
    response.close()


def _old(session: requests.Session, url: str, body: bytes = _BODY,
         headers: dict[str, str] | None = None) -> None:
    """What ``ProviderCall`` did before: ``session.post``."""
    response = session.post(url, data=body, headers=_HEADERS if headers is None else headers,
                            stream=True, timeout=(WAIT, WAIT), proxies={}, verify=True,
                            allow_redirects=False)
    assert response.ok
    assert response.content == b"data: {}\n\n"
    response.close()


def _both(server: RawServer, steps: list[Callable[[Callable[..., None], requests.Session], Any]],
          make: Callable[[], requests.Session] = new_session) -> tuple[list[bytes], list[bytes]]:
    """Run ``steps`` with ``session.post`` on one session, then with ``post`` on another;
    the raw requests the server saw for each."""
    for send in (_old, _fast):
        session = make()
        for step in steps:
            step(send, session)
        session.close()
    n = len(server.requests) // 2
    return server.requests[:n], server.requests[n:]


@pytest.mark.parametrize(("path", "body", "headers"), [
    ("/v1/chat/completions", _BODY, None),
    ("/v1/models/m:streamGenerateContent?alt=sse", _BODY, None),
    ("/v1/messages", b"", None),
    ("/v1/x", _BODY, {"content-type": "application/json", "user-agent": "other/1",
                      "x-api-key": "k", "Content-Length": "999", "Connection": "close"}),
    ("/v1/x", b"", {"Cookie": "mine=1", "Accept": "*/*"}),
])
def test_the_wire_request_is_the_one_session_post_sends(raw_server, path, body, headers):
    url = raw_server.url + path
    old, fast = _both(raw_server, [lambda send, s: send(s, url, body, headers)] * 3)
    assert len(old) == 3
    assert fast == old  # request line, headers in order, body: byte for byte


def test_url_credentials_are_sent_as_with_session_post(raw_server):
    url = raw_server.url.replace("http://", "http://user:p%40ss@") + "/v1/x?cookie=a"
    old, fast = _both(raw_server, [lambda send, s: send(s, url)] * 3)
    assert b"Authorization: Basic dXNlcjpwQHNz" in old[1]
    assert b"Cookie: a=1" in old[1]
    assert fast == old


def test_cookies_set_by_earlier_responses_are_sent(raw_server):
    base = raw_server.url + "/v1/x"
    steps = [lambda send, s: send(s, base + "?cookie=a"),  # prepared without cookies
             lambda send, s: send(s, base + "?cookie=a"),  # the kept one, with a=1
             lambda send, s: send(s, base + "?cookie=b"),  # prepared while a=1 is set
             lambda send, s: send(s, base),
             lambda send, s: send(s, base, b"", {"Cookie": "mine=2"})]
    old, fast = _both(raw_server, steps)
    assert b"Cookie" not in old[0]
    assert b"\r\nCookie: a=1\r\n" in old[1]
    assert b"\r\nCookie: a=1\r\n" in old[2]
    assert b"\r\nCookie: a=1; b=1\r\n" in old[3] or b"\r\nCookie: b=1; a=1\r\n" in old[3]
    assert b"\r\nCookie: mine=2\r\n" in old[4]
    assert fast == old


class _CountingAdapter(requests.adapters.HTTPAdapter):
    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def send(self, request: Any, *args: Any, **kwargs: Any) -> requests.Response:
        self.sent += 1
        return super().send(request, *args, **kwargs)


def _hook(response: requests.Response, *args: Any, **kwargs: Any) -> None:
    response.headers["X-Hooked"] = "yes"


_SETTINGS: dict[str, Callable[[requests.Session], None]] = {
    "auth": lambda s: setattr(s, "auth", ("user", "pw")),
    "params": lambda s: s.params.update({"q": "1"}),
    "hooks": lambda s: s.hooks["response"].append(_hook),
    "proxies": lambda s: s.proxies.update({"ftp": "http://127.0.0.1:9"}),
    "trust_env": lambda s: setattr(s, "trust_env", True),
    "header added": lambda s: s.headers.update({"X-Extra": "1"}),
    "header removed": lambda s: s.headers.pop("Connection"),
    "headers replaced": lambda s: setattr(s, "headers", {"X-Only": "1"}),
    "adapter mounted": lambda s: s.mount("http://127.0.0.1", _CountingAdapter()),
}


@pytest.mark.parametrize("setting", list(_SETTINGS))
def test_a_session_setting_changed_after_a_request_applies_as_with_session_post(
        raw_server, setting):
    url = raw_server.url + "/v1/x"
    seen: list[requests.Session] = []

    def change(send: Callable[..., None], session: requests.Session) -> None:
        _SETTINGS[setting](session)
        seen.append(session)

    old, fast = _both(raw_server, [lambda send, s: send(s, url), change,
                                   lambda send, s: send(s, url), lambda send, s: send(s, url)])
    assert fast == old
    if setting in ("auth", "params", "header added", "header removed", "headers replaced"):
        assert old[0] != old[1]  # the setting shows on the wire
    if setting == "auth":
        assert b"Authorization: Basic dXNlcjpwdw==" in fast[1]
    if setting == "params":
        assert fast[1].startswith(b"POST /v1/x?q=1 HTTP/1.1")


@pytest.mark.parametrize("setting", ["hooks", "adapter mounted"])
def test_hooks_and_mounted_adapters_run_on_the_fast_path(raw_server, setting):
    session = new_session()
    _fast(session, raw_server.url + "/v1/x")
    _SETTINGS[setting](session)
    response = post(session, raw_server.url + "/v1/x", _BODY, _HEADERS,
                    timeout=(WAIT, WAIT), proxies={}, verify=True)
    response.close()
    if setting == "hooks":
        assert response.headers["X-Hooked"] == "yes"
    else:
        adapter = session.get_adapter(raw_server.url)
        assert isinstance(adapter, _CountingAdapter)
        assert adapter.sent == 1
    session.close()


def test_a_plain_requests_session_works_as_before(raw_server):
    url = raw_server.url + "/v1/x?cookie=a"
    old, fast = _both(raw_server, [lambda send, s: send(s, url)] * 2, make=requests.Session)
    assert fast == old


def test_the_request_is_prepared_once_per_url_and_headers(raw_server):
    session = new_session()
    prepared: list[requests.Request] = []
    prepare = session.prepare_request

    def counting(request: requests.Request) -> requests.PreparedRequest:
        prepared.append(request)
        return prepare(request)

    session.prepare_request = counting  # type: ignore[method-assign]
    url = raw_server.url + "/v1/x"
    for _ in range(3):
        _fast(session, url)
    assert len(prepared) == 1
    _fast(session, url, headers={**_HEADERS, "Authorization": "Bearer other"})
    _fast(session, url + "?b")
    assert len(prepared) == 3
    session.headers["X-New"] = "1"  # the kept requests merged the old session headers
    _fast(session, url)
    assert len(prepared) == 4
    assert b"X-New: 1" in raw_server.requests[-1]
    for i in range(2 * _PREPARED_LIMIT):
        _fast(session, f"{url}?n={i}")
    assert len(session.prepared) <= _PREPARED_LIMIT  # type: ignore[attr-defined]
    session.close()


def test_the_connection_is_reused(raw_server):
    session = new_session()
    for i in range(4):
        _fast(session, raw_server.url + f"/v1/x?cookie=c{i % 2}")
    assert len(raw_server.requests) == 4
    assert raw_server.connections == 1
    session.close()


def test_environment_is_read_once_per_origin_and_cached_per_url_bounded(monkeypatch):
    client = HttpClient("env")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "local.test")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/ca.pem")
    first = client.environment("https://api.test/v1/a")
    assert first == ({"https": "http://proxy.invalid:3128", "no": "local.test"}, "/ca.pem")
    assert client.environment("https://local.test/v1/a") == ({}, "/ca.pem")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/other.pem")
    # the same origin keeps what was read first, for any of its URLs
    assert client.environment("https://api.test/v1/a") is first
    assert client.environment("https://api.test/v1/b?x=1") == first
    assert client.environment("https://new.test/v1") == (
        {"https": "http://proxy.invalid:3128", "no": "local.test"}, "/other.pem")
    for i in range(1000):
        assert client.environment(f"https://api.test/v1/{i}") == first
    assert len(client._by_url) <= 256  # bounded
    for i in range(1000):
        client.environment(f"https://h{i}.test/")
    assert len(client._environment) <= 256


def test_a_plain_http_origin_without_a_proxy_gets_no_ca_bundle(monkeypatch):
    """Nothing is verified there, and requests would stat() a bundle path on every request
    (a local model server's every turn); through a proxy the bundle still applies."""
    for name in ("http_proxy", "all_proxy", "ALL_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    client = HttpClient("env")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/ca.pem")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert client.environment("http://127.0.0.1:8080/v1") == ({}, True)  # bypassed
    assert client.environment("https://127.0.0.1:8443/v1") == ({}, "/ca.pem")
    assert client.environment("http://models.test/v1") == (
        {"http": "http://proxy.invalid:3128", "no": "127.0.0.1"}, "/ca.pem")
    monkeypatch.delenv("HTTP_PROXY")
    assert HttpClient("env").environment("http://models.test/v1") == ({"no": "127.0.0.1"}, True)
