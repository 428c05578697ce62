"""``ProviderCall``: one request's inputs, its POST with retries, and its event stream.

``open_sse`` maps every ``requests``/urllib3 failure into ``ProviderError`` (the only place,
with ``SSEResponse.events``, that catches ``requests.*``); error texts and retry decisions
live in ``_errors``.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

import requests
import sseclient
import urllib3.exceptions
import urllib3.util

from ..abort import AbortSignal
from ..errors import ProviderConnectionError, ProviderError, ProviderResponseError
from ..messages import Message
from ..models import Model
from ..stream import Context, ProviderResponse, StreamOptions
from ._builder import MessageBuilder
from ._errors import (
    MESSAGE_BODY_LIMIT,
    Aborted,
    Failure,
    clip,
    connection_reason,
    describe,
    error_details,
    format_http_error,
    is_retryable,
    redact,
    retry_delay_s,
)
from ._identity import DEFAULT_USER_AGENT, identity_headers
from ._pool import HttpClient
from ._sockets import SocketTracker, current, post
from ._wire import (
    DEFAULT_TIMEOUT,
    ChunkSource,
    PrefixEncoder,
    SSEEvent,
    SSERequest,
    json_dumps,
    parse_event_json,
)

__all__ = ["DEFAULT_MAX_RETRIES", "DEFAULT_MAX_RETRY_DELAY_MS", "ProviderCall", "SSEResponse"]

_log = logging.getLogger("piagent.providers")

DEFAULT_MAX_RETRIES = 2
"""Retries after the first attempt (the Stainless SDK default); ``options.max_retries`` and
``SSERequest.max_retries`` win."""
DEFAULT_MAX_RETRY_DELAY_MS = 60_000
"""The longest server-requested delay honoured; longer ones fail at once (0: no cap)."""

_ERROR_BODY_LIMIT = 65536  # bytes of an HTTP error body read for its message
_DRAIN_TIMEOUT_S = 0.05  # longest wait for the end of a body after the terminal event
_DRAIN_MAX_CHUNKS = 16  # chunks read after the terminal event before the connection is dropped
_USER_AGENT = DEFAULT_USER_AGENT


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
        self.tracker = SocketTracker()
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

    def request(self, url: str, body: Any, headers: Mapping[str, str | None], *,
                encoder: PrefixEncoder | None = None,
                replaced: Mapping[str, Any] | None = None) -> SSERequest:
        """The ``SSERequest`` of this call, with the stream options applied.

        ``on_payload`` sees ``body`` and may replace it (``replaced``: keys set over a
        replacement dict, e.g. Anthropic's ``stream: true``); without it, ``encoder`` (if
        given) encodes the body, reusing its old messages' JSON. ``identity`` headers sit
        below ``headers``; ``timeout_ms`` bounds each wait; ``on_response`` is wired.
        """
        options = self.options
        data: Any = body
        if options.on_payload is not None:
            # the hook gets a copy: what it edits in place must not reach the request
            # caches' shared wire forms (nor a message's own dicts they hold)
            data = self._payload(options.on_payload, _copy_body(body), replaced)
        elif encoder is not None:
            # the conversation's entry lives as long as its first message
            messages = self.messages
            data = encoder.encode(body, "messages", messages[0] if messages else None)
        if options.identity is not None:
            headers = {**identity_headers(self.model, options.identity), **headers}
        timeout = DEFAULT_TIMEOUT
        if options.timeout_ms is not None:
            timeout = (options.timeout_ms / 1000, options.timeout_ms / 1000)
        on_response = None
        if options.on_response is not None:
            on_response = _with_model(options.on_response, self.model)
        return SSERequest(url=url, body=data, headers=headers, timeout=timeout,
                          on_response=on_response)

    def _payload(self, hook: Callable[[Any, Model], Any], body: Any,
                 replaced: Mapping[str, Any] | None) -> bytes:
        try:
            result = hook(body, self.model)
        except Exception as exc:
            raise _hook_error("on_payload", exc) from exc
        if result is None:
            result = body  # kept, with what the hook changed in place
        elif replaced and isinstance(result, Mapping):
            result = {**result, **replaced}
        try:
            return json_dumps(result)
        except (TypeError, ValueError) as exc:
            msg = (f"StreamOptions.on_payload returned a request body that cannot be sent as "
                   f"JSON ({type(exc).__name__}: {exc}).")
            raise ProviderError(msg, provider=self.model.provider) from exc

    def event_parser(self) -> Callable[[SSEEvent, str], Any]:
        """``parse_event_json``, or with ``on_provider_stream_event`` a parser that also hands
        it each parsed event (but ``event: error``). Take it once, before the event loop."""
        hook = self.options.on_provider_stream_event
        if hook is None:
            return parse_event_json
        model = self.model

        def parse(event: SSEEvent, label: str) -> Any:
            data = parse_event_json(event, label)
            if event.event != "error":
                try:
                    hook(data, model)
                except Exception as exc:
                    raise _hook_error("on_provider_stream_event", exc) from exc
            return data

        return parse

    def open_sse(self, request: SSERequest, *, push_start: bool = True) -> SSEResponse:
        """POST ``request`` and return the accepted event stream; pushes ``start`` (unless
        ``push_start`` is false: a relay such as the proxy client pushes the ``start`` its
        server sends).

        Retries (only before any body byte is read) on connection errors, 408, 409, 429
        and 5xx, honouring ``retry-after-ms`` / ``retry-after`` (and Google's body
        ``retryDelay``), else exponential back-off (0.5 s·2^n ≤ 8 s, clamped to
        ``max_retry_delay_ms``). A server delay above ``max_retry_delay_ms`` fails at once.
        The wait is ``signal.wait(delay)``, so an abort ends it immediately.
        ``on_response`` sees every HTTP response: each failed attempt (before the retry
        decision) and the accepted one (before ``start``).
        """
        body = request.body if isinstance(request.body, bytes) else json_dumps(request.body)
        headers: dict[str, str | None] = {
            "Content-Type": "application/json", "Accept": request.accept,
            "Accept-Encoding": "identity", "User-Agent": _USER_AGENT}
        headers.update(request.headers)
        if None in headers.values():
            headers = _merged(headers)
        max_retries = request.max_retries
        if max_retries is None:
            max_retries = self.options.max_retries
        if max_retries is None:
            max_retries = DEFAULT_MAX_RETRIES
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
                if request.on_response is not None:
                    _respond(request.on_response, outcome)
                if push_start:
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
            _log.warning("%s request failed (%s); retrying (%d of %d) in %.1f s", self.label,
                         error, attempt, max_retries, delay)
            if self.signal is None:
                time.sleep(delay)
            elif self.signal.wait(delay):
                raise Aborted

    def _missing_endpoint(self, url: str) -> str:
        """A 404 answered with an HTML page: the server has no such API endpoint."""
        msg = (f"{self.label} API error (404): {url} is not an endpoint of this server (it "
               "answered with a web page). Check the base URL")
        if self.model.api == "openai-responses":
            msg += ("; a server that speaks only Chat Completions (Ollama, vLLM, llama.cpp, "
                    "LM Studio, ...) needs api=\"openai-completions\" (get_model(provider, "
                    "model_id, base_url=..., api=\"openai-completions\"))")
        return msg + "."

    def _attempt(self, request: SSERequest, body: bytes,
                 headers: Mapping[str, str | None]) -> SSEResponse | Failure:
        """One POST: the accepted stream, or why it failed and whether to retry."""
        assert self._session is not None
        provider = self.model.provider
        proxies, verify = self.client.environment(request.url)
        current.tracker = self.tracker
        try:
            # never follow a redirect: it would carry the key headers to another server
            response = post(self._session, request.url, body, headers,
                            timeout=request.timeout, proxies=proxies, verify=verify)
        except requests.RequestException as exc:
            self.tracker.detach()
            self.raise_if_aborted()
            parts = urllib.parse.urlsplit(request.url)
            reason = "timed out" if isinstance(exc, requests.Timeout) else connection_reason(exc)
            msg = (f"Could not connect to {self.label} at {parts.netloc} ({reason}) for "
                   f"{request.url}; is the server running? Check base_url.")
            refused = ProviderConnectionError(self.redact(msg), provider=provider)
            refused.__cause__ = exc  # why, for a caller that words it its own way (the proxy)
            return Failure(refused)
        finally:
            current.tracker = None
        self._responses.append(response)
        if self.signal is not None and self.signal.aborted:
            response.close()
            raise Aborted
        status = response.status_code
        if 300 <= status < 400:
            failure = Failure(self._redirect_error(request.url, response), retryable=False)
            self._report_error(request, response)
            return failure
        if status >= 400:
            # redacted before anything is cut, so no part of a key survives a truncation
            body_text = self.redact(self._read_error_body(response))
            msg = self.redact(format_http_error(self.label, status, body_text))
            if status == 404 and body_text.lstrip()[:1] == "<":  # a web page: no such endpoint
                msg = self._missing_endpoint(request.url)
            delay = retry_delay_s(response.headers, body_text)
            error = ProviderError(msg, provider=provider, status_code=status,
                                  body=body_text, retry_after=delay)
            self._report_error(request, response)
            return Failure(error, is_retryable(status, response.headers, body_text), delay)
        content_type = response.headers.get("content-type", "")
        if content_type and not content_type.lower().startswith(request.accept):
            body_text = self.redact(self._read_error_body(response))
            message, _code = error_details(body_text)
            msg = (f"{self.label} answered with Content-Type {content_type!r} instead of an "
                   f"event stream: {clip(message, MESSAGE_BODY_LIMIT)}. Check that base_url points "
                   "at a server that speaks this API and supports streaming.")
            error = ProviderResponseError(self.redact(msg), provider=provider,
                                          status_code=status)
            self._report_error(request, response)
            return Failure(error, retryable=False)
        return SSEResponse(self, response)

    @staticmethod
    def _report_error(request: SSERequest, response: requests.Response) -> None:
        """Hand an error response's status and headers to ``on_response`` (pi-ai 1.6: every
        response, also the failed attempts that are retried), before the retry decision."""
        if request.on_response is None:
            return
        headers = {name.lower(): value for name, value in response.headers.items()}
        try:
            request.on_response(ProviderResponse(response.status_code, headers))
        except Exception as exc:
            raise _hook_error("on_response", exc) from exc

    def _redirect_error(self, url: str, response: requests.Response) -> ProviderError:
        location = response.headers.get("location", "")
        self._read_error_body(response)  # closes the response
        target = urllib.parse.urlsplit(urllib.parse.urljoin(url, location))
        origin = f"{target.scheme}://{target.netloc}" if target.netloc else "(no Location)"
        msg = (f"{self.label} answered {response.status_code} with a redirect to {origin}. "
               "Provider requests never follow redirects (they would send the API key to "
               "that server); set base_url to the address that answers without one.")
        return ProviderError(self.redact(msg), provider=self.model.provider,
                             status_code=response.status_code)

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


def _merged(headers: Mapping[str, str | None]) -> dict[str, str | None]:
    """``headers`` with one entry per name (compared case-insensitively, the last wins); a
    name whose last value is ``None`` stays ``None``, so requests drops its session default
    too, and urllib3 is told to skip its own ``User-Agent`` / ``Accept-Encoding``."""
    last: dict[str, tuple[str, str | None]] = {}
    for name, value in headers.items():
        key = name.lower()
        last.pop(key, None)
        last[key] = (name, value)
    merged: dict[str, str | None] = {}
    for key, (name, value) in last.items():
        if value is None and key in ("user-agent", "accept-encoding"):
            value = urllib3.util.SKIP_HEADER
        merged[name] = value
    return merged


def _with_model(hook: Callable[[ProviderResponse, Model], None],
                model: Model) -> Callable[[ProviderResponse], None]:
    def on_response(response: ProviderResponse) -> None:
        hook(response, model)

    return on_response


def _hook_error(name: str, exc: Exception) -> ProviderError:
    return ProviderError(f"StreamOptions.{name} raised {type(exc).__name__}: {exc}")


def _respond(hook: Callable[[ProviderResponse], None], sse: SSEResponse) -> None:
    """Hand the accepted response's status and headers to ``on_response``."""
    headers = {name.lower(): value for name, value in sse.headers.items()}
    try:
        hook(ProviderResponse(sse.status, headers))
    except Exception as exc:
        sse.close()
        raise _hook_error("on_response", exc) from exc


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
        self._source = ChunkSource(response.raw)

    def events(self) -> Iterator[SSEEvent]:
        """The events in order (comments, keep-alives and empty events skipped)."""
        source = self._source
        try:
            for raw in sseclient.SSEClient(self.chunks()).events():
                if source.exhausted and source.tail:
                    yield SSEEvent(raw.event, raw.data, truncated=True)
                else:
                    yield SSEEvent(raw.event, raw.data)
        except UnicodeDecodeError as exc:
            self._call.raise_if_aborted()
            msg = f"{self._call.label} sent an event stream that is not valid UTF-8 ({exc})."
            raise ProviderResponseError(msg, provider=self._call.model.provider) from exc

    def chunks(self) -> Iterator[bytes]:
        """The body's chunks as they arrive (a binary event stream; ``events`` parses them
        as SSE), with transport failures mapped and an abort unwinding the worker."""
        call = self._call
        try:
            yield from self._source
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            call.raise_if_aborted()
            msg = (f"The connection to {call.label} broke in the middle of the response "
                   f"({call.redact(describe(exc))}). Retry the request.")
            raise ProviderConnectionError(msg, provider=call.model.provider) from exc
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
        if reuse and not (self._call.signal is not None and self._call.signal.aborted):
            self._release_for_reuse()
        self._call.tracker.detach()
        self.response.close()

    def _release_for_reuse(self) -> None:
        # An adapter stops at its terminal event (e.g. "[DONE]"), usually just before the
        # chunked body's terminator. Reading that (with a short timeout, so a server that
        # keeps the stream open cannot hold us) hands the connection back to the pool;
        # closing an unfinished response would drop it and the next turn would reconnect.
        if self._source.exhausted:
            return  # the body was read to its end: already released
        if not self._call.tracker.set_timeout(_DRAIN_TIMEOUT_S):
            return  # no socket (the request is over): nothing to keep
        try:
            if not self._source.drain(_DRAIN_MAX_CHUNKS):
                _log.debug("Not reusing the %s connection: more events after the end",
                           self._call.label)
        except (urllib3.exceptions.HTTPError, requests.RequestException, OSError,
                ValueError) as exc:
            # more data or silence after the terminal event: close() drops the connection
            _log.debug("Not reusing the %s connection: %s", self._call.label, exc)

    def __enter__(self) -> SSEResponse:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(reuse=exc_type is None)



def _copy_body(body: Any) -> Any:
    """A deep copy of a JSON-ready request body (through JSON, in C; else ``deepcopy``)."""
    try:
        return json.loads(json_dumps(body))
    except (TypeError, ValueError, RecursionError):
        return copy.deepcopy(body)
