"""The Bedrock Converse request body (``bedrock-converse-stream``), as pi-ai 1.6.1 builds it.

``system`` blocks, ``messages`` (text, images as base64 ``bytes``, tool use, tool results
grouped in one user turn, reasoning with its signature), ``cachePoint`` blocks on the system
prompt and the last user turn of Claude models that cache, ``inferenceConfig`` and the
thinking fields in ``additionalModelRequestFields``. The ``modelId`` goes in the URL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ProviderError
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    sanitize_surrogates,
)
from ..models import Model
from ..stream import StreamOptions
from ..transcript import get_current_tools
from ._budget import clamp_max_tokens
from ._compat import fold_system_messages
from ._keys import env_value
from ._strict import prefers_strict, strict_sampling
from ._transform import leading_system_text, transform_messages

__all__ = ["build_bedrock_request", "is_claude"]

EMPTY = "<empty>"
_INVALID_ID = re.compile(r"[^a-zA-Z0-9_-]")
_SEPARATORS = re.compile(r"[\s_.:]+")
_IMAGE_FORMATS = {"image/jpeg": "jpeg", "image/jpg": "jpeg", "image/png": "png",
                  "image/gif": "gif", "image/webp": "webp"}
_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
_MIN_ANSWER = 1024
_ADAPTIVE = ("opus-4-6", "opus-4-7", "opus-4-8", "opus-5", "sonnet-4-6", "sonnet-5", "haiku-5",
             "fable-5")
_NEWEST = ("opus-4-7", "opus-4-8", "opus-5", "sonnet-5", "haiku-5", "fable-5")  # xhigh, binding
_GPT_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high",
               "xhigh": "xhigh", "max": "max"}
_OSS_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high",
               "xhigh": "high", "max": "high"}
_ERROR_IMAGE = "(image attached after the tool results)"
_BINDING_BETA = "thinking-binding-controls-2026-08-01"


def _candidates(model: Model) -> list[str]:
    out = []
    for value in (model.id, model.name) if model.name else (model.id,):
        lower = value.lower()
        out += [lower, _SEPARATORS.sub("-", lower)]
    return out


def _any(model: Model, needles: Sequence[str]) -> bool:
    return any(n in c for c in _candidates(model) for n in needles)


def is_claude(model: Model) -> bool:
    """An Anthropic Claude model on Bedrock (by its id, or its name for inference profiles)."""
    model_id, name = model.id.lower(), (model.name or "").lower()
    return ("anthropic.claude" in model_id or "anthropic/claude" in model_id
            or "anthropic.claude" in name or "anthropic/claude" in name or "claude" in name)


def _caches(model: Model, env: Mapping[str, str] | None) -> bool:
    if not _any(model, ("claude",)):
        return env_value("AWS_BEDROCK_FORCE_CACHE", env) == "1"
    return _any(model, ("fable-5", "opus-5", "sonnet-5", "haiku-5", "-4-",
                        "claude-3-7-sonnet", "claude-3-5-haiku"))


def _cache_point(retention: str) -> dict[str, Any]:
    point: dict[str, Any] = {"type": "default"}
    if retention == "long":
        point["ttl"] = "1h"
    return {"cachePoint": point}


def build_bedrock_request(model: Model, messages: Sequence[AgentMessage],
                          options: StreamOptions, *,
                          relax_strict: bool = False) -> tuple[dict[str, Any], bool]:
    """The JSON body of ``/model/{modelId}/converse-stream`` for a context's messages, and
    whether it holds tools sent strict that only prefer it (``relax_strict``: send those
    plain, after Bedrock refused their number)."""
    level = options.reasoning if options.reasoning not in (None, "off") else None
    limit = clamp_max_tokens(model, messages, options.max_tokens or model.max_tokens)
    budget = None
    if level is not None and is_claude(model) and not _any(model, _ADAPTIVE):
        # pi's adjustMaxTokensForThinking, then the total clamped to the context again
        top = "high" if level in ("xhigh", "max") else level
        budget = {**_BUDGETS, **(options.thinking_budgets or {})}.get(top, _BUDGETS["high"])
        limit = min(limit + budget, model.max_tokens)
        if limit <= budget:
            budget = min(budget, max(0, limit - _MIN_ANSWER))
        limit = clamp_max_tokens(model, messages, limit)
        budget = min(budget, max(0, limit - _MIN_ANSWER))
    retention = options.cache_retention or (
        "long" if env_value("PI_CACHE_RETENTION", options.env) == "long" else "short")
    caching = retention != "none" and _caches(model, options.env)
    folded = transform_messages(fold_system_messages(model, messages, supported=False), model,
                                lambda i: _INVALID_ID.sub("_", i)[:64])
    prompt, leading = leading_system_text(folded)
    body: dict[str, Any] = {"messages": _messages(model, folded[leading:], caching, retention)}
    if prompt:
        system: list[dict[str, Any]] = [{"text": sanitize_surrogates(prompt)}]
        if caching:
            system.append(_cache_point(retention))
        body["system"] = system
    config: dict[str, Any] = {"maxTokens": limit}
    if options.temperature is not None:
        config["temperature"] = options.temperature
    body["inferenceConfig"] = config
    tools = get_current_tools(folded)
    preferred = False
    if tools:
        supported = bool((model.compat or {}).get("supportsStrictMode", False))
        specs = []
        for tool in tools:
            relaxed = relax_strict and prefers_strict(tool)
            strict = None if relaxed else strict_sampling(tool, supported)
            spec: dict[str, Any] = {"name": tool.name, "description": tool.description,
                                    "inputSchema": {"json": strict or tool.parameters}}
            if strict is not None:
                spec["strict"] = True
                preferred = preferred or prefers_strict(tool)
            specs.append({"toolSpec": spec})
        body["toolConfig"] = {"tools": specs}
    if level is not None and model.reasoning:
        fields = _reasoning_fields(model, level, budget, options)
        if fields is not None:
            body["additionalModelRequestFields"] = fields
    return body, preferred


def _reasoning_fields(model: Model, level: str, budget: int | None,
                      options: StreamOptions) -> dict[str, Any] | None:
    if is_claude(model):
        region = env_value("AWS_REGION", options.env) or env_value("AWS_DEFAULT_REGION",
                                                                   options.env) or ""
        gov = region.lower().startswith("us-gov-") or model.id.lower().startswith(
            ("us-gov.", "arn:aws-us-gov:"))
        binding = not gov and _any(model, _NEWEST)
        thinking: dict[str, Any]
        if budget is None:  # adaptive thinking: an effort
            mapped = (model.thinking_level_map or {}).get(level)
            effort = ("xhigh" if level == "xhigh" and _any(model, _NEWEST) else
                      mapped if isinstance(mapped, str) else
                      {"minimal": "low", "low": "low", "medium": "medium"}.get(level, "high"))
            thinking = {"type": "adaptive"}
            if not gov:
                thinking["display"] = "summarized"
            if binding:
                thinking["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
            out: dict[str, Any] = {"thinking": thinking, "output_config": {"effort": effort}}
            if binding:
                out["anthropic_beta"] = [_BINDING_BETA]
            return out
        thinking = {"type": "enabled", "budget_tokens": budget}
        if not gov:
            thinking["display"] = "summarized"
        return {"thinking": thinking, "anthropic_beta": ["interleaved-thinking-2025-05-14"]}
    if _any(model, ("gpt-oss",)):
        return {"reasoning_effort": _OSS_EFFORT[level]}
    if _any(model, ("gpt-",)):
        mapped = (model.thinking_level_map or {}).get(level)
        return {"reasoning": {"effort": mapped if isinstance(mapped, str) else _GPT_EFFORT[level]}}
    return None


def _text(text: str) -> dict[str, Any] | None:
    clean = sanitize_surrogates(text)
    return {"text": clean} if clean.strip() else None


def _image(block: ImageContent) -> dict[str, Any]:
    fmt = _IMAGE_FORMATS.get(block.mime_type)
    if fmt is None:
        raise ProviderError(f"Bedrock takes images as {', '.join(sorted(_IMAGE_FORMATS))}; "
                            f"this one is {block.mime_type!r}.", provider="amazon-bedrock")
    return {"image": {"source": {"bytes": block.data}, "format": fmt}}


def _messages(model: Model, messages: Sequence[AgentMessage], caching: bool,
              retention: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    claude = is_claude(model)
    for message in messages:
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                content = [_text(message.content) or {"text": EMPTY}]
            else:
                content = [b for b in (_text(c.text) if isinstance(c, TextContent) else
                                       _image(c) if isinstance(c, ImageContent) else None
                                       for c in message.content) if b is not None]
                content = content or [{"text": EMPTY}]
            out.append({"role": "user", "content": content})
        elif isinstance(message, AssistantMessage):
            blocks = _assistant(message, claude)
            if blocks:
                out.append({"role": "assistant", "content": blocks})
        elif isinstance(message, ToolResultMessage):
            last = out[-1] if out else None
            if last is None or last.get("_results") is not True:
                last = {"role": "user", "content": [], "_results": True, "_images": []}
                out.append(last)
            last["content"].append(_tool_result(message, claude, last["_images"]))
    for turn in out:
        if turn.pop("_results", None):
            turn["content"] += turn.pop("_images")
    if caching and out and out[-1]["role"] == "user":
        out[-1]["content"].append(_cache_point(retention))
    return out


def _tool_result(message: ToolResultMessage, claude: bool,
                 images: list[dict[str, Any]]) -> dict[str, Any]:
    content: list[Any] = list(message.content)
    if claude and message.is_error and any(isinstance(b, ImageContent) for b in content):
        # Claude takes only text in an error result: its images follow all the results
        images.append({"text": f"Images from the error result of tool call "
                               f"{message.tool_call_id} ({message.tool_name}):"})
        images += [_image(b) for b in content if isinstance(b, ImageContent)]
        kept: list[Any] = []
        for block in content:
            if isinstance(block, ImageContent):
                if not (kept and isinstance(kept[-1], TextContent)
                        and kept[-1].text == _ERROR_IMAGE):
                    kept.append(TextContent(_ERROR_IMAGE))
            else:
                kept.append(block)
        content = kept
    blocks = [b for b in (_image(c) if isinstance(c, ImageContent) else
                          _text(c.text) if isinstance(c, TextContent) else None
                          for c in content) if b is not None]
    return {"toolResult": {"toolUseId": message.tool_call_id,
                           "content": blocks or [{"text": EMPTY}],
                           "status": "error" if message.is_error else "success"}}


def _assistant(message: AssistantMessage, claude: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            text = _text(block.text)
            if text is not None:
                blocks.append(text)
        elif isinstance(block, ToolCall):
            blocks.append({"toolUse": {"toolUseId": block.id, "name": block.name,
                                       "input": _document(block.arguments)}})
        elif isinstance(block, ThinkingContent):
            if block.redacted:
                if block.thinking_signature:
                    blocks.append({"reasoningContent": {
                        "redactedContent": block.thinking_signature}})
                continue
            thinking = sanitize_surrogates(block.thinking)
            if not thinking.strip():
                continue
            signature = block.thinking_signature or ""
            if not claude:
                blocks.append({"reasoningContent": {"reasoningText": {"text": thinking}}})
            elif not signature.strip():
                blocks.append({"text": thinking})
            else:
                blocks.append({"reasoningContent": {"reasoningText": {
                    "text": thinking, "signature": signature}}})
    return blocks


def _document(value: Any) -> Any:
    """Arguments as a Bedrock document: keys that are empty strings dropped."""
    if isinstance(value, list):
        return [_document(v) for v in value]
    if isinstance(value, dict):
        return {k: _document(v) for k, v in value.items() if k != ""}
    return value
