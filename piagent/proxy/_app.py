"""``ProxyApp``: a WSGI application that runs a stream function for remote clients.

It serves ``POST /api/stream`` for any WSGI host (the standard library's server through
``ProxyServer``/``serve_proxy``, gunicorn, Flask, Django). The provider keys stay on the
server; the answer is pi's proxy event stream, so a TypeScript pi client can use it too.
Bad input is answered (401, 415, 413, 400, 404, 405) before the stream function is called,
and so is a model the server will not serve (403): a base URL neither the catalogue nor the
operator's ``allowed_base_urls`` gives its provider, or one ``resolve_model`` refuses.
What a WSGI application cannot do itself (deadlines, a bound on concurrent requests) is
``ProxyServer``'s, which knows nothing of pi.
"""

from __future__ import annotations

import hmac
import itertools
import json
import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..abort import AbortController
from ..errors import ProxyProtocolError
from ..messages import AssistantMessage
from ..models import Model
from ..providers.kit import redact
from ..stream import Context, ErrorEvent, StreamFn, StreamOptions
from ._base_urls import BaseUrlPolicy, RefusedModel, parse_allowed
from ._protocol import (
    context_from_dict,
    encode_sse,
    model_from_dict,
    options_from_dict,
    proxy_event_to_dict,
    validate_request,
)

__all__ = ["ProxyApp"]

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
            ``ValueError`` (answered 403). It runs first; the model it returns must then pass
            the base URL check below.
        allowed_base_urls: ``{provider: URL or [URLs]}``, the base URLs besides the
            catalogue's that each provider may be sent to. By default a request goes only to
            the catalogue's base URL of the model's provider, and a provider the catalogue
            does not list (ollama, vllm, a custom one) is not served; any other base URL is
            answered 403 before the stream function is called, whatever stream function
            and key. URLs compare with the scheme and host case-insensitive, the default
            port implied and a trailing ``/`` ignored; nothing else is loosened.
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
                 allowed_base_urls: Mapping[str, str | Iterable[str]] | None = None,
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
        self._base_urls = BaseUrlPolicy(parse_allowed(allowed_base_urls))
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
        verdict = self.header_verdict(environ)
        if verdict is not None:
            status, error, headers = verdict
            return _json(start_response, status, error, headers)
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
        except RefusedModel as exc:
            _log.info("Refused a request: %s", exc)
            return _json(start_response, "403 Forbidden", str(exc))
        stream = _StreamBody(self, model, context, options)
        start_response("200 OK", [
            ("Content-Type", "text/event-stream; charset=utf-8"),
            ("Cache-Control", "no-cache"),
            ("X-Accel-Buffering", "no"),  # nginx: do not buffer the stream
        ])
        return stream

    def header_verdict(self, environ: Mapping[str, Any]
                       ) -> tuple[str, str, list[tuple[str, str]]] | None:
        """What the request line and headers alone decide, before any body byte is read:
        ``(status, error, extra headers)`` for 404, 405, 401, 503, 415, 411 and a declared
        length over ``max_body_bytes`` (413); ``None`` when the body is to be read.

        ``ProxyServer`` asks this as soon as the headers are in, so a client without the
        token never holds a connection while it sends (or pretends to send) a body; any other
        WSGI server gets the same answers from calling the app.
        """
        path = environ.get("PATH_INFO") or "/"
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        if path.rstrip("/") != ENDPOINT:
            return "404 Not Found", (f"Not found: {path!r}. The proxy serves only "
                                     f"POST {ENDPOINT}."), []
        if method != "POST":
            return ("405 Method Not Allowed", f"Method {method} is not allowed: use POST "
                    f"{ENDPOINT}.", [("Allow", "POST")])
        if not self._authorised(environ.get("HTTP_AUTHORIZATION", "")):
            return ("401 Unauthorized", self._auth_problem(environ),
                    [("WWW-Authenticate", 'Bearer realm="piagent-proxy"')])
        if self._closed:
            return ("503 Service Unavailable",
                    "The proxy is shutting down; retry on another instance.", [])
        problem = _content_type_problem(str(environ.get("CONTENT_TYPE") or ""))
        if problem is not None:
            return "415 Unsupported Media Type", problem, [("Accept-Post", "application/json")]
        raw_length = str(environ.get("CONTENT_LENGTH") or "").strip()
        if not raw_length and "chunked" not in str(environ.get("HTTP_TRANSFER_ENCODING") or ""
                                                   ).lower():
            return ("411 Length Required", "The request has no body length: send the JSON "
                    "body with Content-Length (or Transfer-Encoding: chunked).", [])
        if raw_length.isdigit() and int(raw_length) > self.max_body_bytes:
            return ("413 Content Too Large", f"Request body is {raw_length} bytes; the limit "
                    f"is {self.max_body_bytes} bytes (ProxyApp max_body_bytes).", [])
        return None

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
                msg = (f"Model {model.provider}/{model.id} is not served here: {exc} "
                       "(ProxyApp resolve_model)")
                raise RefusedModel(msg) from exc
        self._base_urls.check(model)
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
