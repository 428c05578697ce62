"""The OpenAI APIs' prompt caching by session: the cache key, its retention and the session
affinity headers (pi-ai 1.6.1's ``promptCacheKeyMode``, ``sessionAffinityFormat``).

``cache_retention(options)``: "none", "short" or "long" (``StreamOptions.cache_retention``,
else ``PI_CACHE_RETENTION``, else "short"). ``cache_key(session_id)``: the session id
cut to the 64 characters OpenAI accepts in ``prompt_cache_key``. ``affinity_headers``: the
headers that route a session's requests to one cache (OpenRouter's ``x-session-id``, or
OpenAI's ``session-id`` / ``session_id`` and ``x-client-request-id``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import Model
from ..stream import StreamOptions
from ._keys import env_value

__all__ = ["CACHE_KEY_MAX_CHARS", "affinity_format", "affinity_headers",
           "anthropic_affinity_header", "cache_key", "cache_retention", "compat_value"]

CACHE_KEY_MAX_CHARS = 64
"""OpenAI refuses a longer ``prompt_cache_key`` (400); pi-ai keeps the first 64 characters."""


def cache_retention(options: StreamOptions) -> str:
    """``options.cache_retention``, else ``PI_CACHE_RETENTION`` (from ``options.env`` or the
    environment) when it is "long" or "none" (pi-ai reads only "long"; piagent's Anthropic
    adapter always took "none" too), else "short"."""
    if options.cache_retention:
        return options.cache_retention
    value = env_value("PI_CACHE_RETENTION", options.env)
    return value if value in ("long", "none") else "short"


def cache_key(session_id: str) -> str:
    """``session_id`` as a ``prompt_cache_key``: its first 64 characters (code points)."""
    return session_id if len(session_id) <= CACHE_KEY_MAX_CHARS \
        else session_id[:CACHE_KEY_MAX_CHARS]


def affinity_format(provider: str, base_url: str) -> str:
    """The session affinity headers a server reads: "openrouter" or "openai"."""
    return "openrouter" if provider == "openrouter" or "openrouter.ai" in base_url else "openai"


def affinity_headers(session_id: str, fmt: str, *, completions: bool) -> dict[str, str | None]:
    """The headers that keep ``session_id``'s requests on one prompt cache. ``fmt``
    "openrouter": ``x-session-id``; "openai": ``session-id`` (Responses; Chat Completions
    keeps pi's ``session_id``) and ``x-client-request-id`` (and on Chat Completions
    ``x-session-affinity``); any other value: only ``x-client-request-id``."""
    if fmt == "openrouter":
        return {"x-session-id": session_id}
    headers: dict[str, str | None] = {}
    if fmt == "openai":
        headers["session_id" if completions else "session-id"] = session_id
    headers["x-client-request-id"] = session_id
    if completions:
        headers["x-session-affinity"] = session_id
    return headers


def anthropic_affinity_header(model: Model, options: StreamOptions) -> dict[str, str]:
    """Anthropic Messages: the session id in OpenRouter's ``x-session-id`` (or, where the
    compat's ``sendSessionAffinityHeaders`` asks for it elsewhere, ``x-session-affinity``),
    while the cache is on (pi-ai 1.6.1)."""
    session_id = options.session_id
    openrouter = affinity_format(model.provider, model.base_url) == "openrouter"
    compat = model.compat
    if not session_id or cache_retention(options) == "none" or not compat_value(
            compat, "sendSessionAffinityHeaders", "send_session_affinity_headers", openrouter):
        return {}
    fmt = compat_value(compat, "sessionAffinityFormat", "session_affinity_format",
                       "openrouter" if openrouter else None)
    return {"x-session-id" if fmt == "openrouter" else "x-session-affinity": session_id}


def compat_value(compat: Mapping[str, Any] | None, camel: str, snake: str,
                 default: Any) -> Any:
    """``compat[camel]`` (pi's key) or ``compat[snake]``, else ``default``."""
    if not compat:
        return default
    return compat.get(camel, compat.get(snake, default))
