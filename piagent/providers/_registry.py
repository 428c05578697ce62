"""The API registry: ``stream_simple`` dispatches on ``model.api`` to a stream function.

Thread safety: every function may be called from any thread.
"""


from __future__ import annotations

import importlib
import threading

from ..messages import AssistantMessage
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, ErrorEvent, StreamFn, StreamOptions
from .openai_completions import stream_openai_completions
from .openai_responses import stream_openai_responses

__all__ = ["get_api", "register_api", "stream_simple"]

# guards _registry: register_api may race with the lazy imports in get_api
_registry_lock = threading.Lock()
_registry: dict[str, StreamFn] = {
    "openai-completions": stream_openai_completions,
    "openai-responses": stream_openai_responses,
}
_LAZY = {
    "anthropic-messages": ("piagent.providers.anthropic", "stream_anthropic"),
    "google-generative-ai": ("piagent.providers.google", "stream_google"),
    "google-vertex": ("piagent.providers.vertex", "stream_vertex"),
    "bedrock-converse-stream": ("piagent.providers.bedrock", "stream_bedrock"),
    "azure-openai-responses": ("piagent.providers.azure_openai",
                               "stream_azure_openai_responses"),
    "mistral-conversations": ("piagent.providers.mistral", "stream_mistral"),
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
