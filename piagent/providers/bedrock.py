"""The Amazon Bedrock adapter (api ``bedrock-converse-stream``): ``stream_bedrock``.

``POST {endpoint}/model/{modelId}/converse-stream`` with the body of ``_bedrock_request``,
SigV4-signed by botocore (the extra ``piagent[bedrock]``) or with a Bedrock API key as a
bearer token; the answer is ``application/vnd.amazon.eventstream``, binary frames decoded by
botocore's ``EventStreamBuffer``, each a Converse stream event (``messageStart``,
``contentBlockStart``/``Delta``/``Stop``, ``messageStop``, ``metadata``) or an exception.
Credentials, region and endpoint are ``_bedrock_auth``'s; transport, retries and abort the
kit's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from ..errors import ProviderError, ProviderResponseError
from ..messages import StopReason, now_ms
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, ProviderResponse, StreamOptions
from ._bedrock_auth import BedrockTarget, bedrock_target, sign
from ._bedrock_request import build_bedrock_request
from ._strict import is_strict_limit_error, mark_over_strict_limits, over_strict_limits
from .kit import (
    HttpClient,
    MessageBuilder,
    ProviderCall,
    SSERequest,
    json_dumps,
    start_stream,
)

__all__ = ["stream_bedrock"]

API = "bedrock-converse-stream"
LABEL = "Bedrock"
EVENT_STREAM = "application/vnd.amazon.eventstream"
_CLIENT = HttpClient("bedrock")
_STOP: dict[str, StopReason] = {"end_turn": "stop", "stop_sequence": "stop",
                                "max_tokens": "length",
                                "model_context_window_exceeded": "length",
                                "tool_use": "toolUse"}
_REDACTED = "[Reasoning redacted]"
# the stream's modelled exceptions, with the prefix pi-ai gives each
_EXCEPTIONS = {"internalServerException": "Internal server error",
               "modelStreamErrorException": "Model stream error",
               "validationException": "Validation error",
               "throttlingException": "Throttling error",
               "serviceUnavailableException": "Service unavailable"}


def stream_bedrock(model: Model | None, context: Context,
                   options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """Stream one response from Amazon Bedrock's Converse API (a ``StreamFn``).

    Credentials as pi-ai reads them: ``options.api_key`` or ``AWS_BEARER_TOKEN_BEDROCK`` (a
    Bedrock API key, sent as a bearer token), else ``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, else botocore's default chain (shared
    files, SSO, container and instance roles). Never raises: failures end the stream with an
    ``ErrorEvent`` naming what is missing; no secret appears in it.
    """
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label=LABEL)


def _run(call: ProviderCall) -> Iterator[None]:
    seen: dict[str, Any] = {}  # the last response's status and headers (for diagnostics)
    try:
        yield from _converse(call, seen)
    except ProviderError as exc:
        _diagnose(call.out, exc, seen)
        raise


def _converse(call: ProviderCall, seen: dict[str, Any]) -> Iterator[None]:
    options = call.options
    model = call.model
    target = bedrock_target(model, options)
    url = f"{target.endpoint.rstrip('/')}/model/{quote(model.id, safe='')}/converse-stream"
    headers: dict[str, str | None] = {**(model.headers or {}), **(options.headers or {})}
    for name in [n for n in headers if n.lower().startswith("x-amz-")
                 or n.lower() in ("authorization", "host")]:
        del headers[name]  # owned by the signature (pi-ai drops them too)
    relax = over_strict_limits(options.session_id)
    body, preferred = build_bedrock_request(model, call.messages, options, relax_strict=relax)
    try:
        response = call.open_sse(_signed(call, target, url, body, headers, seen))
    except ProviderError as error:
        # Bedrock refused the number of strict tools (it checks before streaming): again
        # with the tools that only prefer strict sampling plain, as pi-ai does
        if relax or not preferred or error.status_code != 400 \
                or not is_strict_limit_error(str(error)):
            raise
        mark_over_strict_limits(options.session_id)
        call.out.add_diagnostic({"type": "bedrock_strict_tools_fallback", "timestamp": now_ms(),
                                 "error": {"message": _message_of(error)},
                                 "details": {"reason": "strict_tool_limits_exceeded"}})
        body, _ = build_bedrock_request(model, call.messages, options, relax_strict=True)
        response = call.open_sse(_signed(call, target, url, body, headers, seen))
    state = _State(call.out)
    hook = options.on_provider_stream_event
    from botocore.eventstream import EventStreamBuffer  # the extra, checked by bedrock_target

    frames = EventStreamBuffer()
    with response:
        for chunk in response.chunks():
            frames.add_data(chunk)
            for frame in _frames(frames):
                kind, payload = _decode(frame)
                if hook is not None:  # pi-ai hands it the SDK's item: {eventType: event}
                    try:
                        hook({kind: payload}, model)
                    except Exception as exc:
                        raise ProviderError(f"StreamOptions.on_provider_stream_event raised "
                                            f"{type(exc).__name__}: {exc}") from exc
                state.handle(kind, payload)
            yield  # hand the queued events to the consumer
    state.finish()


def _signed(call: ProviderCall, target: BedrockTarget, url: str, body: dict[str, Any],
            headers: dict[str, str | None], seen: dict[str, Any]) -> SSERequest:
    """The request of ``body``, signed over its final bytes (after ``on_payload``)."""
    request = call.request(url, body, headers)
    data = request.body if isinstance(request.body, bytes) else json_dumps(request.body)
    signed = sign(target, url, data, call.add_secret)
    user_hook = request.on_response

    def on_response(response: ProviderResponse) -> None:
        seen["response"] = response
        if user_hook is not None:
            user_hook(response)

    return replace(request, body=data, headers={**request.headers, **signed},
                   accept=EVENT_STREAM, on_response=on_response)


def _message_of(error: ProviderError) -> str:
    """The service's own message of an HTTP error (its JSON ``message``), else the text."""
    try:
        data = json.loads(error.body) if isinstance(error.body, str) else None
    except ValueError:
        data = None
    found = data.get("message") if isinstance(data, dict) else None
    return str(found) if found else str(error)


def _diagnose(out: MessageBuilder, exc: ProviderError, seen: dict[str, Any]) -> None:
    """pi-ai's ``bedrock_response_failure`` diagnostic: the HTTP status, the modelled error
    code and the request id, those known (none: no diagnostic)."""
    details: dict[str, Any] = {}
    response: ProviderResponse | None = seen.get("response")
    headers = {k.lower(): v for k, v in response.headers.items()} if response else {}
    if exc.status_code is not None and response is not None and response.status >= 400:
        details["status"] = exc.status_code
        code = headers.get("x-amzn-errortype", "").split(":")[0]
        if code.endswith("Exception"):
            details["errorCode"] = code
    if exc.status_code is None and isinstance(exc.body, dict) and "errorCode" in exc.body:
        details["errorCode"] = exc.body["errorCode"]  # a modelled exception in the stream
    request_id = headers.get("x-amzn-requestid", "").strip()
    if request_id and len(request_id) <= 200:
        details["requestId"] = request_id
    if details:
        out.add_diagnostic({"type": "bedrock_response_failure", "timestamp": now_ms(),
                            "details": details})


def _frames(buffer: Any) -> Iterator[Any]:
    try:
        yield from buffer
    except Exception as exc:  # botocore's ChecksumMismatch, InvalidHeadersLength, …
        raise ProviderResponseError(f"Bedrock sent an event stream frame that cannot be read "
                                    f"({type(exc).__name__}: {exc}).",
                                    provider="amazon-bedrock") from exc


def _decode(frame: Any) -> tuple[str, Any]:
    headers = frame.headers
    kind = headers.get(":message-type")
    try:
        payload = json.loads(frame.payload or b"{}")
    except ValueError as exc:
        raise ProviderResponseError(f"Bedrock sent an event whose payload is not JSON: "
                                    f"{frame.payload[:200]!r}", provider="amazon-bedrock") from exc
    if kind == "event":
        return str(headers.get(":event-type", "")), payload
    name = str(headers.get(":exception-type") or headers.get(":error-code") or "error")
    text = payload.get("message") or payload.get("Message") or headers.get(":error-message") \
        if isinstance(payload, dict) else None
    prefix = _EXCEPTIONS.get(name[:1].lower() + name[1:], name)
    raise ProviderError(f"{prefix}: {text or json.dumps(payload)}", provider="amazon-bedrock",
                        body={"errorCode": name[:1].upper() + name[1:], "payload": payload})


class _State:
    """Maps Converse stream events onto the ``MessageBuilder``.

    Thread safety: used only by the worker thread running ``_run``.
    """

    def __init__(self, out: MessageBuilder) -> None:
        self.out = out
        self.open: dict[int, int] = {}  # Bedrock's contentBlockIndex -> our block index
        self.redacted: dict[int, list[bytes]] = {}  # our index -> encrypted reasoning chunks
        self.stop: str | None = None

    def handle(self, kind: str, event: Any) -> None:
        if not isinstance(event, dict):
            return
        out = self.out
        at: Any = event.get("contentBlockIndex")
        if kind == "contentBlockStart":
            use = (event.get("start") or {}).get("toolUse")
            if isinstance(use, dict):
                self.open[at] = out.open_tool_call(str(use.get("toolUseId") or ""),
                                                   str(use.get("name") or ""))
        elif kind == "contentBlockDelta":
            self._delta(at, event.get("delta") or {})
        elif kind == "contentBlockStop":
            index = self.open.pop(at, None)
            if index is not None:
                self._flush(index)
                out.close_block(index)
        elif kind == "messageStop":
            self.stop = str(event.get("stopReason") or "")
            out.set_response(raw_stop_reason=self.stop)
        elif kind == "metadata" and isinstance(event.get("usage"), dict):
            usage = event["usage"]
            counts = [int(usage.get(k) or 0) for k in ("inputTokens", "outputTokens",
                                                        "cacheReadInputTokens",
                                                        "cacheWriteInputTokens")]
            details = usage.get("cacheDetails")
            hour = sum(int(d.get("inputTokens") or 0) for d in details if isinstance(d, dict)
                       and d.get("ttl") == "1h") if isinstance(details, list) else None
            out.set_usage(input=counts[0], output=counts[1], cache_read=counts[2],
                          cache_write=counts[3], cache_write_1h=hour,
                          total_tokens=int(usage.get("totalTokens") or 0)
                          or counts[0] + counts[1])
        elif kind == "messageStart" and event.get("role") not in (None, "assistant"):
            raise ProviderError("Unexpected assistant message start but got user message "
                                "start instead", provider="amazon-bedrock")

    def _delta(self, at: Any, delta: dict[str, Any]) -> None:
        out = self.out
        index = self.open.get(at)
        if "text" in delta:
            if index is None:
                index = self.open[at] = out.open_text()
            if out.block(index).type == "text":
                out.add_text(index, str(delta["text"]))
        elif isinstance(delta.get("toolUse"), dict):
            if index is not None and out.block(index).type == "toolCall":
                out.add_tool_arguments(index, str(delta["toolUse"].get("input") or ""))
        elif isinstance(delta.get("reasoningContent"), dict):
            reasoning = delta["reasoningContent"]
            if index is None:
                index = self.open[at] = out.open_thinking(
                    "", redacted=bool(reasoning.get("redactedContent")))
            block = out.block(index)
            if block.type != "thinking":
                return
            if reasoning.get("text"):
                out.add_thinking(index, str(reasoning["text"]))
            if reasoning.get("signature") and index not in self.redacted:
                out.set_signature(index, str(reasoning["signature"]), append=True)
            if reasoning.get("redactedContent"):
                if index not in self.redacted:
                    self.redacted[index] = []
                    block.redacted = True  # (usually opened so: redacted blocks come alone)
                    out.set_signature(index, "")
                    out.add_thinking(index, _REDACTED)
                self.redacted[index].append(base64.b64decode(reasoning["redactedContent"]))

    def _flush(self, index: int) -> None:
        chunks = self.redacted.pop(index, None)
        if chunks is not None:
            self.out.set_signature(index, base64.b64encode(b"".join(chunks)).decode())

    def finish(self) -> None:
        for index in list(self.redacted):
            self._flush(index)
        self.out.close_open_blocks()
        if self.stop is None:
            raise ProviderError("Bedrock stream ended without a stop reason",
                                provider="amazon-bedrock")
        mapped = _STOP.get(self.stop)
        if mapped is None:
            raise ProviderError(f"Provider stopped with: {self.stop}" if self.stop else
                                "An unknown error occurred", provider="amazon-bedrock")
        self.out.finish(mapped)
