"""Streaming provider clients: ``stream_simple``, the API registry and the model catalogue.

``stream_simple(model, context, options)`` dispatches on ``model.api`` to the registered
stream function: ``openai-completions`` (OpenAI and every compatible server: Ollama,
vLLM, llama.cpp, OpenRouter, Groq, …), ``openai-responses``, ``anthropic-messages`` and
``google-generative-ai`` (the last two imported on first use). ``register_api`` adds one.
``get_model`` / ``get_models`` read the bundled catalogue (``models.json``). See
``docs/providers.md``.

Thread safety: every function may be called from any thread.
"""

from __future__ import annotations

import importlib
import json
import threading
from functools import lru_cache
from importlib import resources
from typing import Any

from ..messages import AssistantMessage
from ..models import Model, ModelCost
from ..stream import AssistantMessageEventStream, Context, ErrorEvent, StreamFn, StreamOptions
from .openai_completions import stream_openai_completions
from .openai_responses import stream_openai_responses

__all__ = [
    "Model",
    "ModelCost",
    "get_api",
    "get_model",
    "get_models",
    "get_providers",
    "register_api",
    "stream_simple",
]

# guards _registry: register_api may race with the lazy imports in get_api
_registry_lock = threading.Lock()
_registry: dict[str, StreamFn] = {
    "openai-completions": stream_openai_completions,
    "openai-responses": stream_openai_responses,
}
_LAZY = {
    "anthropic-messages": ("piagent.providers.anthropic", "stream_anthropic"),
    "google-generative-ai": ("piagent.providers.google", "stream_google"),
}


def register_api(api: str, stream_fn: StreamFn) -> None:
    """Make ``stream_simple`` send models whose ``api`` is ``api`` to ``stream_fn``."""
    with _registry_lock:
        _registry[api] = stream_fn


def get_api(api: str) -> StreamFn | None:
    """The stream function registered for ``api`` (importing a bundled one on first use)."""
    with _registry_lock:
        fn = _registry.get(api)
    if fn is not None or api not in _LAZY:
        return fn
    module_name, attr = _LAZY[api]
    fn = getattr(importlib.import_module(module_name), attr)
    with _registry_lock:
        return _registry.setdefault(api, fn)


def stream_simple(model: Model | None, context: Context,
                  options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """Stream one assistant response from ``model`` (a ``StreamFn``; never raises).

    A missing model, an unknown ``model.api`` and every request failure end the stream
    with an ``ErrorEvent`` whose message says what to do.
    """
    if model is None:
        return _error_stream("", "No model was given. Pass a model, e.g. "
                             "Agent(model=get_model('openai', 'gpt-4o-mini')), or "
                             "stream_simple(model, context, options).")
    try:
        fn = get_api(model.api)
    except ImportError as exc:
        return _error_stream(model.api, f"The {model.api!r} provider could not be loaded: "
                             f"{exc}.", model)
    if fn is None:
        known = ", ".join(sorted({*_registry, *_LAZY}))
        return _error_stream(model.api, f"No stream function is registered for api "
                             f"{model.api!r}. Use one of {known}, or call "
                             "register_api(api, stream_fn).", model)
    return fn(model, context, options if options is not None else StreamOptions())


def _error_stream(api: str, text: str, model: Model | None = None) -> AssistantMessageEventStream:
    stream = AssistantMessageEventStream()
    message = AssistantMessage(api=api, provider=model.provider if model else "",
                               model=model.id if model else "", stop_reason="error",
                               error_message=text)
    stream.push(ErrorEvent("error", message))
    stream.end()
    return stream


# --- the catalogue ---------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, dict[str, Any]]:
    text = resources.files(__package__).joinpath("models.json").read_text(encoding="utf-8")
    data: dict[str, dict[str, Any]] = json.loads(text)["providers"]
    return data


def _to_model(provider: str, model_id: str, entry: dict[str, Any]) -> Model:
    cost = entry.get("cost") or {}
    return Model(
        id=model_id, api=entry["api"], provider=provider, base_url=entry["baseUrl"],
        name=entry.get("name"), reasoning=bool(entry.get("reasoning", False)),
        input=tuple(entry.get("input") or ("text",)),
        cost=ModelCost(input=float(cost.get("input", 0)), output=float(cost.get("output", 0)),
                       cache_read=float(cost.get("cacheRead", 0)),
                       cache_write=float(cost.get("cacheWrite", 0))),
        context_window=int(entry.get("contextWindow", 128_000)),
        max_tokens=int(entry.get("maxTokens", 16_384)),
        headers=entry.get("headers"), compat=entry.get("compat"),
    )


def get_providers() -> list[str]:
    """The providers in the bundled catalogue."""
    return sorted(_catalogue())


def get_models(provider: str) -> list[Model]:
    """Every catalogued model of ``provider`` (fresh objects; ``[]`` when unknown)."""
    entries = _catalogue().get(provider, {})
    return [_to_model(provider, model_id, entry) for model_id, entry in entries.items()]


def get_model(provider: str, model_id: str) -> Model:
    """The catalogued model (a fresh object each call).

    Raises:
        LookupError: unknown provider or model; the message lists what exists. Any other
            model is one line: ``Model(id=..., api=..., provider=..., base_url=...)``.
    """
    entries = _catalogue().get(provider)
    if entries is None:
        msg = (f"Unknown provider {provider!r}. Known providers: {', '.join(get_providers())}. "
               "For any other server build Model(id=..., api=..., provider=..., base_url=...).")
        raise LookupError(msg)
    entry = entries.get(model_id)
    if entry is None:
        msg = (f"Unknown model {model_id!r} for provider {provider!r}. Known: "
               f"{', '.join(entries)}. For another model build "
               f"Model(id={model_id!r}, api=..., provider={provider!r}, base_url=...).")
        raise LookupError(msg)
    return _to_model(provider, model_id, entry)
