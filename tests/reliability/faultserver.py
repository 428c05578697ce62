"""A local HTTP server that answers provider requests with faults, for the 4 wire APIs.

``FaultServer()`` listens on 127.0.0.1 (a free port) on its own threads. A model whose
``base_url`` is ``server.base_url(fault, api)`` has every request answered by the fault
of that name (``FAULTS``), built from a valid stream of that API (``GOOD``): the URL's
first two path segments name the fault and the API, so concurrent runs need no shared
script. Every response says ``Connection: close``, so no handler thread outlives its
response.

A fault is a function ``(w: Writer, api: str, hit: int) -> None`` that writes the
response; ``hit`` counts the requests this fault has had for this API (0 first), so a
fault can fail once and then answer well. ``Fault.expect`` is what a run must end with:

* ``"ok"``: the fault is benign: the message is "Hello world", stop reason ``stop``;
* ``"error"``: stop reason ``error`` and a non-empty error message (``says``: a piece of
  it, when the text matters);
* ``"aborted"``: the response stalls; ``server.stalled(fault, api)`` is set when it does,
  the test aborts, and the stall ends when the client goes away (or at ``close()``).

Nothing here sleeps: a stall waits on an Event in bounded slices and watches the socket.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.conftest import WAIT, StreamingHandler

APIS = ("openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai")
PROVIDER = {"openai-completions": "openai", "openai-responses": "openai",
            "anthropic-messages": "anthropic", "google-generative-ai": "google"}
# what the adapter appends to base_url is after these: /chat/completions, /responses,
# /v1/messages, /models/<id>:streamGenerateContent
_BASE_SUFFIX = {"openai-completions": "/v1", "openai-responses": "/v1",
                "anthropic-messages": "", "google-generative-ai": "/v1beta"}
KEY_HEADER = {"openai-completions": "authorization", "openai-responses": "authorization",
              "anthropic-messages": "x-api-key", "google-generative-ai": "x-goog-api-key"}
TEXT = "Hello world"
BIG = "x" * 2_000_000


def sse(obj: Any, event: str | None = None) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


# --- a valid stream per API ------------------------------------------------------------------


def _completions(text: tuple[str, ...]) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    return [chunk({"role": "assistant", "content": ""}),
            *(chunk({"content": t}) for t in text), chunk({}, "stop"),
            sse({"id": "c1", "choices": [], "usage": {"prompt_tokens": 5,
                                                      "completion_tokens": 2,
                                                      "total_tokens": 7}}),
            b"data: [DONE]\n\n"]


def _responses(text: tuple[str, ...]) -> list[bytes]:
    def ev(kind: str, **data: Any) -> bytes:
        return sse({"type": kind, **data}, event=kind)
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress",
            "content": []}
    done = {**item, "status": "completed",
            "content": [{"type": "output_text", "text": "".join(text), "annotations": []}]}
    return [ev("response.created", response={"id": "r1", "status": "in_progress"}),
            ev("response.output_item.added", output_index=0, item=item),
            *(ev("response.output_text.delta", output_index=0, content_index=0, delta=t)
              for t in text),
            ev("response.output_item.done", output_index=0, item=done),
            ev("response.completed", response={
                "id": "r1", "status": "completed",
                "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}})]


def _anthropic(text: tuple[str, ...]) -> list[bytes]:
    def ev(kind: str, **data: Any) -> bytes:
        return sse({"type": kind, **data}, event=kind)
    return [ev("message_start", message={
                "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [], "stop_reason": None,
                "usage": {"input_tokens": 5, "output_tokens": 1}}),
            ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            ev("ping"),
            *(ev("content_block_delta", index=0, delta={"type": "text_delta", "text": t})
              for t in text),
            ev("content_block_stop", index=0),
            ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
            ev("message_stop")]


def _google(text: tuple[str, ...]) -> list[bytes]:
    def chunk(t: str, finish: str | None) -> bytes:
        candidate: dict[str, Any] = {"content": {"parts": [{"text": t}], "role": "model"},
                                     "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return sse({"candidates": [candidate], "usageMetadata": {
            "promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7},
            "modelVersion": "m", "responseId": "g1"})
    return [chunk(t, "STOP" if i == len(text) - 1 else None) for i, t in enumerate(text)]


_BUILDERS: dict[str, Callable[[tuple[str, ...]], list[bytes]]] = {
    "openai-completions": _completions, "openai-responses": _responses,
    "anthropic-messages": _anthropic, "google-generative-ai": _google}


def good(api: str, text: tuple[str, ...] = ("Hello ", "world")) -> list[bytes]:
    """A valid stream of ``api`` whose message text is ``"".join(text)``, event by event."""
    return _BUILDERS[api](text)


def provider_error_event(api: str, message: str = "The server is overloaded") -> bytes:
    """The error event each API sends inside a stream."""
    if api == "openai-completions":
        return sse({"error": {"message": message, "type": "server_error", "code": None}})
    if api == "openai-responses":
        return sse({"type": "error", "error": {"code": "server_error", "message": message}},
                   event="error")
    if api == "anthropic-messages":
        return sse({"type": "error", "error": {"type": "overloaded_error", "message": message}},
                   event="error")
    return sse({"error": {"code": 503, "message": message, "status": "UNAVAILABLE"}})


def error_body(api: str, status: int, message: str) -> bytes:
    """The JSON error body each API sends with an HTTP error status."""
    if api == "anthropic-messages":
        return json.dumps({"type": "error", "error": {"type": "api_error",
                                                      "message": message}}).encode()
    if api == "google-generative-ai":
        return json.dumps({"error": {"code": status, "message": message,
                                     "status": "INVALID_ARGUMENT"}}).encode()
    return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "code": None}}).encode()


# --- the server ------------------------------------------------------------------------------


class Writer:
    """Writes one response on the raw connection (status line, headers, body, faults)."""

    def __init__(self, server: FaultServer, handler: BaseHTTPRequestHandler, key: str) -> None:
        self.server = server
        self.handler = handler
        self.key = key
        self.chunked = True

    def head(self, status: int = 200, content_type: str | None = "text/event-stream",
             headers: dict[str, str] | None = None, *, chunked: bool = True,
             length: int | None = None) -> None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Unknown"
        lines = [f"HTTP/1.1 {status} {phrase}", "Connection: close"]
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        self.chunked = chunked and length is None
        if self.chunked:
            lines.append("Transfer-Encoding: chunked")
        elif length is not None:
            lines.append(f"Content-Length: {length}")
        self.raw(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def send(self, data: bytes) -> None:
        """One body item (one HTTP chunk when chunked)."""
        if self.chunked:
            if data:
                self.raw(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.raw(data)

    def body(self, items: list[bytes]) -> None:
        for item in items:
            self.send(item)
        self.end()

    def end(self) -> None:
        if self.chunked:
            self.raw(b"0\r\n\r\n")

    def raw(self, data: bytes) -> None:
        self.handler.wfile.write(data)
        self.handler.wfile.flush()

    def reply(self, status: int, body: bytes, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        """A whole response with a Content-Length."""
        self.head(status, content_type, headers, length=len(body))
        self.raw(body)

    def reset(self) -> None:
        """Abort the connection with a TCP reset (SO_LINGER 0, then close)."""
        sock = self.handler.connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.handler.close_connection = True
        sock.close()

    def cut(self) -> None:
        """Close the connection where it is (no terminating chunk)."""
        self.handler.close_connection = True
        self.handler.connection.shutdown(socket.SHUT_RDWR)

    def stall(self) -> None:
        """Signal ``stalled(key)``, then wait until the client goes away (or ``close()``)."""
        self.server.stalled_event(self.key).set()
        sock = self.handler.connection
        for _ in range(int(WAIT * 4 / 0.05)):
            if self.server.closing.wait(0.05):
                return
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        self.server.client_closed_event(self.key).set()
                        return
                except OSError:
                    self.server.client_closed_event(self.key).set()
                    return


FaultFn = Callable[[Writer, str, int], None]


@dataclass(frozen=True)
class Fault:
    name: str
    write: FaultFn
    expect: str  # "ok" | "error" | "aborted"
    says: str = ""  # a piece of the error message, when the text matters
    doc: str = ""
    cap_ms: int = 20  # the run's max_retry_delay_ms: back-off waits stay short
    text: str = TEXT  # the message text of a benign fault
    expect_for: tuple[tuple[str, str], ...] = ()  # (api, expect) where an API differs

    def outcome(self, api: str) -> str:
        """What a run against this fault must end with for ``api``."""
        return dict(self.expect_for).get(api, self.expect)


@dataclass
class Request:
    fault: str
    api: str
    path: str
    headers: dict[str, str]
    body: bytes


class FaultServer:
    """Serves ``FAULTS`` on 127.0.0.1; see the module docstring. ``close()`` stops it.

    ``keep_requests``: how many recent requests ``requests`` keeps (``None``: all; the soak
    keeps few, so the server's own memory does not count as growth).
    """

    def __init__(self, faults: dict[str, Fault] | None = None, *,
                 keep_requests: int | None = None) -> None:
        self.faults = faults if faults is not None else FAULTS
        # guards requests, _hits, _stalled and _closed (handler threads and the test)
        self._lock = threading.Lock()
        self.requests: deque[Request] = deque(maxlen=keep_requests)
        self._hits: dict[str, int] = {}
        self._stalled: dict[str, threading.Event] = {}
        self._closed: dict[str, threading.Event] = {}
        self.closing = threading.Event()  # set by close(): every stall ends
        self.redirect_to = ""  # the other origin the redirect faults point at
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = False  # server_close() joins the handler threads
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        # owned by this server: accepts connections until close(); short poll for shutdown()
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        name="test-fault-server", daemon=True)
        self._thread.start()

    def base_url(self, fault: str, api: str) -> str:
        return f"{self.url}/{fault}/{api}{_BASE_SUFFIX[api]}"

    def stalled(self, fault: str, api: str) -> threading.Event:
        return self.stalled_event(f"{fault}/{api}")

    def client_closed(self, fault: str, api: str) -> threading.Event:
        return self.client_closed_event(f"{fault}/{api}")

    def stalled_event(self, key: str) -> threading.Event:
        with self._lock:
            return self._stalled.setdefault(key, threading.Event())

    def client_closed_event(self, key: str) -> threading.Event:
        with self._lock:
            return self._closed.setdefault(key, threading.Event())

    def requests_for(self, fault: str, api: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if (r.fault, r.api) == (fault, api)]

    def close(self) -> None:
        self.closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(WAIT)

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length)
        parts = handler.path.split("/")
        fault_name, api = (parts[1], parts[2]) if len(parts) > 2 else ("", "")
        key = f"{fault_name}/{api}"
        with self._lock:
            self.requests.append(Request(fault_name, api, handler.path,
                                         {k.lower(): v for k, v in handler.headers.items()},
                                         body))
            hit = self._hits.get(key, 0)
            self._hits[key] = hit + 1
        writer = Writer(self, handler, key)
        fault = self.faults.get(fault_name)
        if fault is None or api not in APIS:
            writer.reply(404, b'{"error":{"message":"no such fault"}}')
            return
        try:
            fault.write(writer, api, hit)
        except OSError:
            pass  # the client went away (an abort, or a reset it saw first)
        handler.close_connection = True

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(StreamingHandler):
            def do_POST(self) -> None:
                server._handle(self)

            def do_GET(self) -> None:
                server._handle(self)

            def finish(self) -> None:
                try:
                    super().finish()
                except OSError:
                    pass

        return Handler


# --- the faults ------------------------------------------------------------------------------


def _http_error(status: int, headers: dict[str, str] | None = None,
                message: str = "Something is wrong with this request") -> FaultFn:
    def write(w: Writer, api: str, hit: int) -> None:
        w.reply(status, error_body(api, status, message), headers=headers)
    return write


def _then_good(first: FaultFn, times: int = 1) -> FaultFn:
    """``first`` for the first ``times`` requests, then a valid stream."""
    def write(w: Writer, api: str, hit: int) -> None:
        if hit < times:
            first(w, api, hit)
        else:
            w.head()
            w.body(good(api))
    return write


def _ok(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body(good(api))


def _ok_bytewise(w: Writer, api: str, hit: int) -> None:
    data = b"".join(good(api))
    w.head()
    for i in range(0, len(data), 7):  # 7-byte chunks: lines, events and UTF-8 split anywhere
        w.send(data[i:i + 7])
    w.end()


def _ok_crlf(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([e.replace(b"\n", b"\r\n") for e in good(api)])


def _ok_keepalive(w: Writer, api: str, hit: int) -> None:
    w.head()
    items: list[bytes] = []
    for e in good(api):
        items += [b": keep-alive\n\n", e, b"\n"]
    w.body(items)


def _ok_close_delimited(w: Writer, api: str, hit: int) -> None:
    w.head(chunked=False)
    for e in good(api):
        w.send(e)


def _ok_content_length(w: Writer, api: str, hit: int) -> None:
    data = b"".join(good(api))
    w.head(length=len(data))
    w.raw(data)


def _ok_charset(w: Writer, api: str, hit: int) -> None:
    w.head(content_type="text/event-stream; charset=utf-8")
    w.body(good(api))


def _ok_huge_event(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body(good(api, ("Hello ", BIG, "world")))


def _ok_unknown_events(w: Writer, api: str, hit: int) -> None:
    events = good(api)
    odd = [sse({"type": "x-vendor-extension", "note": "ignore me"}, event="x-vendor"),
           b"event: x-unknown\ndata: {}\n\n", b"id: 7\nretry: 10\n\n"]
    w.head()
    w.body([events[0], *odd, *events[1:]])


def _ok_events_after_end(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([*good(api), sse({"type": "late"}), b"data: trailing garbage\n\n"])


def _retry_after_ms(w: Writer, api: str, hit: int) -> None:
    _http_error(429, {"retry-after-ms": "5"})(w, api, hit)


def _reset_at_once(w: Writer, api: str, hit: int) -> None:
    w.reset()


def _reset_mid_stream(w: Writer, api: str, hit: int) -> None:
    w.head()
    for e in good(api)[:2]:
        w.send(e)
    w.reset()


def _cut_mid_stream(w: Writer, api: str, hit: int) -> None:
    w.head()
    for e in good(api)[:2]:
        w.send(e)
    w.cut()


def _cut_mid_event(w: Writer, api: str, hit: int) -> None:
    events = good(api)
    w.head()
    w.send(events[0])
    w.send(events[1][: len(events[1]) // 2])
    w.end()


def _truncated_no_terminator(w: Writer, api: str, hit: int) -> None:
    events = good(api)
    w.head()
    for e in events[:-1]:
        w.send(e)
    w.send(events[-1].rstrip(b"\n"))  # the last event never gets its blank line
    w.end()


def _ends_early(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body(good(api)[:1 if api == "google-generative-ai" else 2])


def _no_terminal_event(w: Writer, api: str, hit: int) -> None:
    events = good(api)
    w.head()
    w.body(events[:-1] if api != "google-generative-ai" else [])


def _garbage_lines(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([b"this is not an event stream\n", b"<html>\n", b"\n", *good(api)])


def _garbage_only(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([b"this is not an event stream\n\n", b"<html><body>Hi</body></html>\n\n"])


def _invalid_json(w: Writer, api: str, hit: int) -> None:
    events = good(api)
    w.head()
    w.body([events[0], b"data: {\"choices\": [oops\n\n", *events[1:]])


def _json_not_object(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([b"data: [1, 2, 3]\n\n", b'data: "a string"\n\n', b"data: 42\n\n",
            b"data: null\n\n"])


def _wrong_shapes(w: Writer, api: str, hit: int) -> None:
    # valid JSON whose fields have the wrong types for every adapter
    odd = {"type": "response.output_text.delta", "output_index": "zero", "delta": 5,
           "choices": "none", "candidates": {"a": 1}, "index": "one",
           "delta_": None, "content_block": 7, "usage": "lots", "message": []}
    w.head()
    w.body([sse(odd, event="content_block_delta"), sse(odd, event="message_start"),
            sse(odd)])


def _deep_nesting(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n"])


def _huge_integer(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([b"data: {\"n\": " + b"9" * 10_000 + b"}\n\n"])


def _invalid_utf8(w: Writer, api: str, hit: int) -> None:
    w.head()
    events = good(api)
    w.body([events[0], b"data: {\"x\": \"\xff\xfe\xc3\"}\n\n", *events[1:]])


def _nul_bytes(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body([b"data: \x00\x00\x01\x02\n\n", b"\x00" * 64 + b"\n\n"])


def _provider_error_event(w: Writer, api: str, hit: int) -> None:
    events = good(api)
    w.head()
    w.body([*events[:2], provider_error_event(api)])


def _empty_200(w: Writer, api: str, hit: int) -> None:
    w.head(length=0)


def _empty_200_chunked(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.end()


def _wrong_content_type_json(w: Writer, api: str, hit: int) -> None:
    w.reply(200, json.dumps({"id": "x", "object": "chat.completion", "choices": []}).encode())


def _wrong_content_type_html(w: Writer, api: str, hit: int) -> None:
    w.reply(200, b"<html><body>Welcome to nginx!</body></html>", content_type="text/html")


def _no_content_type(w: Writer, api: str, hit: int) -> None:
    # no Content-Type at all: taken as an event stream
    w.head(content_type=None)
    w.body(good(api))


def _html_502(w: Writer, api: str, hit: int) -> None:
    w.reply(502, b"<html><head><title>502 Bad Gateway</title></head></html>",
            content_type="text/html")


def _empty_500(w: Writer, api: str, hit: int) -> None:
    w.reply(500, b"", content_type="text/plain")


def _huge_error_body(w: Writer, api: str, hit: int) -> None:
    w.reply(400, error_body(api, 400, "bad " * 100_000))


def _redirect(status: int, cross: bool = True) -> FaultFn:
    def write(w: Writer, api: str, hit: int) -> None:
        target = (w.server.redirect_to or "http://127.0.0.1:9") if cross else w.server.url
        w.reply(status, b"moved", content_type="text/plain",
                headers={"Location": f"{target}/ok/{api}/elsewhere"})
    return write


def _not_http(w: Writer, api: str, hit: int) -> None:
    w.raw(b"SSH-2.0-OpenSSH_9.6\r\n")
    w.cut()


def _bad_status_line(w: Writer, api: str, hit: int) -> None:
    w.raw(b"HTTP/1.1 abc Weird\r\nContent-Type: text/event-stream\r\n\r\n")
    w.cut()


def _bad_chunk_size(w: Writer, api: str, hit: int) -> None:
    events = good(api)
    w.head()
    w.send(events[0])
    w.raw(b"zz\r\nnot a chunk\r\n")
    w.cut()


def _short_content_length(w: Writer, api: str, hit: int) -> None:
    data = b"".join(good(api))
    w.head(length=len(data) + 1000)
    w.raw(data[: len(data) // 2])
    w.cut()


def _gzip_claimed(w: Writer, api: str, hit: int) -> None:
    w.head(headers={"Content-Encoding": "gzip"})
    w.body(good(api))  # not gzip at all


def _deflate_real(w: Writer, api: str, hit: int) -> None:
    # a server that compresses although we asked for identity: decoded, so benign
    data = zlib.compress(b"".join(good(api)))
    w.head(headers={"Content-Encoding": "deflate"}, length=len(data))
    w.raw(data)


def _stall_before_headers(w: Writer, api: str, hit: int) -> None:
    w.stall()


def _stall_mid_stream(w: Writer, api: str, hit: int) -> None:
    w.head()
    for e in good(api)[:2]:
        w.send(e)
    w.stall()


def _stall_in_error_body(w: Writer, api: str, hit: int) -> None:
    w.head(500, "application/json", chunked=True)
    w.send(b'{"error": {"message": "part')
    w.stall()


def _stall_in_retry_after(w: Writer, api: str, hit: int) -> None:
    if hit == 0:
        _http_error(503, {"Retry-After": "30"})(w, api, hit)
        w.server.stalled_event(w.key).set()  # the client now waits 30 s before retrying
    else:
        w.stall()


FAULTS: dict[str, Fault] = {f.name: f for f in [
    # benign: the run succeeds
    Fault("ok", _ok, "ok", doc="a valid stream"),
    Fault("ok-bytewise", _ok_bytewise, "ok", doc="valid stream in 7-byte chunks"),
    Fault("ok-crlf", _ok_crlf, "ok", doc="CRLF line endings"),
    Fault("ok-keepalive", _ok_keepalive, "ok", doc="comment keep-alives, extra blank lines"),
    Fault("ok-close-delimited", _ok_close_delimited, "ok", doc="HTTP/1.0-style body"),
    Fault("ok-content-length", _ok_content_length, "ok", doc="Content-Length body"),
    Fault("ok-charset", _ok_charset, "ok", doc="content type with charset"),
    Fault("ok-no-content-type", _no_content_type, "ok", doc="no Content-Type header"),
    Fault("ok-huge-event", _ok_huge_event, "ok", doc="a 2 MB text delta",
          text="Hello " + BIG + "world"),
    Fault("ok-unknown-events", _ok_unknown_events, "ok", doc="vendor events, id/retry fields"),
    Fault("ok-events-after-end", _ok_events_after_end, "ok", doc="junk after the end",
          expect_for=(("google-generative-ai", "error"),)),  # Gemini has no end event
    Fault("ok-deflate", _deflate_real, "ok", doc="compressed although identity was asked"),
    Fault("429-then-ok", _then_good(_http_error(429, {"Retry-After": "0"})), "ok",
          doc="429 with Retry-After: 0, then a stream"),
    Fault("429-ms-then-ok", _then_good(_retry_after_ms), "ok", doc="429 retry-after-ms"),
    Fault("503-twice-then-ok", _then_good(_http_error(503), times=2), "ok",
          doc="two 503s, then a stream (back-off)"),
    Fault("reset-then-ok", _then_good(_reset_at_once), "ok",
          doc="connection reset before the response, then a stream"),
    # HTTP errors
    Fault("400", _http_error(400), "error", "API error (400"),
    Fault("401", _http_error(401, message="invalid api key"), "error", "Check the API key"),
    Fault("403", _http_error(403), "error", "API error (403"),
    Fault("404-html", lambda w, api, hit: w.reply(404, b"<html>Not Found</html>", "text/html"),
          "error", "API error (404"),
    Fault("413", _http_error(413, message="request too large"), "error", "API error (413"),
    Fault("422", _http_error(422), "error", "API error (422"),
    Fault("429-always", _http_error(429, {"Retry-After": "0"}), "error", "API error (429"),
    Fault("429-retry-after-long", _http_error(429, {"Retry-After": "3600"}), "error",
          "retry delay"),
    Fault("429-quota", _http_error(429, message="You exceeded your quota: insufficient_quota"),
          "error", "insufficient_quota"),
    Fault("500", _http_error(500, message="internal failure"), "error", "API error (500"),
    Fault("500-empty", _empty_500, "error", "API error (500"),
    Fault("502-html", _html_502, "error", "API error (502"),
    Fault("503-should-retry-false", _http_error(503, {"x-should-retry": "false"}), "error",
          "(503"),
    Fault("529-overloaded", _http_error(529, message="Overloaded"), "error", "Overloaded"),
    Fault("400-huge-body", _huge_error_body, "error", "…"),
    # redirects: never followed
    Fault("301-cross-origin", _redirect(301), "error", "with a redirect to"),
    Fault("307-cross-origin", _redirect(307), "error", "with a redirect to"),
    Fault("308-same-origin", _redirect(308, cross=False), "error", "with a redirect to"),
    # wrong kind of response
    Fault("200-empty", _empty_200, "error"),
    Fault("200-empty-chunked", _empty_200_chunked, "error"),
    Fault("content-type-json", _wrong_content_type_json, "error", "instead of an event stream"),
    Fault("content-type-html", _wrong_content_type_html, "error", "instead of an event stream"),
    Fault("not-http", _not_http, "error"),
    Fault("bad-status-line", _bad_status_line, "error"),
    # broken transport
    Fault("reset-at-once", _reset_at_once, "error", "Could not connect"),
    Fault("reset-mid-stream", _reset_mid_stream, "error"),
    Fault("cut-mid-stream", _cut_mid_stream, "error"),
    Fault("cut-mid-event", _cut_mid_event, "error"),
    Fault("bad-chunk-size", _bad_chunk_size, "error"),
    Fault("short-content-length", _short_content_length, "error"),
    Fault("gzip-claimed", _gzip_claimed, "error"),
    # broken event streams
    Fault("truncated-no-terminator", _truncated_no_terminator, "ok",
          doc="the last event lacks its blank line; its data is whole, so it counts"),
    Fault("ends-early", _ends_early, "error"),
    Fault("no-terminal-event", _no_terminal_event, "error",
          expect_for=(("openai-completions", "ok"),)),  # [DONE] missing after finish_reason
    Fault("garbage-lines", _garbage_lines, "ok", doc="non-SSE lines are ignored, as SSE says"),
    Fault("garbage-only", _garbage_only, "error"),
    Fault("invalid-json", _invalid_json, "error", "not valid JSON"),
    Fault("json-not-object", _json_not_object, "error"),
    Fault("wrong-shapes", _wrong_shapes, "error"),
    Fault("deep-nesting", _deep_nesting, "error"),
    Fault("huge-integer", _huge_integer, "error"),
    Fault("invalid-utf8", _invalid_utf8, "error"),
    Fault("nul-bytes", _nul_bytes, "error"),
    Fault("provider-error-event", _provider_error_event, "error", "overloaded"),
    # stalls, ended by an abort
    Fault("stall-before-headers", _stall_before_headers, "aborted"),
    Fault("stall-mid-stream", _stall_mid_stream, "aborted"),
    Fault("stall-in-error-body", _stall_in_error_body, "aborted"),
    Fault("stall-in-retry-wait", _stall_in_retry_after, "aborted", cap_ms=60_000,
          doc="503 with Retry-After: 30; the abort ends the wait"),
]}
