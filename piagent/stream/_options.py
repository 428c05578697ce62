"""The stream-function contract: ``Context``, ``StreamOptions``, ``StreamFn`` and the
process-wide default stream function.

A stream function never raises for request, model or runtime failures: it ends its stream
with an ``ErrorEvent`` whose message has ``stop_reason`` "error" or "aborted".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ..errors import StreamFnError
from ..messages import Message, ThinkingLevel
from ._events import AssistantMessageEventStream

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..models import Model

__all__ = [
    "Context",
    "StreamFn",
    "StreamOptions",
    "get_default_stream_fn",
    "reset_default_stream_fn",
    "set_default_stream_fn",
]


@dataclass
class Context:
    """The normalised transcript sent to a model.

    ``messages`` are what ``convert_to_llm`` made of the transcript: system, user, assistant
    and tool-result messages. The system prompt and the tool declarations travel only as
    system messages inside them.
    """

    messages: list[Message] = field(default_factory=list)


@dataclass(kw_only=True)
class StreamOptions:
    """Options a stream function receives (pi's serialisable options plus the signal)."""

    api_key: str | None = None
    signal: AbortSignal | None = None
    reasoning: ThinkingLevel | None = None
    """The thinking level ("minimal" … "max"); ``None`` (or "off") for none."""
    session_id: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    headers: Mapping[str, str] | None = None
    max_retries: int | None = None
    """Retries of a failed request before its response starts; ``None``: the adapter's
    default (2 for the built-in providers)."""
    max_retry_delay_ms: int | None = None
    """The longest server-requested retry delay to honour; longer ones fail at once."""
    cache_retention: str | None = None
    metadata: Mapping[str, Any] | None = None
    thinking_budgets: Mapping[str, int] | None = None
    transport: str | None = None
    sampling_params: Mapping[str, Any] | None = None


StreamFn: TypeAlias = Callable[["Model | None", Context, StreamOptions], AssistantMessageEventStream]

# The one piece of process-wide mutable state: the fallback stream function. The built-in
# fallback is installed by the top-level package (``piagent.providers.stream_simple``,
# loaded on first use), because this layer may not import the providers above it.
_builtin_loader: Callable[[], StreamFn] | None = None
_UNSET: Any = object()
_default_stream_fn: StreamFn | None = _UNSET


def set_default_stream_fn(stream_fn: StreamFn | None) -> None:
    """Set the fallback used when no stream function is given; ``None`` removes it."""
    global _default_stream_fn
    if stream_fn is not None and not callable(stream_fn):
        msg = (f"set_default_stream_fn() takes a stream function or None, got "
               f"{type(stream_fn).__name__}.")
        raise TypeError(msg)
    _default_stream_fn = stream_fn


def reset_default_stream_fn() -> None:
    """Back to the built-in fallback, ``piagent.providers.stream_simple``."""
    global _default_stream_fn
    _default_stream_fn = _UNSET


def get_default_stream_fn() -> StreamFn:
    """The fallback stream function: ``piagent.providers.stream_simple`` unless changed."""
    fn = _default_stream_fn
    if fn is _UNSET and _builtin_loader is not None:
        return _builtin_loader()
    if fn is None or fn is _UNSET:
        msg = ("No default stream function configured. Pass stream_fn explicitly or call "
               "set_default_stream_fn().")
        raise StreamFnError(msg)
    return fn


def install_builtin_default(loader: Callable[[], StreamFn]) -> None:
    """For the top-level package only: how to load the built-in fallback."""
    global _builtin_loader
    _builtin_loader = loader
