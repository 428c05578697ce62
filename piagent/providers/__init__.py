"""Streaming provider clients: ``stream_simple``, the API registry and the model catalogue.

``stream_simple(model, context, options)`` dispatches on ``model.api`` to the registered
stream function: ``openai-completions`` (OpenAI and every compatible server: Ollama,
vLLM, llama.cpp, OpenRouter, Groq, …), ``openai-responses``, ``anthropic-messages``,
``google-generative-ai``, ``google-vertex``, ``bedrock-converse-stream``,
``azure-openai-responses`` and ``mistral-conversations`` (the last six imported on first
use). ``register_api`` adds one.
``get_model`` / ``get_models`` read the bundled catalogue (``models.json``, generated from
pi-ai's model data: ``catalogue_source()``; ``unsupported_models()`` lists the models pi-ai
serves on APIs piagent does not speak);
``resolve_model("openai/gpt-4o-mini")`` takes the ``PROVIDER/MODEL`` spelling.
``is_context_overflow`` and ``is_retryable_error`` classify a failed call by its error text, and
``is_recoverable_length`` a ``"length"`` stop below the wanted limit, as pi-ai does. See ``docs/providers.md``.

Thread safety: every function may be called from any thread.
"""

from __future__ import annotations

from ..models import Model, ModelCost
from ._catalogue import (
    catalogue_source,
    get_model,
    get_models,
    get_providers,
    resolve_model,
    unsupported_models,
)
from ._classify import is_context_overflow, is_recoverable_length, is_retryable_error
from ._registry import get_api, register_api, stream_simple

__all__ = [
    "Model",
    "ModelCost",
    "catalogue_source",
    "get_api",
    "get_model",
    "get_models",
    "get_providers",
    "is_context_overflow",
    "is_recoverable_length",
    "is_retryable_error",
    "register_api",
    "resolve_model",
    "stream_simple",
    "unsupported_models",
]
