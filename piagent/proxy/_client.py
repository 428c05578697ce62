"""``stream_proxy``: a stream function that asks a proxy server to call the model.

The proxy (``ProxyApp``, or pi's TypeScript server) keeps the provider keys. The client
POSTs the model, the context and the serialisable options, reads pi's proxy events
(assistant events without ``partial``) and rebuilds the partial message itself, as pi's
``proxy.ts`` does. The transport (sessions, abort by socket shutdown, SSE parsing) is the
adapter kit (``piagent.providers.kit``), run lazily on the thread that consumes the stream (as the
providers are); this module owns only the proxy's request and event mapping.
"""

from __future__ import annotations

import dataclasses
import http
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProviderConnectionError, ProviderError, ProviderResponseError
from ..messages import (
    AssistantMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    content_from_dict,
    content_to_dict,
    sanitize_surrogates,
    sanitize_surrogates_in,
)
from ..models import Model
from ..providers.kit import (
    HttpClient,
    MessageBuilder,
    ProviderCall,
    SSERequest,
    connection_reason,
    start_stream,
)
from ..stream import AssistantMessageEventStream, Context, ErrorEvent, StreamFn, StreamOptions
from ._protocol import context_to_dict, model_to_dict, options_to_dict, usage_from_dict

__all__ = ["ProxyStreamOptions", "proxy_stream_fn", "stream_proxy"]

_log = logging.getLogger(__name__)

_CLIENT = HttpClient("proxy")  # pooled sessions, shared by every stream_proxy call
_LABEL = "the proxy server"
CLOSED_EARLY = "Connection closed by proxy server before the response completed"
ABORTED = "Request aborted by user"  # pi's streamProxy, whatever the signal's reason


@dataclass(kw_only=True)
class ProxyStreamOptions(StreamOptions):
    """``StreamOptions`` plus where the proxy is and the token it expects.

    Only the serialisable options (temperature, max_tokens, reasoning, session_id, …) are
    sent; ``signal``, ``api_key``, ``proxy_url`` and ``auth_token`` never leave the client.
    """

    proxy_url: str
    """The proxy's base URL; requests go to ``{proxy_url}/api/stream``."""
    auth_token: str = field(repr=False)
    """Sent as ``Authorization: Bearer <auth_token>``."""
    timeout: tuple[float, float] = (10.0, 600.0)
    """(connect, read) seconds; the read timeout is the longest silence between events."""


def proxy_stream_fn(proxy_url: str, auth_token: str, *,
                    timeout: tuple[float, float] = (10.0, 600.0)) -> StreamFn:
    """A ``StreamFn`` for ``Agent(stream_fn=...)`` that sends every request to a proxy.

    The options the loop passes (signal, reasoning, session id, …) are kept; the proxy URL
    and the token are added.
    """

    def stream(model: Model | None, context: Context,
               options: StreamOptions | None = None) -> AssistantMessageEventStream:
        base = options if options is not None else StreamOptions()
        values = {f.name: getattr(base, f.name) for f in dataclasses.fields(StreamOptions)}
        proxy_options = ProxyStreamOptions(**values, proxy_url=proxy_url,
                                           auth_token=auth_token, timeout=timeout)
        return stream_proxy(model, context, proxy_options)

    return stream


def stream_proxy(model: Model | None, context: Context,
                 options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """Stream one response through a proxy server; ``options`` is a ``ProxyStreamOptions``.

    Never raises: HTTP errors ("Proxy error: <status> <reason>", or "Proxy error: <error>"
    from a JSON body), network failures, malformed events and an abort (``"aborted"``,
    "Request aborted by user" as pi's client says, promptly: the socket is shut down) all
    end the stream with an ``ErrorEvent``. A stream
    that closes before ``done``/``error`` ends with "Connection closed by proxy server before
    the response completed".
    """
    if not isinstance(options, ProxyStreamOptions):
        got = type(options).__name__
        return _failed(model, (
            f"stream_proxy needs ProxyStreamOptions(proxy_url=..., auth_token=...), got {got}. "
            "Pass proxy_stream_fn(proxy_url, auth_token) as the stream function instead."))
    if model is None:
        return start_stream(None, options, _run_unreachable, context=context, client=_CLIENT,
                            api="", label=_LABEL)
    try:
        envelope = {"model": model_to_dict(model), "context": context_to_dict(context),
                    "options": options_to_dict(options)}
        text = json.dumps(envelope, ensure_ascii=False, separators=(",", ":"))
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, raw in the JSON: removed, as pi-ai does
            body = sanitize_surrogates(text).encode("utf-8")
    except RecursionError:
        return _failed(model, (
            "The request for the proxy could not be encoded as JSON: the context is nested "
            "too deeply (a message, tool argument or details value holds lists or objects "
            f"more than {sys.getrecursionlimit()} levels deep). Flatten that value."))
    except (TypeError, ValueError) as exc:
        return _failed(model, f"The request for the proxy could not be encoded as JSON: {exc}")
    url = options.proxy_url.rstrip("/") + "/api/stream"
    headers = {"Authorization": f"Bearer {options.auth_token}"}
    request = SSERequest(url=url, body=body, headers=headers, timeout=options.timeout,
                         max_retries=0)

    def run(call: ProviderCall) -> Iterator[None]:
        call.add_secret(options.auth_token)
        yield from _run(call, request)

    return start_stream(model, options, run, context=context, client=_CLIENT, api=model.api,
                        label=_LABEL, abort_text=ABORTED)


def _run_unreachable(call: ProviderCall) -> Iterator[None]:  # start_stream fails it first
    raise ProviderError("No model was given to stream_proxy.")
    yield


def _run(call: ProviderCall, request: SSERequest) -> Iterator[None]:
    """POST, then apply each proxy event to the message being rebuilt.

    A generator: ``start_stream`` runs it lazily on the thread that consumes the stream,
    one wire event per step, so no thread is started per request.
    """
    try:
        sse = call.open_sse(request, push_start=False)  # start when the proxy sends it, as pi
    except ProviderError as exc:
        raise _proxy_error(exc, request.url) from exc
    rebuilder = _Rebuilder(call.out)
    with sse:
        for event in sse.events():
            if event.truncated:
                break  # the body ended in the middle of an event: a clean close, for pi
            try:
                data = json.loads(event.data)
            except (ValueError, RecursionError) as exc:
                excerpt = call.redact(event.data)  # before the cut: no key prefix survives
                if len(excerpt) > 200:
                    excerpt = excerpt[:200] + "…"
                msg = (f"The proxy server sent an event whose data is not valid JSON ({exc}): "
                       f"{excerpt!r}. Check that proxy_url points at a piagent or pi "
                       "proxy.")
                raise ProviderResponseError(msg) from exc
            if isinstance(data, dict) and rebuilder.apply(data):
                return
            yield
    raise ProviderResponseError(CLOSED_EARLY)


def _proxy_error(exc: ProviderError, url: str) -> ProviderError:
    """The transport's error restated in proxy terms (pi's "Proxy error: …" for HTTP)."""
    status = exc.status_code
    if status is not None and status >= 300:
        detail = _json_error(exc.body)
        if detail is None:
            try:
                reason = http.HTTPStatus(status).phrase
            except ValueError:
                reason = ""
            detail = f"{status} {reason}".rstrip()
        return ProviderError(f"Proxy error: {detail}", status_code=status, body=exc.body)
    if isinstance(exc, ProviderConnectionError):
        cause = exc.__cause__
        reason = connection_reason(cause) if cause is not None else str(exc)
        return ProviderConnectionError(
            f"Could not reach the proxy server at {url} ({reason}). Check proxy_url and "
            "that the proxy server is running.")
    if isinstance(exc, ProviderResponseError):
        return ProviderResponseError(
            f"The proxy server at {url} did not answer with an event stream (HTTP {status}). "
            "Check that proxy_url points at a piagent or pi proxy.", status_code=status)
    return exc


def _json_error(body: Any) -> str | None:
    if not isinstance(body, str):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict) and data.get("error") not in (None, ""):
        error = data["error"]
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
        return str(error)
    return None


class _Rebuilder:
    """Applies proxy events to a ``MessageBuilder`` (pi's ``processProxyEvent``).

    The server's ``contentIndex`` is mapped to the local block index, so the two need not
    agree. Thread safety: used by the worker thread only.
    """

    def __init__(self, out: MessageBuilder) -> None:
        self._out = out
        self._index: dict[int, int] = {}  # server contentIndex → local index

    def apply(self, data: dict[str, Any]) -> bool:
        """Apply one event; True when it was terminal (``done`` or ``error``)."""
        out = self._out
        kind = data.get("type")
        index = data.get("contentIndex")
        if kind == "start":
            out.start()
        elif kind == "text_start":
            self._index[_int(index)] = out.open_text()
        elif kind == "thinking_start":
            self._index[_int(index)] = out.open_thinking()
        elif kind == "toolcall_start":
            self._index[_int(index)] = out.open_tool_call(str(data.get("id", "")),
                                                          str(data.get("toolName", "")))
        elif kind == "text_delta":
            out.add_text(self._local(index, TextContent, "text_delta", "text"),
                         str(data.get("delta", "")))
        elif kind == "thinking_delta":
            out.add_thinking(self._local(index, ThinkingContent, "thinking_delta", "thinking"),
                             str(data.get("delta", "")))
        elif kind == "toolcall_delta":
            out.add_tool_arguments(self._local(index, ToolCall, "toolcall_delta", "toolCall"),
                                   str(data.get("delta", "")))
        elif kind == "text_end":
            local = self._local(index, TextContent, "text_end", "text")
            if data.get("contentSignature") is not None:
                out.block(local).text_signature = str(data["contentSignature"])
            out.close_block(local)
        elif kind == "thinking_end":
            local = self._local(index, ThinkingContent, "thinking_end", "thinking")
            if data.get("contentSignature") is not None:
                out.block(local).thinking_signature = str(data["contentSignature"])
            out.close_block(local)
        elif kind == "toolcall_end":
            self._end_tool_call(index, data.get("toolCall"))
        elif kind == "done":
            self._end_fields(data)
            reason = data.get("reason")
            out.finish(reason if reason in ("stop", "length", "toolUse") else "stop")
            return True
        elif kind == "error":
            self._end_fields(data)
            text = (data.get("errorMessage")
                    or "The proxy server reported an error without a message.")
            out.fail(str(text), aborted=data.get("reason") == "aborted")
            return True
        else:
            _log.debug("Ignoring unknown proxy event type %r", kind)
        return False

    def _local(self, index: Any, kind: type, event: str, noun: str) -> int:
        local = self._index.get(index) if isinstance(index, int) else None
        if local is None or not isinstance(self._out.block(local), kind):
            msg = f"Received {event} for non-{noun} content"
            raise ProviderResponseError(msg)
        return local

    def _end_fields(self, data: dict[str, Any]) -> None:
        """What ``done``/``error`` carry onto the message: usage, the provider's thinking level."""
        message = self._out.message
        message.usage = usage_from_dict(data.get("usage"))
        if "providerThinkingLevel" in data:
            level = data["providerThinkingLevel"]
            if level is None:
                message.extra["providerThinkingLevel"] = None  # as sent: an explicit null
            else:
                message.provider_thinking_level = str(level)

    def _end_tool_call(self, index: Any, final: Any) -> None:
        """pi's ``Object.assign(block, toolCall)``: the event's tool call is authoritative,
        each of its keys replacing what the deltas built (the arguments among them)."""
        local = self._index.get(index) if isinstance(index, int) else None
        if local is None or not isinstance(self._out.block(local), ToolCall):
            return  # pi emits nothing for a toolcall_end on another kind of block
        block: ToolCall = self._out.block(local)
        if isinstance(final, Mapping) and final:
            final = sanitize_surrogates_in(final)  # a server's lone surrogates: removed
            merged = content_from_dict({**content_to_dict(block), **final, "type": "toolCall"})
            block.id, block.name, block.arguments = merged.id, merged.name, merged.arguments
            block.thought_signature = merged.thought_signature
            block.namespace, block.arguments_error = merged.namespace, merged.arguments_error
            block.extra = merged.extra
        self._out.close_block(local)


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    msg = f"The proxy server sent a block event without a valid contentIndex ({value!r})."
    raise ProviderResponseError(msg)


def _failed(model: Model | None, text: str) -> AssistantMessageEventStream:
    stream = AssistantMessageEventStream()
    message = AssistantMessage(api=model.api if model else "",
                               provider=model.provider if model else "",
                               model=model.id if model else "", stop_reason="error",
                               error_message=text)
    stream.push(ErrorEvent("error", message))
    stream.end()
    return stream
