"""``ProxyApp``: a WSGI application that runs a stream function for remote clients.

It serves ``POST /api/stream`` for any WSGI host (the standard library's server through
``ProxyServer``/``serve_proxy``, gunicorn, Flask, Django). The provider keys stay on the
server; the answer is pi's proxy event stream, so a TypeScript pi client can use it too.
Bad input is answered (401, 415, 413, 400, 404, 405) before the stream function is called.
``ProxyServer`` adds what a WSGI application cannot do itself: deadlines for the request
headers and body (408), a bound on concurrent requests (503), and a bounded ``close()``.
"""

from __future__ import annotations

import hmac
import io
import itertools
import json
import logging
import os
import queue
import re
import selectors
import socket
import sys
import threading
import time
import wsgiref.simple_server
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import IO, Any, cast

from ..abort import AbortController
from ..errors import ProxyProtocolError
from ..messages import AssistantMessage
from ..models import Model
from ..providers.kit import redact
from ..stream import Context, ErrorEvent, StreamFn, StreamOptions
from ._protocol import (
    context_from_dict,
    encode_sse,
    model_from_dict,
    options_from_dict,
    proxy_event_to_dict,
    validate_request,
)

__all__ = ["ProxyApp", "ProxyServer", "serve_proxy"]

_log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
"""The WSGI ``start_response`` callable."""

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_JSON_DEPTH = 100
"""Request bodies whose JSON nests arrays/objects deeper than this are answered 400."""
ENDPOINT = "/api/stream"
_CLOSE_TIMEOUT_S = 10.0  # how long close() waits for an aborted stream function to return
_SECRET_ENV = re.compile(r"(API_KEY|_TOKEN|_SECRET|SECRET_KEY)$")
_pump_ids = itertools.count(1)


class ProxyApp:
    """A WSGI application serving ``POST /api/stream`` with ``stream_fn`` behind it.

    Args:
        stream_fn: the stream function that calls the model; default
            ``piagent.providers.stream_simple`` (imported on first use).
        auth_tokens: the bearer tokens clients may send (one string, or several, to rotate
            them). Compared with ``hmac.compare_digest``.
        max_body_bytes: larger request bodies get 413 without being read.
        get_api_key: ``provider -> key`` for the provider request, called once per request
            on its pump thread; default: the stream function's own lookup (the provider's
            environment variable). If it raises, the client gets an ``error`` event "The
            proxy server could not get an API key for provider X: <Type>: <message>".
        resolve_model: called with the decoded ``Model``; return the model to use, or raise
            ``ValueError`` (answered 400). Use it to pin base URLs: a client that may choose
            ``baseUrl`` can send the server's provider key to any host.
        heartbeat_s: an SSE comment is written after this many silent seconds, which keeps
            intermediaries from timing out and lets the server notice a client that left.

    A client that disconnects aborts the provider request: the WSGI server's failed write
    (or its ``close()`` of the response) fires the request's abort signal.

    Thread safety: one instance serves concurrent requests; each streamed response owns one
    pump thread (named ``piagent-proxy-pump-<n>``) that runs the stream function and is
    joined when the response closes. ``close()`` may be called from any thread.
    """

    def __init__(self, stream_fn: StreamFn | None = None, *,
                 auth_tokens: str | Iterable[str],
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 get_api_key: Callable[[str], str | None] | None = None,
                 resolve_model: Callable[[Model], Model] | None = None,
                 heartbeat_s: float = 15.0) -> None:
        tokens = (auth_tokens,) if isinstance(auth_tokens, str) else tuple(auth_tokens)
        if not tokens or not all(isinstance(t, str) and t for t in tokens):
            msg = ("ProxyApp needs at least one non-empty auth token, e.g. "
                   "ProxyApp(auth_tokens=[os.environ['PIAGENT_PROXY_TOKEN']]).")
            raise ValueError(msg)
        if max_body_bytes <= 0:
            msg = f"max_body_bytes must be positive, got {max_body_bytes!r}."
            raise ValueError(msg)
        self._stream_fn = stream_fn
        self._tokens = tuple(t.encode("utf-8") for t in tokens)
        self.max_body_bytes = max_body_bytes
        self.get_api_key = get_api_key
        self.resolve_model = resolve_model
        self.heartbeat_s = heartbeat_s
        # guards _live: responses being streamed, so close() can abort them
        self._live_lock = threading.Lock()
        self._live: set[_StreamBody] = set()
        self._closed = False

    @property
    def stream_fn(self) -> StreamFn:
        """The stream function requests run (``stream_simple`` unless one was given)."""
        if self._stream_fn is None:
            from ..providers import stream_simple

            self._stream_fn = stream_simple
        return self._stream_fn

    # --- WSGI ------------------------------------------------------------------------------

    def __call__(self, environ: Mapping[str, Any],
                 start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET").upper()
        if path.rstrip("/") != ENDPOINT:
            return _json(start_response, "404 Not Found",
                         f"Not found: {path!r}. The proxy serves only POST {ENDPOINT}.")
        if method != "POST":
            return _json(start_response, "405 Method Not Allowed",
                         f"Method {method} is not allowed: use POST {ENDPOINT}.",
                         [("Allow", "POST")])
        if not self._authorised(environ.get("HTTP_AUTHORIZATION", "")):
            return _json(start_response, "401 Unauthorized", self._auth_problem(environ),
                         [("WWW-Authenticate", 'Bearer realm="piagent-proxy"')])
        if self._closed:
            return _json(start_response, "503 Service Unavailable",
                         "The proxy is shutting down; retry on another instance.")
        problem = _content_type_problem(str(environ.get("CONTENT_TYPE") or ""))
        if problem is not None:
            return _json(start_response, "415 Unsupported Media Type", problem,
                         [("Accept-Post", "application/json")])
        try:
            body = self._read_body(environ)
        except TimeoutError:
            return _json(start_response, "408 Request Timeout",
                         "The request body did not arrive in time; send the whole body at once.")
        if isinstance(body, str):
            return _json(start_response, "413 Content Too Large", body)
        try:
            model, context, options = self._decode(body)
        except ProxyProtocolError as exc:
            return _json(start_response, "400 Bad Request", str(exc))
        stream = _StreamBody(self, model, context, options)
        start_response("200 OK", [
            ("Content-Type", "text/event-stream; charset=utf-8"),
            ("Cache-Control", "no-cache"),
            ("X-Accel-Buffering", "no"),  # nginx: do not buffer the stream
        ])
        return stream

    def _authorised(self, header: str) -> bool:
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        given = token.strip().encode("utf-8")
        ok = False
        for expected in self._tokens:  # compare with every token: timing says nothing
            ok |= hmac.compare_digest(given, expected)
        return ok

    @staticmethod
    def _auth_problem(environ: Mapping[str, Any]) -> str:
        header = str(environ.get("HTTP_AUTHORIZATION", "")).strip()
        if not header:
            return "Missing bearer token: send 'Authorization: Bearer <token>'."
        if not header.lower().startswith("bearer "):
            return "The Authorization header must use the Bearer scheme: 'Bearer <token>'."
        return "Invalid bearer token: check the token given to the proxy and to the client."

    def _read_body(self, environ: Mapping[str, Any]) -> bytes | str:
        """The request body, or (as a ``str``) why it is too large."""
        limit = self.max_body_bytes
        stream = environ["wsgi.input"]
        raw_length = environ.get("CONTENT_LENGTH") or ""
        try:
            length = int(raw_length) if raw_length.strip() else None
        except ValueError:
            length = None
        if length is not None and length > limit:
            return (f"Request body is {length} bytes; the limit is {limit} bytes "
                    "(ProxyApp max_body_bytes).")
        if length is not None:
            data: bytes = stream.read(length) if length > 0 else b""
            return data
        data = stream.read(limit + 1)  # no length (chunked): read one byte past the limit
        if len(data) > limit:
            return f"Request body exceeds the limit of {limit} bytes (ProxyApp max_body_bytes)."
        return data

    def _decode(self, body: bytes) -> tuple[Model, Context, dict[str, Any]]:
        too_deep = (f"Request body is JSON nested more than {MAX_JSON_DEPTH} levels deep; "
                    "the proxy refuses it. Flatten the deepest value.")
        try:
            data = json.loads(body)
        except ValueError as exc:  # UnicodeDecodeError included
            msg = f"Request body is not valid JSON: {exc}."
            raise ProxyProtocolError(msg) from exc
        except RecursionError as exc:  # deeper than the interpreter's stack allows
            _log.info("Refused a request body nested too deeply for json.loads")
            raise ProxyProtocolError(too_deep) from exc
        if _nested_deeper_than(data, MAX_JSON_DEPTH):
            raise ProxyProtocolError(too_deep)
        validate_request(data)
        try:
            model = model_from_dict(data["model"])
        except (TypeError, ValueError, KeyError) as exc:
            msg = f"Request body does not match the proxy protocol at model: {exc}."
            raise ProxyProtocolError(msg) from exc
        if self.resolve_model is not None:
            try:
                model = self.resolve_model(model)
            except ValueError as exc:
                msg = f"Model {model.provider}/{model.id} is not served here: {exc}"
                raise ProxyProtocolError(msg) from exc
        context = context_from_dict(data["context"])
        return model, context, options_from_dict(data.get("options"))

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new streams (503) and abort the ones in flight (they end ``aborted``)."""
        with self._live_lock:
            self._closed = True
            live = list(self._live)
        for body in live:
            body.abort("The proxy server is shutting down")

    def _register(self, body: _StreamBody) -> None:
        with self._live_lock:
            self._live.add(body)
            closed = self._closed
        if closed:  # close() ran while this request was being decoded
            body.abort("The proxy server is shutting down")

    def _forget(self, body: _StreamBody) -> None:
        with self._live_lock:
            self._live.discard(body)

    def _secrets(self, key: str | None) -> tuple[str, ...]:
        """Values that must never appear in a response: tokens, ``key`` (the provider key
        ``get_api_key`` returned for this request) and secret-looking environment values."""
        found = [t.decode("utf-8") for t in self._tokens]
        found += [v for k, v in os.environ.items() if _SECRET_ENV.search(k) and len(v) >= 8]
        if key:
            found.append(key)
        return tuple(sorted(set(found), key=len, reverse=True))


class _StreamBody:
    """The WSGI body of one streamed response.

    Owns an ``AbortController`` and the pump thread that calls the stream function and
    turns its events into SSE bytes. The WSGI server's thread iterates; ``close()`` (called
    by the server when the response is done or the client went away) aborts the stream
    function if it has not finished and joins the pump.
    """

    def __init__(self, app: ProxyApp, model: Model, context: Context,
                 options: dict[str, Any]) -> None:
        self._app = app
        self._model = model
        self._context = context
        self._options = options
        self._controller = AbortController()
        # carries SSE frames, then None, from the pump thread to the server's thread
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._finished = False  # the pump delivered its last frame (server thread only)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self._thread is None:
            self._app._register(self)
            self._thread = threading.Thread(target=self._pump, daemon=True,
                                            name=f"piagent-proxy-pump-{next(_pump_ids)}")
            self._thread.start()
            return b": connected\n\n"  # sends the headers now, before the model answers
        if self._finished:
            raise StopIteration
        try:
            frame = self._queue.get(timeout=self._app.heartbeat_s)
        except queue.Empty:
            return b": keep-alive\n\n"
        if frame is None:
            self._finished = True
            raise StopIteration
        return frame

    def abort(self, reason: str) -> None:
        """Abort the stream function (any thread)."""
        self._controller.abort(reason)

    def close(self) -> None:
        if not self._finished:
            self._controller.abort("Client disconnected")
        thread = self._thread
        if thread is not None:
            thread.join(_CLOSE_TIMEOUT_S)
            if thread.is_alive():
                _log.warning("The stream function for %s/%s ignored the abort for %.0f s; "
                             "its thread %s is left running", self._model.provider,
                             self._model.id, _CLOSE_TIMEOUT_S, thread.name)
        self._app._forget(self)

    def _pump(self) -> None:
        put = self._queue.put
        app = self._app
        model = self._model
        secrets = app._secrets(None)
        try:
            kwargs = dict(self._options)
            if app.get_api_key is not None:
                key = self._api_key(secrets)
                if isinstance(key, _KeyProblem):
                    put(encode_sse(proxy_event_to_dict(_error_event(model, key.text))))
                    return
                kwargs["api_key"] = key
                secrets = app._secrets(key)
            options = StreamOptions(signal=self._controller.signal, **kwargs)
            stream = app.stream_fn(model, self._context, options)
            for event in stream:
                data = proxy_event_to_dict(event)
                if event.type in ("done", "error"):
                    if "errorMessage" in data:
                        data["errorMessage"] = redact(data["errorMessage"], secrets)
                    put(encode_sse(data))
                    return
                put(encode_sse(data))
            text = ("The proxy's stream function ended without a done or error event; "
                    "a stream function must always end with one.")
            put(encode_sse(proxy_event_to_dict(_error_event(model, text))))
        except Exception as exc:  # the pump thread's top level: the client gets the error
            _log.exception("The proxy's stream function raised for %s/%s", model.provider,
                           model.id)
            text = redact(f"The proxy's stream function raised {type(exc).__name__}: {exc}",
                           secrets)
            put(encode_sse(proxy_event_to_dict(_error_event(model, text))))
        finally:
            put(None)

    def _api_key(self, secrets: tuple[str, ...]) -> str | None | _KeyProblem:
        """``get_api_key(provider)``, called once for this request, or why it failed."""
        provider = self._model.provider
        get_api_key = self._app.get_api_key
        if get_api_key is None:
            return None
        try:
            key = get_api_key(provider)
        except Exception as exc:  # the client is told; the server log has the traceback
            _log.exception("get_api_key(%r) raised", provider)
            return _KeyProblem(redact(
                f"The proxy server could not get an API key for provider {provider}: "
                f"{type(exc).__name__}: {exc}", secrets))
        if key is not None and not isinstance(key, str):
            _log.error("get_api_key(%r) returned %s, not a str or None", provider,
                       type(key).__name__)
            return _KeyProblem(
                f"The proxy server could not get an API key for provider {provider}: its "
                f"get_api_key returned {type(key).__name__}, not a str or None.")
        return key


class _KeyProblem:
    """Why ``get_api_key`` gave no usable key (the text for the client, already redacted)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _error_event(model: Model, text: str) -> ErrorEvent:
    return ErrorEvent("error", AssistantMessage(api=model.api, provider=model.provider,
                                                model=model.id, stop_reason="error",
                                                error_message=text))


def _content_type_problem(content_type: str) -> str | None:
    """Why a request's Content-Type is refused (415), or None for ``application/json``."""
    media_type = content_type.partition(";")[0].strip().lower()
    if media_type == "application/json":
        return None
    if not media_type:
        return ("The request has no Content-Type; the proxy accepts only "
                "'Content-Type: application/json'.")
    return (f"Content-Type {media_type!r} is not supported; the proxy accepts only "
            "'Content-Type: application/json'.")


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """True when ``value`` (decoded JSON) nests lists/dicts more than ``limit`` levels."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, (dict, list)):
            continue
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (dict, list)))
    return False


def _json(start_response: StartResponse, status: str, error: str,
          headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    """An error answer: ``{"error": ...}``, which pi's client shows as "Proxy error: …"."""
    body = json.dumps({"error": error}, ensure_ascii=False).encode("utf-8")
    start_response(status, [("Content-Type", "application/json; charset=utf-8"),
                            ("Content-Length", str(len(body))), *(headers or [])])
    return [body]


# --- a small threaded server ------------------------------------------------------------------

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_WRITE_TIMEOUT_S = 60.0
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_CLOSE_TIMEOUT_S = 5.0
RETRY_AFTER_S = 1
_LINGER_S = 1.0  # after the answer: how long unread request bytes are drained before close
_LINGER_BYTES = 1024 * 1024
_MAX_TRAILERS = 64
_request_ids = itertools.count(1)


class _DeadlineReader(io.RawIOBase):
    """The request socket as a raw stream whose reads fail once ``deadline`` has passed.

    The socket's timeout is set to the time left before each ``recv``, so a client that
    trickles one byte at a time cannot stretch the deadline. Used by one request thread.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline: float | None = None  # time.monotonic() value; None: no deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _SocketWriter(io.BufferedIOBase):
    """Writes with ``sendall`` (no partial writes), bounded by the socket's timeout."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        return len(data)


class _BadRequest(Exception):
    """The request cannot be served; carries the answer (status line and reason)."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _ServerHandler(wsgiref.simple_server.ServerHandler):
    """wsgiref's handler, logging through ``logging`` and quiet about clients that left."""

    def handle_error(self) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (TimeoutError, ConnectionError)):  # the client stopped reading
            _log.info("The proxy client went away while being answered: %s", exc)
            return
        _log.exception("The WSGI application failed")
        if not getattr(self, "headers_sent", False):
            self.result = self.error_output(getattr(self, "environ", {}), self.start_response)
            self.finish_response()


class _Handler(wsgiref.simple_server.WSGIRequestHandler):
    """One request per connection: headers and body read within their deadlines, the whole
    body read before the application runs (``Content-Length`` or chunked), then answered."""

    server: _Server

    def setup(self) -> None:
        self.connection = self.request
        self._reader = _DeadlineReader(self.request)
        self._reader.deadline = time.monotonic() + self.server.header_timeout
        self.rfile = io.BufferedReader(self._reader, 64 * 1024)
        self.wfile = _SocketWriter(self.request)

    def finish(self) -> None:
        self.rfile.close()
        self.wfile.close()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        _log.info("%s - %s", self.address_string(), format % args)

    def handle(self) -> None:
        server = self.server
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                return  # connected and left without a request
            if len(self.raw_requestline) > 65536:
                self._answer("414 URI Too Long", "The request line is longer than 65536 bytes.")
                return
            if not self.parse_request():
                return  # http.server has answered (400, 431, 505, ...)
        except TimeoutError:
            self._answer("408 Request Timeout", (
                f"The request line and headers did not arrive within {server.header_timeout:g}"
                " s (ProxyServer header_timeout); send them at once."))
            return
        except OSError as exc:
            _log.info("A proxy client went away while sending its headers: %s", exc)
            return
        self._reader.deadline = time.monotonic() + server.body_timeout
        try:
            body = self._read_body()
        except _BadRequest as bad:
            self._answer(bad.status, bad.reason)
            return
        except OSError as exc:
            _log.info("A proxy client went away while sending its body: %s", exc)
            return
        if body is None:
            return  # the client closed the connection before sending the whole body
        self._reader.deadline = None
        self.connection.settimeout(server.write_timeout)
        server.responding(self.request)
        environ = self.get_environ()
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["CONTENT_LENGTH"] = str(len(body))
        if self.headers.get("Content-Type") is None:
            environ["CONTENT_TYPE"] = ""  # wsgiref would say text/plain
        app = server.get_app()
        if app is None:
            raise RuntimeError("ProxyServer has no application")  # set in its __init__
        handler = _ServerHandler(io.BytesIO(body), cast(IO[bytes], self.wfile),
                                 self.get_stderr(), environ, multithread=True)
        handler.request_handler = self  # type: ignore[attr-defined]  # wsgiref logs through it
        handler.run(app)

    def _read_body(self) -> bytes | None:
        """The whole body, None if the client left, or ``_BadRequest``."""
        server = self.server
        encoding = self.headers.get("Transfer-Encoding")
        length_header = self.headers.get("Content-Length")
        try:
            if encoding is not None:
                if [c.strip().lower() for c in encoding.split(",")] != ["chunked"]:
                    raise _BadRequest("501 Not Implemented", (
                        f"Transfer-Encoding {encoding!r} is not supported; send the body "
                        "with Content-Length or Transfer-Encoding: chunked."))
                if length_header is not None:
                    raise _BadRequest("400 Bad Request", (
                        "The request has both Transfer-Encoding and Content-Length; send "
                        "one of them."))
                return self._read_chunked()
            if length_header is None:
                return b""
            if not length_header.strip().isdigit():
                raise _BadRequest("400 Bad Request", (
                    f"Content-Length {length_header!r} is not a number of bytes."))
            length = int(length_header)
            if length > server.max_body_bytes:
                raise _BadRequest("413 Content Too Large", (
                    f"Request body is {length} bytes; the limit is {server.max_body_bytes} "
                    f"bytes ({server.max_body_source})."))
            data = self.rfile.read(length)
            return data if len(data) == length else None
        except TimeoutError as exc:
            raise _BadRequest("408 Request Timeout", (
                f"The request body did not arrive within {server.body_timeout:g} s "
                "(ProxyServer body_timeout); send it at once.")) from exc

    def _read_chunked(self) -> bytes | None:
        limit = self.server.max_body_bytes
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            if not line:
                return None
            size_text = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not size_text or \
                    any(c not in b"0123456789abcdefABCDEF" for c in size_text):
                raise _BadRequest("400 Bad Request", (
                    f"Malformed chunked body: bad chunk-size line {line[:40]!r}."))
            size = int(size_text, 16)
            if size == 0:
                break
            total += size
            if total > limit:
                raise _BadRequest("413 Content Too Large", (
                    f"Request body exceeds the limit of {limit} bytes "
                    f"({self.server.max_body_source})."))
            chunk = self.rfile.read(size)
            end = self.rfile.readline(3)
            if len(chunk) < size or not end:
                return None
            if end not in (b"\r\n", b"\n"):
                raise _BadRequest("400 Bad Request",
                                  "Malformed chunked body: a chunk is not followed by CRLF.")
            parts.append(chunk)
        for _ in range(_MAX_TRAILERS):  # trailer fields, ignored, up to the blank line
            line = self.rfile.readline(8192)
            if line in (b"\r\n", b"\n"):
                return b"".join(parts)
            if not line:
                return None
        raise _BadRequest("400 Bad Request",
                          f"Malformed chunked body: more than {_MAX_TRAILERS} trailer lines.")

    def _answer(self, status: str, reason: str,
                headers: tuple[tuple[str, str], ...] = ()) -> None:
        """Answer ``{"error": reason}`` and let the connection close (drained, then closed)."""
        _log.info("%s - answered %s: %s", self.address_string(), status, reason)
        self.connection.settimeout(self.server.write_timeout)
        try:
            self.wfile.write(_raw_answer(status, reason, headers))
        except OSError as exc:
            _log.info("Could not answer %s to a proxy client that went away: %s", status, exc)


def _raw_answer(status: str, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    body = json.dumps({"error": reason}, ensure_ascii=False).encode("utf-8")
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json; charset=utf-8",
             f"Content-Length: {len(body)}", "Connection: close",
             *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Connection:
    """A connection being served: its request thread and what it is doing."""

    def __init__(self, thread: threading.Thread, phase: str) -> None:
        self.thread = thread
        self.phase = phase  # "reading", "responding" or "refusing"


class _Server(wsgiref.simple_server.WSGIServer):
    """``WSGIServer`` with one thread per connection, up to ``max_connections``.

    Connections past the limit get 503 (``Retry-After``) on a short-lived thread of their
    own (at most ``max_connections`` of those; past that they are closed at once).
    """

    def __init__(self, address: tuple[str, int], *, backlog: int, header_timeout: float,
                 body_timeout: float, write_timeout: float, max_connections: int,
                 max_body_bytes: int, max_body_source: str) -> None:
        self.request_queue_size = backlog
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.write_timeout = write_timeout
        self.max_connections = max_connections
        self.max_body_bytes = max_body_bytes
        self.max_body_source = max_body_source
        # guards _connections and _closing; owner: this server. _connections maps each open
        # connection's socket to its request thread (started in process_request, removed
        # by that thread when it ends, joined by ProxyServer.close()).
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, _Connection] = {}
        self._closing = False
        super().__init__(address, _Handler, bind_and_activate=False)
        try:
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            serving = sum(1 for c in self._connections.values() if c.phase != "refusing")
            refusing = len(self._connections) - serving
            if self._closing:
                phase = "closed"
            elif serving < self.max_connections:
                phase = "reading"
            elif refusing < self.max_connections:
                phase = "refusing"
            else:
                phase = "dropped"
            if phase in ("reading", "refusing"):
                kind = "request" if phase == "reading" else "refuse"
                # owner: this server; the thread removes its entry when it ends, and
                # ProxyServer.close() joins it (bounded)
                thread = threading.Thread(target=self._run, args=(request, client_address),
                                          name=f"piagent-proxy-{kind}-{next(_request_ids)}",
                                          daemon=True)
                self._connections[request] = _Connection(thread, phase)
        if phase == "closed" or phase == "dropped":
            _log.warning("The proxy server %s a connection from %s",
                         "is closing and dropped" if phase == "closed" else
                         f"has {self.max_connections} refusals under way and dropped",
                         client_address[0])
            request.close()
            return
        try:
            thread.start()
        except RuntimeError as exc:  # the interpreter could not start another thread
            with self._lock:
                del self._connections[request]
            request.close()  # the accept loop goes on: this client may retry
            _log.error("The proxy server dropped a connection from %s: %s",
                       client_address[0], exc)

    def _run(self, request: socket.socket, client_address: Any) -> None:
        try:
            with self._lock:
                refusing = self._connections[request].phase == "refusing"
            if refusing:
                request.settimeout(self.write_timeout)
                request.sendall(_raw_answer("503 Service Unavailable", (
                    f"The proxy server is serving its limit of {self.max_connections} "
                    "concurrent requests (ProxyServer max_connections); retry in "
                    f"{RETRY_AFTER_S} s."), (("Retry-After", str(RETRY_AFTER_S)),)))
            else:
                self.finish_request(request, client_address)
        except OSError as exc:
            _log.info("A proxy connection from %s failed: %s", client_address[0], exc)
        except Exception:  # this thread's top level: logged, the connection closed below
            _log.exception("The proxy server failed serving %s", client_address[0])
        finally:
            _linger_and_close(request)
            with self._lock:
                self._connections.pop(request, None)

    def responding(self, request: socket.socket) -> None:
        """The request was read; the application is answering it."""
        with self._lock:
            connection = self._connections.get(request)
            if connection is not None:
                connection.phase = "responding"

    def stop_accepting(self) -> None:
        with self._lock:
            self._closing = True

    def connections(self, *phases: str) -> list[tuple[socket.socket, threading.Thread]]:
        with self._lock:
            return [(sock, c.thread) for sock, c in self._connections.items()
                    if not phases or c.phase in phases]


def _linger_and_close(sock: socket.socket) -> None:
    """Send FIN, drain what the client still sends (bounded), then close.

    Closing a socket with unread data makes the kernel send RST, which can destroy the
    answer before the client reads it (a 413 or 503 answered before the body was read).
    """
    deadline = time.monotonic() + _LINGER_S
    drained = 0
    try:
        sock.shutdown(socket.SHUT_WR)
        while drained < _LINGER_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            chunk = sock.recv(64 * 1024)
            if not chunk:
                break
            drained += len(chunk)
    except OSError as exc:  # the client reset or went silent: close it all the same
        _log.debug("Lingering close of a proxy connection ended early: %s", exc)
    finally:
        sock.close()


def _positive(name: str, value: Any, kind: type = float) -> None:
    ok = isinstance(value, (int, float) if kind is float else int) and \
        not isinstance(value, bool) and value > 0 and value == value and value != float("inf")
    if not ok:
        accepted = "a positive, finite number of seconds" if kind is float else \
            "a positive int"
        msg = f"{name} must be {accepted}, got {value!r}."
        raise ValueError(msg)


class ProxyServer:
    """A WSGI application served by the standard library on its own threads.

    ``ProxyServer(app, host="127.0.0.1", port=0)`` binds at once (port 0 picks a free
    port; see ``.url``). ``start()`` serves on a background thread (``piagent-proxy-serve``),
    ``serve_forever()`` on the calling thread. ``close()`` stops serving, aborts streams in
    flight (when the app has a ``close()``, as ``ProxyApp`` does), closes the connections
    still open and joins every thread, all within its ``timeout``. Use it as a context
    manager. For production, gunicorn or your web framework also work (docs/proxy.md).

    Args:
        header_timeout: seconds from accepting a connection until the request line and
            headers must have arrived; then 408.
        body_timeout: seconds from the end of the headers until the whole body
            (``Content-Length`` or chunked) must have arrived; then 408. The body is read
            before the application runs, so a slow client never holds it.
        write_timeout: a write to the client that makes no progress for this long drops
            the client (one that stopped reading); the stream is aborted.
        max_connections: requests served at once; more get 503 with ``Retry-After``.
        max_body_bytes: larger bodies get 413; default: the app's ``max_body_bytes`` (as
            ``ProxyApp`` has), else 16 MiB.
        backlog: the listen queue (default ``socket.SOMAXCONN``), so a burst of clients
            waits to be accepted instead of being reset.

    Thread safety: ``close()`` may be called from any thread but the one serving.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]], host: str = "127.0.0.1",
                 port: int = 0, *, header_timeout: float = DEFAULT_HEADER_TIMEOUT_S,
                 body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
                 write_timeout: float = DEFAULT_WRITE_TIMEOUT_S,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 max_body_bytes: int | None = None,
                 backlog: int = socket.SOMAXCONN) -> None:
        _positive("header_timeout", header_timeout)
        _positive("body_timeout", body_timeout)
        _positive("write_timeout", write_timeout)
        _positive("max_connections", max_connections, int)
        _positive("backlog", backlog, int)
        source = "ProxyServer max_body_bytes"
        if max_body_bytes is None:
            app_limit = getattr(app, "max_body_bytes", None)
            if isinstance(app_limit, int) and not isinstance(app_limit, bool) and app_limit > 0:
                max_body_bytes = app_limit
                source = f"{type(app).__name__} max_body_bytes"
            else:
                max_body_bytes = DEFAULT_MAX_BODY_BYTES
        _positive("max_body_bytes", max_body_bytes, int)
        self.app = app
        self._server = _Server((host, port), backlog=backlog, header_timeout=header_timeout,
                               body_timeout=body_timeout, write_timeout=write_timeout,
                               max_connections=max_connections,
                               max_body_bytes=max_body_bytes, max_body_source=source)
        self._server.set_app(app)
        self._thread: threading.Thread | None = None
        # guards _state: "new" -> "serving" -> "stopped" / "closed"
        self._state_lock = threading.Lock()
        self._state = "new"
        self._stop = threading.Event()  # set by close(): the accept loop ends
        self._stopped = threading.Event()  # set when the accept loop has ended

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8787`` (the proxy_url for clients)."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    @property
    def backlog(self) -> int:
        """The listen queue length given to ``listen()``."""
        return int(self._server.request_queue_size)

    def serve_forever(self) -> None:
        """Serve on the calling thread until ``close()`` (or KeyboardInterrupt).

        Returns at once if ``close()`` was already called; raises ``RuntimeError`` if the
        server is already serving.
        """
        with self._state_lock:
            if self._state == "closed":
                return
            if self._state != "new":
                msg = "ProxyServer.serve_forever: the server is already serving; serve it once."
                raise RuntimeError(msg)
            self._state = "serving"
        listener = self._server.socket
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(listener, selectors.EVENT_READ)
                listener.setblocking(False)
                while not self._stop.is_set():
                    if not selector.select(0.05):
                        continue
                    try:
                        request, address = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue  # another wake-up took it, or the client left
                    except OSError as exc:
                        if self._stop.is_set():
                            break
                        _log.warning("The proxy server could not accept a connection: %s", exc)
                        continue
                    request.setblocking(True)
                    self._server.process_request(request, address)
        finally:
            self._stopped.set()

    def start(self) -> ProxyServer:
        """Serve on a background thread; returns ``self``."""
        if self._thread is None:
            # owner: this ProxyServer; joined in close()
            self._thread = threading.Thread(target=self.serve_forever,
                                            name="piagent-proxy-serve", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Stop accepting, abort live streams, close stuck connections; within ``timeout``.

        In order: the listening socket is closed; the app's ``close()`` aborts the streams
        in flight (their clients get an ``aborted`` error event); connections still sending
        their request are shut down at once; streams that have not ended by half the
        timeout have their connections shut down; every thread is joined until the
        deadline. A thread still alive then (a stream function that ignores its abort
        signal) is logged and left; ``close()`` returns all the same.
        Call it from another thread than the one in ``serve_forever`` (or after that
        returned). Idempotent.
        """
        _positive("timeout", timeout)
        deadline = time.monotonic() + timeout
        with self._state_lock:
            serving = self._state == "serving"
            self._state = "closed"
        self._stop.set()
        self._server.stop_accepting()
        if serving:
            self._stopped.wait(max(0.0, deadline - time.monotonic()))
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        self._server.server_close()  # the listening socket
        close_app = getattr(self.app, "close", None)
        if callable(close_app):
            close_app()
        for sock, _ in self._server.connections("reading", "refusing"):
            _shutdown(sock)
        half = time.monotonic() + max(0.0, deadline - time.monotonic()) / 2
        for _, thread in self._server.connections("responding"):
            thread.join(max(0.0, half - time.monotonic()))
        for sock, _ in self._server.connections():
            _shutdown(sock)
        for _, thread in self._server.connections():
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [thread.name for _, thread in self._server.connections()]
        if left:
            _log.warning("ProxyServer.close() gave up after %.1f s on threads %s (a stream "
                         "function that ignores its abort signal?)", timeout, ", ".join(left))

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _shutdown(sock: socket.socket) -> None:
    """Wake the request thread blocked on ``sock``; that thread closes it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError as exc:  # already closed by its thread, or never connected
        _log.debug("shutdown of a proxy connection: %s", exc)


def serve_proxy(app: Callable[..., Iterable[bytes]], host: str = "127.0.0.1",
                port: int = 8787, *, ready: Callable[[str], None] | None = None,
                close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S,
                **limits: Any) -> None:
    """Serve ``app`` (usually a ``ProxyApp``) on the calling thread; for ``piagent proxy``.

    ``ready(url)`` is called once the socket is bound (the CLI prints the URL there).
    ``limits`` are ``ProxyServer``'s keyword arguments (``header_timeout``,
    ``body_timeout``, ``write_timeout``, ``max_connections``, ``max_body_bytes``,
    ``backlog``). On KeyboardInterrupt the server shuts down (``close(close_timeout)``:
    live streams aborted, stuck connections closed, threads joined, all within
    ``close_timeout`` seconds) and the KeyboardInterrupt propagates to the caller.
    ``OSError`` from binding (port in use, permission) propagates unchanged.
    """
    _positive("close_timeout", close_timeout)
    server = ProxyServer(app, host, port, **limits)
    try:
        if ready is not None:
            ready(server.url)
        server.serve_forever()
    finally:
        server.close(close_timeout)
