"""Per-server differences of the OpenAI-compatible APIs: ``OpenAICompat`` and its detection.

Detected from the provider and base URL (docs/providers.md, "Compat flags") and overridable with
``Model.compat`` (pi's camelCase keys or snake_case).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import islice
from typing import Any

from ..messages import AgentMessage, SystemMessage
from ..models import Model
from ..transcript import collapse_system_messages
from ._catalogue import is_catalogued
from ._keys import is_local_url

__all__ = ["OpenAICompat", "fold_system_messages", "get_compat",
           "supports_mid_convo_system_messages"]


@dataclass(frozen=True)
class OpenAICompat:
    """How one OpenAI-compatible server differs from api.openai.com (pi's ``compat``)."""

    supports_store: bool = True
    supports_developer_role: bool = True
    supports_reasoning_effort: bool = True
    reasoning_effort_map: Mapping[str, str] = field(default_factory=dict)
    supports_usage_in_streaming: bool = True
    max_tokens_field: str = "max_completion_tokens"
    requires_tool_result_name: bool = False
    requires_assistant_after_tool_result: bool = False
    requires_non_null_assistant_content: bool = False
    """Send ``"content": ""`` instead of ``null`` for an assistant message with tool calls and
    no text (pi-ai 1.6's ``requiresNonNullAssistantContent``, for servers that reject null)."""
    requires_thinking_as_text: bool = False
    requires_tools_with_tool_history: bool = False
    """Send ``"tools": []`` when the request has no tools but its history has tool calls or
    results (older LiteLLM proxies in front of Anthropic). Off by default, as in pi-ai 1.5.2+:
    vLLM 0.20+ answers 400 to an empty tool list."""
    thinking_format: str = "openai"
    """openai | openrouter | zai | deepseek | qwen | qwen-chat-template | together | ant-ling |
    baseten"""
    supports_strict_mode: bool = True
    supports_finish_reason: bool = True
    requires_reasoning_content_on_assistant_messages: bool = False
    supports_mid_convo_system_messages: bool = False
    """pi-ai 1.4.0's default: later system messages fold into the leading prompt."""
    zai_tool_stream: bool = False
    """Send ``"tool_stream": true`` with tools (z.ai streams tool-call arguments only then)."""
    chat_template_args: Mapping[str, Any] = field(default_factory=dict)
    """Baseten's ``chat_template_args`` (thinking format ``baseten``): literal values, or
    ``{"$var": "thinking.enabled"}`` for whether thinking is on."""
    prompt_cache_key_mode: str = "auto"
    """When ``prompt_cache_key`` (the session id) is sent: "auto" (to api.openai.com, or with
    long retention where ``supports_long_cache_retention``), "enabled" (always, with a session
    id), "disabled" (never); pi-ai 1.6's ``promptCacheKeyMode``."""
    supports_long_cache_retention: bool = True
    """Long retention sends ``prompt_cache_retention: "24h"`` (off for Together, Cloudflare,
    NVIDIA)."""
    send_session_affinity_headers: bool = False
    """Send the session id in the session affinity headers (on for OpenRouter)."""
    session_affinity_format: str = "openai"
    """Which headers: "openrouter" (``x-session-id``) or "openai" (``session_id``,
    ``x-client-request-id``, ``x-session-affinity``)."""


_NON_STANDARD = {"cerebras", "xai", "chutes", "deepseek", "zai", "opencode", "moonshot",
                 "together", "nvidia", "cloudflare", "groq", "mistral", "fireworks"}
_KNOWN_CLOUD = _NON_STANDARD | {"openrouter", "azure-openai"}
_LOCAL_PROVIDERS = {"ollama", "vllm", "llamacpp", "llama.cpp", "lmstudio", "sglang", "local"}
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _detect(model: Model) -> OpenAICompat:
    provider, url = model.provider, model.base_url
    if provider == "openai":
        return OpenAICompat()  # wherever it points (a proxy, a test server): the reference
    if provider in _LOCAL_PROVIDERS or (is_local_url(url) and provider not in _KNOWN_CLOUD
                                        and not is_catalogued(provider)):
        return OpenAICompat(supports_store=False, supports_developer_role=False,
                            supports_reasoning_effort=False, supports_strict_mode=False)
    if is_catalogued(provider):
        return _detect_catalogued(provider, url)
    compat = OpenAICompat()
    if provider in _NON_STANDARD or "api.openai.com" not in url:
        compat = replace(compat, supports_store=False, supports_developer_role=False)
    if provider == "openrouter" or "openrouter.ai" in url:
        compat = replace(compat, thinking_format="openrouter",
                         send_session_affinity_headers=True,
                         session_affinity_format="openrouter")
    elif provider == "deepseek" or "deepseek.com" in url:
        compat = replace(compat, max_tokens_field="max_tokens", thinking_format="deepseek",
                         requires_reasoning_content_on_assistant_messages=True)
    elif provider == "zai" or "z.ai" in url:
        compat = replace(compat, max_tokens_field="max_tokens", thinking_format="zai")
    elif provider in ("mistral", "chutes", "moonshot", "together", "nvidia"):
        compat = replace(compat, max_tokens_field="max_tokens",
                         supports_long_cache_retention=provider not in ("together", "nvidia"))
        if provider == "mistral":
            compat = replace(compat, requires_tool_result_name=True,
                             requires_thinking_as_text=True)
    elif provider == "groq" and model.id == "qwen/qwen3-32b":
        levels = ("minimal", "low", "medium", "high", "xhigh", "max")
        compat = replace(compat, reasoning_effort_map=dict.fromkeys(levels, "default"))
    elif provider == "xai" or provider == "cerebras":
        compat = replace(compat, supports_reasoning_effort=False)
    if provider.startswith("cloudflare") or "together.xyz" in url or "nvidia.com" in url \
            or "cloudflare.com" in url:
        compat = replace(compat, supports_long_cache_retention=False)
    return compat


def _detect_catalogued(provider: str, url: str) -> OpenAICompat:
    """pi-ai 1.6.1's ``detectCompat``, for a provider its catalogue lists (whose models
    carry pi-ai's own compat on top): by provider, or by the host in the base URL."""
    zai = provider in ("zai", "zai-coding-cn") or "api.z.ai" in url or "open.bigmodel.cn" in url
    together = provider == "together" or "api.together.ai" in url or "api.together.xyz" in url
    moonshot = provider in ("moonshotai", "moonshotai-cn") or "api.moonshot." in url
    gateway = provider == "cloudflare-ai-gateway" or "gateway.ai.cloudflare.com" in url
    nvidia = provider == "nvidia" or "integrate.api.nvidia.com" in url
    ant_ling = provider == "ant-ling" or "api.ant-ling.com" in url
    deepseek = provider == "deepseek" or "deepseek.com" in url.lower()
    grok = provider == "xai" or "api.x.ai" in url
    chutes = "chutes.ai" in url
    openrouter = provider == "openrouter" or "openrouter.ai" in url
    non_standard = (nvidia or provider == "cerebras" or "cerebras.ai" in url or grok or together
                    or chutes or deepseek or zai or moonshot or provider == "opencode"
                    or "opencode.ai" in url or provider == "cloudflare-workers-ai"
                    or "api.cloudflare.com" in url or gateway or ant_ling)
    max_tokens = chutes or deepseek or moonshot or gateway or together or nvidia or ant_ling or zai
    thinking = ("deepseek" if deepseek else "zai" if zai else "together" if together
                else "ant-ling" if ant_ling
                else "openrouter" if openrouter
                else "openai")
    return OpenAICompat(
        supports_store=not non_standard,
        supports_developer_role=provider == "openai" or "api.openai.com" in url,
        supports_reasoning_effort=not (grok or zai or moonshot or together or gateway or nvidia
                                       or ant_ling),
        max_tokens_field="max_tokens" if max_tokens else "max_completion_tokens",
        requires_reasoning_content_on_assistant_messages=deepseek,
        thinking_format=thinking, supports_strict_mode=False,
        send_session_affinity_headers=openrouter,
        session_affinity_format="openrouter" if openrouter else "openai",
        supports_long_cache_retention=not (together or provider == "cloudflare-workers-ai"
                                           or "api.cloudflare.com" in url or gateway
                                           or nvidia or ant_ling))


_CACHE_SIZE = 256  # distinct model settings remembered (cleared when full)
_cache_lock = threading.Lock()  # guards _cache (read and filled by every adapter thread)
_cache: dict[Hashable, OpenAICompat] = {}


def get_compat(model: Model) -> OpenAICompat:
    """The detected flags with ``model.compat`` applied on top.

    Cached per (provider, base URL, model id, ``model.compat`` items): every request asks,
    and the same object comes back while those stay the same (a ``compat`` whose values
    cannot be hashed is detected afresh each time). The result is shared: do not mutate it.
    """
    try:
        key: Hashable = (model.provider, model.base_url, model.id,
                         tuple(model.compat.items()) if model.compat else None)
        hash(key)
    except TypeError:  # e.g. a dict value in model.compat: no cache
        return _compute(model)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    compat = _compute(model)
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            _cache.clear()
        return _cache.setdefault(key, compat)


def _compute(model: Model) -> OpenAICompat:
    compat = _detect(model)
    if not model.compat:
        return compat
    names = {f.name for f in fields(OpenAICompat)}
    overrides: dict[str, Any] = {}
    for key, value in model.compat.items():
        name = _CAMEL.sub("_", key).lower()
        if name in names:
            overrides[name] = value
    return replace(compat, **overrides)


def supports_mid_convo_system_messages(model: Model) -> bool:
    """``model.compat``'s ``supportsMidConvoSystemMessages`` (or the snake_case key); off by
    default, as in pi-ai 1.4.0 (its catalogue turns it on for no model)."""
    compat = model.compat or {}
    value = compat.get("supportsMidConvoSystemMessages",
                       compat.get("supports_mid_convo_system_messages", False))
    return bool(value)


def fold_system_messages(model: Model, messages: Sequence[AgentMessage],
                         supported: bool | None = None) -> Sequence[AgentMessage]:
    """``messages`` as they go to the model: unchanged when the model takes system messages
    mid-conversation (``supported``, else ``supports_mid_convo_system_messages``), else
    every system message replayed into one leading message (pi's ``resolveTranscript``)."""
    if supported is None:
        supported = supports_mid_convo_system_messages(model)
    # in C: is any message after the first a system message?
    if supported or next(filter(SystemMessage.__instancecheck__, islice(messages, 1, None)),
                         None) is None:
        return messages
    return collapse_system_messages(messages)
