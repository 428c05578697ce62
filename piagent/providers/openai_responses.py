"""``openai-responses``: the OpenAI Responses API (``POST {base_url}/responses``).

Stateless (``store: false``): the whole history is sent every turn, with reasoning items
replayed verbatim from their signatures (docs/providers.md). Wire mapping only; transport,
retries and abort live in ``kit`` (``_call``, ``_start``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import ProviderError
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    StopReason,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    now_ms,
    sanitize_surrogates,
)
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamOptions
from ..transcript import get_current_tools, get_system_message_text
from ._budget import clamp_max_tokens
from ._compat import fold_system_messages
from ._hash import short_hash
from ._keys import is_local_url, missing_key_message, provider_label, resolve_api_key
from ._prompt_cache import (
    affinity_format,
    affinity_headers,
    cache_key,
    cache_retention,
    compat_value,
)
from ._responses_compat import (
    ToolChanges,
    add_reasoning,
    configuration_update_effort,
    tool_changes,
    wire_tools,
)
from ._responses_ids import call_id_normalizer, text_signature
from ._transform import leading_system_text, system_update_text, transform_messages
from .kit import (
    HttpClient,
    MessageBuilder,
    ProviderCall,
    arguments_json,
    start_stream,
)

__all__ = ["build_responses_request", "stream_openai_responses"]

API = "openai-responses"
_CLIENT = HttpClient(API)
_TIER_MULTIPLIER = {"flex": 0.5, "priority": 2.0}


def build_responses_request(model: Model, messages: Sequence[AgentMessage],
                            options: StreamOptions, *, max_tokens: int | None = None
                            ) -> dict[str, Any]:
    """The JSON body of a streaming ``POST /responses`` for a transformed transcript.

    ``max_tokens``: the output limit, by default ``clamp_max_tokens`` of ``messages`` (the
    stream function passes it computed from the untransformed transcript, as pi does)."""
    messages = fold_system_messages(model, messages)
    changes = tool_changes(model)
    update_effort = configuration_update_effort(model, options)
    body: dict[str, Any] = {"model": model.id,
                            "input": _wire_input(model, messages, changes, update_effort),
                            "stream": True, "store": False}
    if changes is None:
        tools = get_current_tools(messages)
        if tools:
            body["tools"] = wire_tools(model, tools)
    body["max_output_tokens"] = max_tokens if max_tokens is not None else \
        clamp_max_tokens(model, messages, options.max_tokens or model.max_tokens)
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.session_id or options.cache_retention or options.env is not None \
            or "PI_CACHE_RETENTION" in os.environ:
        _add_prompt_cache(body, model.compat, options)
    add_reasoning(body, model, options, update_effort, lambda level: _effort(model, level))
    if options.sampling_params:
        body.update(options.sampling_params)
    return body


def _effort(model: Model, level: str) -> str:
    mapped = (model.thinking_level_map or {}).get(level)  # the catalogue's wire value
    return mapped if mapped is not None else "high" if level in ("xhigh", "max") else level


def _add_prompt_cache(body: dict[str, Any], compat: Mapping[str, Any] | None,
                      options: StreamOptions) -> None:
    """``prompt_cache_key`` (the session id, unless the compat's ``promptCacheKeyMode`` is
    "disabled"), ``prompt_cache_retention`` or, where the server has explicit cache modes
    (``supportsExplicitPromptCacheMode``), ``prompt_cache_options``; as pi-ai 1.6.1."""
    retention = cache_retention(options)
    if options.session_id and retention != "none" and compat_value(
            compat, "promptCacheKeyMode", "prompt_cache_key_mode", "auto") != "disabled":
        body["prompt_cache_key"] = cache_key(options.session_id)
    long = retention == "long" and compat_value(
        compat, "supportsLongCacheRetention", "supports_long_cache_retention", True)
    if compat_value(compat, "supportsExplicitPromptCacheMode",
                    "supports_explicit_prompt_cache_mode", False):
        if retention == "none":
            body["prompt_cache_options"] = {"mode": "explicit"}
        elif long:
            body["prompt_cache_options"] = {"ttl": "30m"}
    elif long:
        body["prompt_cache_retention"] = "24h"


def _wire_input(model: Model, messages: Sequence[AgentMessage], changes: ToolChanges | None,
                update_effort: str | None) -> list[dict[str, Any]]:
    role = "developer" if model.reasoning else "system"
    items: list[dict[str, Any]] = []
    if changes is None:
        prompt, start = leading_system_text(messages)
        if prompt:
            items.append({"role": role, "content": prompt})
    else:
        start = 0  # each system message in place, with the tools it adds before it
    # n: the message's index after the leading system message (pi's msgIndex)
    lead = 1 if changes is not None and messages and isinstance(messages[0], SystemMessage) \
        else 0
    for n, message in enumerate(messages[start:], -lead):
        if isinstance(message, UserMessage):
            items.append({"role": "user", "content": _user_parts(message.content, model)})
        elif isinstance(message, AssistantMessage):
            foreign = message.provider != model.provider or message.api != model.api
            same = not foreign and message.model == model.id
            before = len(items)
            _assistant_items(message, n, items, same, foreign)
            if update_effort is not None and same and len(items) > before \
                    and message.provider_thinking_level is not None:
                items.insert(before, _configuration_update(message.provider_thinking_level))
        elif isinstance(message, ToolResultMessage):
            items.append(_tool_output(message, model))
        elif isinstance(message, SystemMessage):
            if changes is None:
                text = system_update_text(message)
            else:
                changes.before(message, role, items)
                first = get_system_message_text(message) if n < 0 \
                    else system_update_text(message)  # n < 0: the leading one
                text = "\n\n".join(t for t in (first, changes.removal(message)) if t)
            if text:
                items.append({"role": role, "content": text})
    if update_effort is not None:
        items.append(_configuration_update(update_effort))
    return items


def _configuration_update(effort: str) -> dict[str, Any]:
    return {"type": "configuration_update", "reasoning": {"effort": effort}}


def _user_parts(content: str | list[Any], model: Model) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append({"type": "input_text", "text": block.text})
        elif isinstance(block, ImageContent) and "image" in model.input:
            parts.append({"type": "input_image", "detail": "auto",
                          "image_url": f"data:{block.mime_type};base64,{block.data}"})
    return parts


def _assistant_items(message: AssistantMessage, n: int, items: list[dict[str, Any]],
                     same_model: bool, foreign: bool) -> None:
    """The Responses items of an assistant message; a tool call's ``namespace`` (a
    dynamically loaded tool's) only back to the model that gave it. ``foreign``: the message
    is another provider's or API's; a text block without an id gets pi's ``msg_pi_{n}[_{j}]``
    (``n``: pi's message index)."""
    texts = 0
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if block.thinking_signature:
                try:
                    items.append(json.loads(block.thinking_signature))  # the reasoning item
                except ValueError:
                    continue  # not a Responses reasoning item
        elif isinstance(block, TextContent):
            item_id, phase = text_signature(block.text_signature)
            if not item_id:  # pi's fallback: msg_pi_{n}, then msg_pi_{n}_{j} (text blocks)
                item_id = f"msg_pi_{n}_{texts}" if texts else f"msg_pi_{n}"
            elif len(item_id) > 64:
                item_id = "msg_" + short_hash(item_id)
            texts += 1
            item: dict[str, Any] = {
                "type": "message", "role": "assistant", "id": item_id, "status": "completed",
                "content": [{"type": "output_text", "text": block.text, "annotations": []}]}
            if phase:
                item["phase"] = phase
            items.append(item)
        elif isinstance(block, ToolCall):
            call_id, pipe, fc_id = block.id.partition("|")
            if "|" in fc_id:
                fc_id = fc_id.partition("|")[0]  # pi's split("|"): the second part only
            # replayed as OpenAI returned it: "completed" (pi-ai 1.6; without it a resent
            # history no longer matches and the reasoning after the call is dropped)
            item = {"type": "function_call", "call_id": call_id, "name": block.name,
                    "status": "completed", "arguments": arguments_json(block.arguments)}
            if pipe and foreign:  # another provider's or API's item id (kept raw by
                fc_id = f"fc_{short_hash(fc_id)}"  # the normalizer), as pi-ai 1.6.1 sends it
            if fc_id.startswith("fc_") and (same_model or foreign):
                item["id"] = fc_id  # none for another model of this API (pi's pairing rule)
            if same_model and block.namespace is not None:
                item["namespace"] = block.namespace
            items.append(item)


def _tool_output(message: ToolResultMessage, model: Model) -> dict[str, Any]:
    call_id = message.tool_call_id.partition("|")[0]
    images = [b for b in message.content if isinstance(b, ImageContent)]
    text = "\n".join(b.text for b in message.content if isinstance(b, TextContent))
    if not images or "image" not in model.input:
        return {"type": "function_call_output", "call_id": call_id, "output": text}
    return {"type": "function_call_output", "call_id": call_id,
            "output": _user_parts(message.content, model)}


# --- the response -----------------------------------------------------------------------------


def stream_openai_responses(model: Model | None, context: Context,
                            options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """The ``openai-responses`` stream function (a ``StreamFn``; never raises)."""
    label = provider_label(model.provider) if model is not None else "OpenAI"
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label=f"{label} Responses")


def _run(call: ProviderCall) -> Iterator[None]:
    model = call.model
    api_key = resolve_api_key(model.provider, call.options.api_key, call.options.env)
    headers: dict[str, str | None] = {}
    if api_key:
        call.add_secret(api_key)
        headers["Authorization"] = f"Bearer {api_key}"
    elif not is_local_url(model.base_url):
        raise ProviderError(missing_key_message(model.provider), provider=model.provider)
    headers.update(model.headers or {})
    session_id = call.options.session_id
    if session_id and cache_retention(call.options) != "none":
        fmt = compat_value(model.compat, "sessionAffinityFormat", "session_affinity_format",
                           None) or affinity_format(model.provider, model.base_url)
        headers.update(affinity_headers(session_id, fmt, completions=False))
    headers.update(call.options.headers or {})
    # folded before the transform, as pi does (a system message between a tool call and its
    # result must not make the call an orphan)
    messages = transform_messages(
        fold_system_messages(model, call.messages), model,
        call_id_normalizer(model.provider),
        foreign_thinking_as_text=False)  # pi-ai 1.6.1 drops another model's thinking
    limit = clamp_max_tokens(model, call.messages, call.options.max_tokens or model.max_tokens)
    body = build_responses_request(model, messages, call.options, max_tokens=limit)
    level = configuration_update_effort(model, call.options)
    if level is not None:  # the answer records the level its configuration_update gave
        call.out.message.provider_thinking_level = level
    url = model.base_url.rstrip("/") + "/responses"
    state = _StreamState(call.out, call.label)
    parse = call.event_parser()  # parse_event_json unless on_provider_stream_event is set
    with call.open_sse(call.request(url, body, headers)) as sse:
        for event in sse.events():
            data = parse(event, call.label)
            if isinstance(data, dict) and state.handle(data):
                break
            yield  # hand the queued events to the consumer
    state.finish()


class _StreamState:
    """Maps Responses events onto the builder, keyed by ``output_index``.

    Thread safety: used only by the worker thread.
    """

    def __init__(self, out: MessageBuilder, label: str) -> None:
        self.out = out
        self.label = label
        self.slots: dict[int, int] = {}  # output_index → content index
        self.terminal: dict[str, Any] | None = None
        self.parts: dict[int, tuple[str, Any]] = {}  # content index → (kind, part index) of
        # the last reasoning delta: a new part starts after a blank line, as the final
        # item joins its parts (never a trailing one)

    def handle(self, data: dict[str, Any]) -> bool:
        """Apply one event; True on the terminal one."""
        kind = data.get("type")
        out = self.out
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            item_type = item.get("type")
            if item_type == "reasoning":
                self.slots[data.get("output_index", -1)] = out.open_thinking()
            elif item_type == "message":
                self.slots[data.get("output_index", -1)] = out.open_text()
            elif item_type == "function_call":
                call = self.slots[data.get("output_index", -1)] = out.open_tool_call(
                    f"{item.get('call_id', '')}|{item.get('id', '')}", item.get("name", ""),
                    item.get("arguments") or "")
                if isinstance(item.get("namespace"), str) and not out.ended:
                    out.block(call).namespace = item["namespace"]
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            index = self._slot(data)
            if index is not None:
                part = (kind, data.get("summary_index", data.get("content_index", 0)))
                if self.parts.setdefault(index, part) != part:
                    self.parts[index] = part
                    out.add_thinking(index, "\n\n")
                out.add_thinking(index, data.get("delta") or "")
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            index = self._slot(data)
            if index is not None:
                out.add_text(index, data.get("delta") or "")
        elif kind == "response.function_call_arguments.delta":
            index = self._slot(data)
            if index is not None:
                out.add_tool_arguments(index, data.get("delta") or "")
        elif kind == "response.function_call_arguments.done":
            index = self._slot(data)
            full = data.get("arguments")
            if index is not None and isinstance(full, str):
                streamed = out.tool_arguments_json(index)
                if full.startswith(streamed):
                    if len(full) > len(streamed):
                        out.add_tool_arguments(index, full[len(streamed):])
                else:
                    out.replace_tool_arguments(index, full)
        elif kind == "response.output_item.done":
            self._item_done(data)
        elif kind in ("response.completed", "response.incomplete"):
            self.terminal = data.get("response") or {}
            return True
        elif kind == "response.created":
            response = data.get("response") or {}
            out.set_response(response_id=response.get("id"))
        elif kind == "response.failed":
            response = data.get("response") or {}
            out.set_response(response_id=response.get("id"),
                             raw_stop_reason=response.get("status"))
            error = response.get("error") or {}
            details = response.get("incomplete_details") or {}
            if error:
                text = f"{error.get('code', 'error')}: {error.get('message', '')}"
            else:
                text = f"incomplete: {details.get('reason', 'unknown')}"
            raise ProviderError(f"{self.label} error: {text}")
        elif kind == "error":  # {"type":"error","error":{"code","message"}}; older: flat
            nested = data.get("error")
            fields: dict[str, Any] = nested if isinstance(nested, dict) else data
            message = fields.get("message") or "unknown error"
            code = fields.get("code") or fields.get("type")
            text = f"Error Code {code}: {message}" if code else str(message)
            raise ProviderError(f"{self.label} error: {text}")
        return False

    def _slot(self, data: dict[str, Any]) -> int | None:
        return self.slots.get(data.get("output_index", -1))

    def _item_done(self, data: dict[str, Any]) -> None:
        index = self._slot(data)
        if index is None or not self.out.is_open(index):
            return
        item = data.get("item") or {}
        block = self.out.block(index)
        item_type = item.get("type")
        if item_type == "reasoning":
            summaries = [s.get("text", "") for s in item.get("summary") or ()]
            text = sanitize_surrogates("\n\n".join(summaries) or "\n\n".join(
                c.get("text", "") for c in item.get("content") or ()))
            if text:
                self._complete(index, block.thinking, text, self.out.add_thinking)
                block.thinking = text
            block.thinking_signature = json.dumps(item, separators=(",", ":"), ensure_ascii=False)
        elif item_type == "message":
            parts = item.get("content") or ()
            text = sanitize_surrogates("".join(p.get("text") or p.get("refusal") or ""
                                               for p in parts))
            if text:
                self._complete(index, block.text, text, self.out.add_text)
                block.text = text
            signature: dict[str, Any] = {"v": 1, "id": item.get("id")}
            if item.get("phase"):
                signature["phase"] = item["phase"]
            block.text_signature = json.dumps(signature, separators=(",", ":"),
                                              ensure_ascii=False)
        elif item_type == "function_call":
            if not self.out.tool_arguments_json(index):
                self.out.replace_tool_arguments(index, item.get("arguments") or "")
            if isinstance(item.get("namespace"), str):
                block.namespace = item["namespace"]
        self.out.close_block(index)

    def _complete(self, index: int, streamed: str, final: str,
                  add: Callable[[int, str], None]) -> None:
        """Stream what the final item has beyond the deltas (a server or proxy that drops
        deltas), so the deltas still add up to the block's final content."""
        if final != streamed and final.startswith(streamed):
            add(index, final[len(streamed):])

    def finish(self) -> None:
        response = self.terminal
        if response is None:
            msg = (f"The {self.label} stream ended before a terminal response event (the "
                   "connection closed early). Retry the request.")
            raise ProviderError(msg)
        if response.get("input_transformations"):
            _note_removed_reasoning(self.out, response["input_transformations"])
        usage = response.get("usage") or {}
        if usage:
            details = usage.get("input_tokens_details") or {}
            cached = int(details.get("cached_tokens") or 0)
            written = int(details.get("cache_write_tokens") or 0)
            self.out.set_usage(
                input=max(int(usage.get("input_tokens") or 0) - cached - written, 0),
                output=int(usage.get("output_tokens") or 0), cache_read=cached,
                cache_write=written, total_tokens=usage.get("total_tokens"),
                reasoning=int((usage.get("output_tokens_details") or {})
                              .get("reasoning_tokens") or 0))
            multiplier = _TIER_MULTIPLIER.get(response.get("service_tier") or "")
            if multiplier:
                cost = self.out.message.usage.cost
                cost.input *= multiplier
                cost.output *= multiplier
                cost.cache_read *= multiplier
                cost.cache_write *= multiplier
                cost.total *= multiplier
        raw = response.get("status")
        reason = (response.get("incomplete_details") or {}).get("reason")
        self.out.set_response(response_id=response.get("id"), raw_stop_reason=(
            f"{raw}.{reason}" if isinstance(reason, str) else raw))
        status = raw or "completed"
        stop: StopReason = "stop"
        if status == "incomplete":
            if reason != "max_output_tokens":
                raise ProviderError(f"Response incomplete: {reason}")
            stop = "length"
        elif status in ("failed", "cancelled"):
            raise ProviderError(f"{self.label} response {status}")
        if stop == "stop" and self.out.message.tool_calls:
            stop = "toolUse"
        self.out.close_open_blocks()
        self.out.finish(stop)


def _note_removed_reasoning(out: MessageBuilder, transformations: Any) -> None:
    """The replayed reasoning items OpenAI withheld from the model, with the reason of each
    (``prefix_mismatch`` after an edit of earlier input, another organisation or model), as
    a diagnostic ``openai_input_transformations`` (pi-ai 1.6). ``turn_boundary`` removals are
    left out: models that use only the current turn's reasoning report every earlier one."""
    if not isinstance(transformations, list):
        return
    removals = [{key: t.get(key) for key in ("type", "id", "action", "reason")}
                for t in transformations if isinstance(t, dict) and t.get("type") == "reasoning"
                and t.get("action") == "removed" and t.get("reason") != "turn_boundary"]
    if removals:
        out.add_diagnostic({"type": "openai_input_transformations", "timestamp": now_ms(),
                            "details": {"transformations": removals}})
