"""The HTTP transport every provider adapter is built on: requests + sseclient-py.

This module owns the sessions, the POST-with-retries logic, abort wiring, SSE parsing and
the mapping of requests/urllib3/sseclient failures into ``ProviderError`` (the only place
that catches ``requests.*``). Error texts and retry decisions live in ``_errors``; the
partial message and pi's event sequence in ``_builder`` (``MessageBuilder``, re-exported
here). It knows nothing about any one vendor's wire format.

How an adapter uses it (an adapter is only a wire mapping)::

    _CLIENT = HttpClient("openai")           # one per adapter module; pools sessions

    def stream_foo(model, context, options):
        return start_stream(model, options, _run, client=_CLIENT, label="Foo")

    def _run(call: ProviderCall) -> Iterator[None]:  # runs on the consumer's thread
        body = build_wire_body(call.model, call.context_messages, call.options)
        with call.open_sse(SSERequest(url=..., body=body, headers=...)) as sse:
            for event in sse.events():       # SSEEvent(event, data, truncated)
                chunk = parse_event_json(event, call.label)
                i = call.out.open_text()     # MessageBuilder: pushes text_start
                call.out.add_text(i, "...")  # text_delta
                call.out.set_usage(input=..., output=...)   # cost recomputed
                yield                        # hand the queued events to the consumer
        call.out.close_open_blocks()         # *_end for every block still open
        call.out.finish("stop")              # done; or raise ProviderError(...)

``_run`` is a generator, driven lazily by whoever iterates the stream (no thread per
request): each bare ``yield`` hands the events queued so far to the consumer.

Rules for ``_run``: raise ``ProviderError`` (or a subclass) with a message that says what
happened and what to do; ``start_stream`` turns it into the final ``ErrorEvent``. Never
catch ``requests`` exceptions in an adapter: ``open_sse`` and ``SSEResponse.events`` map
them. An abort (``options.signal``) ends the stream at once with ``stop_reason="aborted"``
(from the aborting thread) and shuts the socket down so the reader's blocked read returns;
the reader's later pushes are dropped. Errors before the response headers (HTTP status,
content type, connection) are retried per ``open_sse``; nothing is retried once the body
has started. The API key is redacted from every message and log line this module writes.

Thread safety: ``HttpClient`` and ``start_stream`` may be used from any thread. A
``ProviderCall`` and its ``MessageBuilder`` belong to the worker thread running ``_run``;
only ``start_stream``'s abort callback touches them from another thread (under the
builder's lock).
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import requests
import requests.adapters
import requests.utils
import sseclient
import urllib3
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
import urllib3.response

from .._version import __version__
from ..abort import AbortSignal
from ..errors import ProviderConnectionError, ProviderError, ProviderResponseError
from ..messages import (
    AssistantMessage,
    Message,
)
from ..models import Model
from ..stream import (
    AssistantMessageEventStream,
    Context,
    ErrorEvent,
    StreamOptions,
)
from ._builder import MessageBuilder
from ._errors import (
    MESSAGE_BODY_LIMIT,
    Aborted,
    Failure,
    describe,
    error_details,
    format_http_error,
    is_retryable,
    redact,
    retry_delay_s,
)

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_RETRY_DELAY_MS",
    "HttpClient",
    "MessageBuilder",
    "ProviderCall",
    "SSEEvent",
    "SSERequest",
    "SSEResponse",
    "format_http_error",
    "arguments_json",
    "json_dumps",
    "parse_event_json",
    "redact",
    "start_stream",
]

_log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 2
"""Retries after the first attempt (the Stainless SDK default); ``options.max_retries`` wins."""
DEFAULT_MAX_RETRY_DELAY_MS = 60_000
"""The longest server-requested delay honoured; longer ones fail at once (0: no cap)."""
DEFAULT_TIMEOUT: tuple[float, float] = (10.0, 600.0)
"""(connect, read) seconds; the read timeout is the longest silence between two reads."""

_READ_SIZE = 65536  # one read1() call; large reads keep sseclient's buffering linear
_ERROR_BODY_LIMIT = 65536  # bytes of an HTTP error body read for its message
_DRAIN_TIMEOUT_S = 0.05  # longest wait for the end of a body after the terminal event
_IDLE_SESSIONS = 8  # idle sessions kept per client
_USER_AGENT = f"piagent/{__version__}"


# --- sessions and abortable sockets --------------------------------------------------------


class _SocketTracker:
    """The socket of one in-flight request, so an abort can shut it down from any thread.

    Shutting the socket down (not closing the response) is what wakes a read blocked in
    another thread (providers.md §8.3). Detached once the request is over, so an abort that
    arrives late never touches a connection the pool has since handed to another request.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _sock and _shut
        self._sock: socket.socket | None = None
        self._shut = False

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self._shut and sock is not None:
                _shutdown_quietly(sock)

    def detach(self) -> None:
        with self._lock:
            self._sock = None

    def shutdown(self) -> None:
        with self._lock:
            self._shut = True
            if self._sock is not None:
                _shutdown_quietly(self._sock)


def _shutdown_quietly(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected: nothing left to wake


# The tracker of the request the current thread is making; read by the connection classes
# below, which only run inside ``session.post`` on that same thread.
_tls = threading.local()


class _TrackedHTTPConnection(urllib3.connection.HTTPConnection):
    def getresponse(self) -> urllib3.response.HTTPResponse:  # type: ignore[override]
        tracker: _SocketTracker | None = getattr(_tls, "tracker", None)
        if tracker is not None:
            tracker.attach(self.sock)
        return super().getresponse()


class _TrackedHTTPSConnection(urllib3.connection.HTTPSConnection):
    def getresponse(self) -> urllib3.response.HTTPResponse:  # type: ignore[override]
        tracker: _SocketTracker | None = getattr(_tls, "tracker", None)
        if tracker is not None:
            tracker.attach(self.sock)
        return super().getresponse()


class _TrackedHTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class _TrackingAdapter(requests.adapters.HTTPAdapter):
    """An ``HTTPAdapter`` whose connections report their socket to the current tracker."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _TrackedHTTPPool,
            "https": _TrackedHTTPSPool,
        }


def _new_session() -> requests.Session:
    session = requests.Session()
    # The environment (proxies, CA bundle) is read once per origin by HttpClient.environment:
    # requests re-reads os.environ on every request, which costs more than a whole turn.
    session.trust_env = False
    adapter = _TrackingAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class HttpClient:
    """The sessions of one provider adapter: connections are reused across requests.

    A ``requests.Session`` is not documented as thread-safe, so each request checks one
    out of a small pool and returns it afterwards; concurrent requests use different
    sessions and sequential ones reuse the same connections.

    Thread safety: every method may be called from any thread.
    """

    def __init__(self, name: str, session_factory: Callable[[], requests.Session] = _new_session):
        self.name = name
        self._session_factory = session_factory
        self._idle_lock = threading.Lock()  # guards _idle and _environment
        self._idle: list[requests.Session] = []
        self._environment: dict[str, tuple[dict[str, str], bool | str]] = {}

    def environment(self, url: str) -> tuple[dict[str, str], bool | str]:
        """Proxies and TLS verification for ``url`` from the environment, as requests would
        read them with ``trust_env`` (``HTTPS_PROXY``, ``NO_PROXY``, ``REQUESTS_CA_BUNDLE``,
        ``CURL_CA_BUNDLE``); read once per origin."""
        parts = urllib.parse.urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        with self._idle_lock:
            cached = self._environment.get(origin)
        if cached is None:
            proxies = dict(requests.utils.get_environ_proxies(url))
            verify: bool | str = (os.environ.get("REQUESTS_CA_BUNDLE")
                                  or os.environ.get("CURL_CA_BUNDLE") or True)
            cached = (proxies, verify)
            with self._idle_lock:
                self._environment[origin] = cached
        return cached

    def checkout(self) -> requests.Session:
        """An idle session, or a new one."""
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        return self._session_factory()

    def checkin(self, session: requests.Session) -> None:
        """Give a session back for reuse (closed if the pool is full)."""
        with self._idle_lock:
            if len(self._idle) < _IDLE_SESSIONS:
                self._idle.append(session)
                return
        session.close()

    def close(self) -> None:
        """Close every idle session (in-flight ones close when they come back)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for session in idle:
            session.close()


# --- requests and SSE -------------------------------------------------------------------


@dataclass
class SSERequest:
    """One streaming POST. ``body`` (a dict) is encoded with ``json_dumps`` unless bytes."""

    url: str
    body: Mapping[str, Any] | bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: tuple[float, float] = DEFAULT_TIMEOUT
    max_retries: int | None = None
    """``None``: ``options.max_retries`` if set, else ``DEFAULT_MAX_RETRIES``."""


@dataclass(slots=True)
class SSEEvent:
    """One server-sent event. ``truncated``: the body ended before its blank line."""

    event: str
    data: str
    truncated: bool = False


class _ChunkSource:
    """Feeds sseclient large ``read1`` chunks (not ``Response.__iter__``'s 128 bytes).

    Also remembers the bytes after the last event boundary, which sseclient drops when they
    are not SSE fields (Gemini's bare JSON error tail, an HTML error page).
    """

    def __init__(self, raw: urllib3.response.HTTPResponse) -> None:
        self._read1 = raw.read1
        self.exhausted = False
        self._tail: list[bytes] = []
        self._last = b""  # the last 3 bytes seen, to find boundaries split across chunks

    def __iter__(self) -> Iterator[bytes]:
        read1 = self._read1
        while True:
            chunk = read1(_READ_SIZE, decode_content=True)
            if not chunk:
                break
            self._track_tail(chunk)
            yield chunk
        self.exhausted = True

    def _track_tail(self, chunk: bytes) -> None:
        joined = self._last + chunk
        cut = -1
        for sep in (b"\n\n", b"\r\r", b"\r\n\r\n"):
            at = joined.rfind(sep)
            if at >= 0:
                cut = max(cut, at + len(sep))
        if cut >= 0:
            rest = joined[cut:]
            self._tail = [rest] if rest else []
        else:
            self._tail.append(chunk)
        self._last = joined[-3:]

    @property
    def tail(self) -> bytes:
        """What followed the last blank line ("" when the stream ended on an event)."""
        return b"".join(self._tail)

    def close(self) -> None:
        return None  # the response is closed by SSEResponse


class SSEResponse:
    """An accepted (2xx, ``text/event-stream``) streaming response.

    Use as a context manager; leaving it closes the response. ``events()`` maps transport
    failures into ``ProviderConnectionError`` and an abort into the worker's exit.
    """

    def __init__(self, call: ProviderCall, response: requests.Response) -> None:
        self._call = call
        self.response = response
        self.status = response.status_code
        self.headers = response.headers
        self._source = _ChunkSource(response.raw)

    def events(self) -> Iterator[SSEEvent]:
        """The events in order (comments, keep-alives and empty events skipped)."""
        source = self._source
        call = self._call
        try:
            for raw in sseclient.SSEClient(iter(source)).events():
                if source.exhausted and source.tail:
                    yield SSEEvent(raw.event, raw.data, truncated=True)
                else:
                    yield SSEEvent(raw.event, raw.data)
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            call.raise_if_aborted()
            msg = (f"The connection to {call.label} broke in the middle of the response "
                   f"({call.redact(describe(exc))}). Retry the request.")
            raise ProviderConnectionError(msg, provider=call.model.provider) from exc
        except UnicodeDecodeError as exc:
            call.raise_if_aborted()
            msg = f"{call.label} sent an event stream that is not valid UTF-8 ({exc})."
            raise ProviderResponseError(msg, provider=call.model.provider) from exc
        except (ValueError, AttributeError):
            # urllib3 raises these when a shut-down response is re-entered after an abort
            call.raise_if_aborted()
            raise
        call.raise_if_aborted()
        call.tracker.detach()

    @property
    def trailing_text(self) -> str:
        """Bytes after the last complete event that formed no event, decoded; often ""."""
        return self._source.tail.decode("utf-8", errors="replace").strip()

    def close(self, *, reuse: bool = False) -> None:
        """Close the response; ``reuse``: first read the rest (briefly) to keep the connection."""
        self._call.tracker.detach()
        if reuse and not (self._call.signal is not None and self._call.signal.aborted):
            self._release_for_reuse()
        self.response.close()

    def _release_for_reuse(self) -> None:
        # An adapter stops at its terminal event (e.g. "[DONE]"), usually just before the
        # chunked body's terminator. Reading that (with a short timeout, so a server that
        # keeps the stream open cannot hold us) hands the connection back to the pool;
        # closing an unfinished response would drop it and the next turn would reconnect.
        raw = self.response.raw
        connection = getattr(raw, "_connection", None)
        sock = getattr(connection, "sock", None)
        if sock is None:
            return  # already released: the body was read to the end
        sock.settimeout(_DRAIN_TIMEOUT_S)
        try:
            raw.read(decode_content=True)  # reading to the end releases the connection
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # more data or silence after the terminal event: close() drops the connection
            _log.debug("Not reusing the %s connection: %s", self._call.label, exc)

    def __enter__(self) -> SSEResponse:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(reuse=exc_type is None)


_BODY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ARGUMENTS_ENCODER = json.JSONEncoder(ensure_ascii=False)


def arguments_json(arguments: Any) -> str:
    """A tool call's arguments as JSON text (one shared encoder: ``json.dumps`` with
    non-default options builds a new encoder per call, a cost per historical tool call)."""
    return _ARGUMENTS_ENCODER.encode(arguments)


def json_dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, the encoding used for every request body."""
    return _BODY_ENCODER.encode(value).encode("utf-8")


def parse_event_json(event: SSEEvent, label: str) -> Any:
    """The event's data as JSON, or a ``ProviderResponseError`` saying what went wrong."""
    try:
        return json.loads(event.data)
    except ValueError as exc:
        excerpt = event.data[:200]
        if event.truncated:
            msg = (f"The {label} stream was cut off in the middle of an event "
                   f"(incomplete data {excerpt!r}). Retry the request.")
        else:
            msg = (f"{label} sent an event whose data is not valid JSON ({exc}): {excerpt!r}. "
                   "Check that base_url points at a server that speaks this API.")
        raise ProviderResponseError(msg) from exc


# --- one provider call ------------------------------------------------------------------------


class ProviderCall:
    """What an adapter's ``_run`` gets: the request inputs, the builder, and ``open_sse``.

    Thread safety: owned by the worker thread (see the module docstring).
    """

    def __init__(self, model: Model, context: Context, options: StreamOptions,
                 out: MessageBuilder, client: HttpClient, label: str) -> None:
        self.model = model
        self.context = context
        self.options = options
        self.out = out
        self.client = client
        self.label = label
        self.signal: AbortSignal | None = options.signal
        self.tracker = _SocketTracker()
        self._secrets = tuple(s for s in (options.api_key,) if s)
        self._session: requests.Session | None = None
        self._responses: list[requests.Response] = []

    @property
    def messages(self) -> list[Message]:
        """The context's messages."""
        return self.context.messages

    def add_secret(self, secret: str | None) -> None:
        """Redact ``secret`` (e.g. an API key read from the environment) from messages."""
        if secret and secret not in self._secrets:
            self._secrets = (*self._secrets, secret)

    def redact(self, text: str) -> str:
        """``text`` without any of this call's secrets."""
        return redact(text, self._secrets)

    def raise_if_aborted(self) -> None:
        """Unwind the worker if the signal has fired."""
        if self.signal is not None and self.signal.aborted:
            raise Aborted

    def open_sse(self, request: SSERequest) -> SSEResponse:
        """POST ``request`` and return the accepted event stream; pushes ``start``.

        Retries (only before any body byte is read) on connection errors, 408, 409, 429
        and 5xx, honouring ``retry-after-ms`` / ``retry-after`` (and Google's body
        ``retryDelay``), else exponential back-off (0.5 s·2^n ≤ 8 s, clamped to
        ``max_retry_delay_ms``). A server delay above ``max_retry_delay_ms`` fails at once.
        The wait is ``signal.wait(delay)``, so an abort ends it immediately.
        """
        body = request.body if isinstance(request.body, bytes) else json_dumps(request.body)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                   "Accept-Encoding": "identity", "User-Agent": _USER_AGENT}
        headers.update(request.headers)
        max_retries = request.max_retries
        if max_retries is None:
            configured = getattr(self.options, "max_retries", None)
            max_retries = configured if isinstance(configured, int) else DEFAULT_MAX_RETRIES
        cap_ms = self.options.max_retry_delay_ms
        if cap_ms is None:
            cap_ms = DEFAULT_MAX_RETRY_DELAY_MS
        if self._session is None:
            self._session = self.client.checkout()
        attempt = 0
        while True:
            self.raise_if_aborted()
            outcome = self._attempt(request, body, headers)
            if isinstance(outcome, SSEResponse):
                self.out.start()
                return outcome
            error = outcome.error
            if not outcome.retryable or attempt >= max_retries:
                raise error
            if outcome.delay is not None:
                if cap_ms > 0 and outcome.delay * 1000 > cap_ms:
                    msg = (f"Server requested {outcome.delay:g}s retry delay "
                           f"(max: {cap_ms / 1000:g}s). {error}")
                    raise ProviderError(msg, provider=error.provider,
                                        status_code=error.status_code, body=error.body,
                                        retry_after=outcome.delay)
                delay = outcome.delay
            else:
                delay = min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())
                if cap_ms > 0:
                    delay = min(delay, cap_ms / 1000)
            attempt += 1
            _log.info("%s request failed (%s); retry %d of %d in %.2fs", self.label, error,
                      attempt, max_retries, delay)
            if self.signal is None:
                time.sleep(delay)
            elif self.signal.wait(delay):
                raise Aborted

    def _attempt(self, request: SSERequest, body: bytes,
                 headers: Mapping[str, str]) -> SSEResponse | Failure:
        """One POST: the accepted stream, or why it failed and whether to retry."""
        assert self._session is not None
        provider = self.model.provider
        proxies, verify = self.client.environment(request.url)
        _tls.tracker = self.tracker
        try:
            response = self._session.post(request.url, data=body, headers=headers,
                                          stream=True, timeout=request.timeout,
                                          proxies=proxies, verify=verify)
        except requests.RequestException as exc:
            self.tracker.detach()
            self.raise_if_aborted()
            kind = "timed out" if isinstance(exc, requests.Timeout) else "connection failed"
            msg = (f"Could not reach {self.label} at {request.url}: {kind} "
                   f"({describe(exc)}). Check base_url and that the server is running.")
            return Failure(ProviderConnectionError(self.redact(msg), provider=provider))
        finally:
            _tls.tracker = None
        self._responses.append(response)
        if self.signal is not None and self.signal.aborted:
            response.close()
            raise Aborted
        status = response.status_code
        if status >= 300:
            body_text = self._read_error_body(response)
            msg = self.redact(format_http_error(self.label, status, body_text))
            delay = retry_delay_s(response.headers, body_text)
            error = ProviderError(msg, provider=provider, status_code=status,
                                  body=self.redact(body_text), retry_after=delay)
            return Failure(error, is_retryable(status, response.headers, body_text), delay)
        content_type = response.headers.get("content-type", "")
        if content_type and not content_type.lower().startswith("text/event-stream"):
            body_text = self._read_error_body(response)
            message, _code = error_details(body_text)
            msg = (f"{self.label} answered with Content-Type {content_type!r} instead of an "
                   f"event stream: {message[:MESSAGE_BODY_LIMIT]}. Check that base_url points "
                   "at a server that speaks this API and supports streaming.")
            error = ProviderResponseError(self.redact(msg), provider=provider,
                                          status_code=status)
            return Failure(error, retryable=False)
        return SSEResponse(self, response)

    def _read_error_body(self, response: requests.Response) -> str:
        try:
            raw = response.raw.read(_ERROR_BODY_LIMIT, decode_content=True)
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            self.raise_if_aborted()
            raw = f"(the error body could not be read: {describe(exc)})".encode()
        finally:
            self.tracker.detach()
            response.close()
        return raw.decode(response.encoding or "utf-8", errors="replace")

    def close(self) -> None:
        """Close every response and return the session to the client."""
        self.tracker.detach()
        for response in self._responses:
            response.close()
        self._responses.clear()
        if self._session is not None:
            self.client.checkin(self._session)
            self._session = None

    def abort_transport(self) -> None:
        """Wake a blocked read: shut the in-flight socket down (any thread)."""
        self.tracker.shutdown()


def start_stream(model: Model | None, options: StreamOptions | None,
                 run: Callable[[ProviderCall], Iterator[None]], *, context: Context,
                 client: HttpClient, api: str, label: str) -> AssistantMessageEventStream:
    """Return the event stream of one provider call at once; never raises.

    ``run`` is the adapter's wire mapping, a generator (a bare ``yield`` after each wire
    event): it runs lazily on the thread that consumes the stream, so no thread is started
    and no event crosses threads, which is what the agent loop wants. A missing model, an
    exception from
    ``run`` and an abort all end the stream with an ``ErrorEvent``. ``label`` names the
    provider in messages ("OpenAI").
    """
    options = options if options is not None else StreamOptions()
    if model is None:
        stream = AssistantMessageEventStream()
        _fail_without_model(stream, api)
        return stream
    signal = options.signal
    if signal is not None and signal.aborted:
        stream = AssistantMessageEventStream()
        MessageBuilder(model, stream, api=api).fail(_abort_text(signal), aborted=True)
        return stream
    stream = AssistantMessageEventStream()
    out = MessageBuilder(model, stream, api=api)
    call = ProviderCall(model, context, options, out, client, label)
    unregister: Callable[[], None] = _noop

    def on_abort() -> None:
        # on the aborting thread: deliver the final event first, then wake the reader
        assert signal is not None
        out.fail(_abort_text(signal), aborted=True)
        call.abort_transport()

    def body() -> Iterator[None]:
        try:
            yield from run(call)
            if not out.ended:
                msg = f"The {label} adapter returned without finishing the message."
                raise ProviderResponseError(msg, provider=model.provider)
        except Aborted:
            out.fail(_abort_text(signal), aborted=True)
        except ProviderError as exc:
            if signal is not None and signal.aborted:
                out.fail(_abort_text(signal), aborted=True)
            else:
                out.fail(call.redact(str(exc)))
        except Exception as exc:  # the reader's top level: becomes the error message
            if signal is not None and signal.aborted:
                out.fail(_abort_text(signal), aborted=True)
            else:
                _log.exception("Unexpected error in the %s adapter", label)
                out.fail(call.redact(f"Unexpected error in the {label} adapter: "
                                     f"{type(exc).__name__}: {exc}"))
        finally:
            unregister()
            call.close()

    if signal is not None:
        unregister = signal.on_abort(on_abort)
    stream.pull_from(body(), signal)
    return stream


def _noop() -> None:
    return None


def _abort_text(signal: AbortSignal | None) -> str:
    reason = signal.reason if signal is not None else None
    if reason is None:
        return "Request was aborted"
    return f"Request was aborted: {reason}"


def _fail_without_model(stream: AssistantMessageEventStream, api: str) -> None:
    message = AssistantMessage(api=api, stop_reason="error", error_message=(
        "No model was given. Pass a model, e.g. "
        "Agent(model=get_model('openai', 'gpt-4o-mini')) or stream_simple(model, ...)."))
    stream.push(ErrorEvent("error", message))
    stream.end()
