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
    "ClientAttribution",
    "ClientIdentity",
    "Context",
    "ProviderResponse",
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


@dataclass(frozen=True)
class ClientAttribution:
    """Who requests are attributed to (pi-ai's ``ClientAttribution``).

    The built-in adapters send it as OpenRouter's ``HTTP-Referer`` (``url``),
    ``X-OpenRouter-Title`` (``name``) and ``X-OpenRouter-Categories`` (``categories``, joined
    by commas), NVIDIA NIM's ``X-BILLING-INVOKE-ORIGIN`` (``name``, first letter upper-cased)
    and OpenCode's ``x-opencode-client`` (``name``); other providers get no attribution.
    """

    name: str
    url: str
    categories: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for label in ("name", "url"):
            if not isinstance(getattr(self, label), str):
                msg = (f"ClientAttribution.{label} must be a str, got "
                       f"{type(getattr(self, label)).__name__}.")
                raise TypeError(msg)
        categories = self.categories
        if isinstance(categories, str) or not all(isinstance(c, str) for c in categories):
            msg = ("ClientAttribution.categories must be a sequence of str, e.g. "
                   f"('cli-agent',), got {categories!r}.")
            raise TypeError(msg)
        object.__setattr__(self, "categories", tuple(categories))


@dataclass(frozen=True, kw_only=True)
class ClientIdentity:
    """How requests identify the calling app: ``User-Agent`` and attribution headers.

    ``user_agent``: ``"detailed"`` (the default: ``piagent/<version> (<platform>;
    python/<version>; <machine>)``), ``"short"`` (``piagent``) or any other string, sent as
    it is. ``version`` replaces the version in the detailed form. ``attribution``: see
    ``ClientAttribution``; ``None`` sends none. Identity headers sit below the adapter's,
    the model's and the request's headers: a header of the same name overrides them and a
    ``None`` header value removes them.
    """

    user_agent: str = "detailed"
    attribution: ClientAttribution | None = None
    version: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.user_agent, str) or not self.user_agent:
            msg = ("ClientIdentity.user_agent must be 'detailed', 'short' or a non-empty "
                   f"User-Agent string, got {self.user_agent!r}.")
            raise TypeError(msg)
        if self.attribution is not None and not isinstance(self.attribution, ClientAttribution):
            msg = ("ClientIdentity.attribution must be a ClientAttribution or None, got "
                   f"{type(self.attribution).__name__}.")
            raise TypeError(msg)
        if self.version is not None and not isinstance(self.version, str):
            msg = f"ClientIdentity.version must be a str or None, got {self.version!r}."
            raise TypeError(msg)


@dataclass(frozen=True)
class ProviderResponse:
    """What ``StreamOptions.on_response`` receives: the accepted response's HTTP status and
    headers (names lower-cased, as pi-ai gives them), before its body is read."""

    status: int
    headers: Mapping[str, str]


@dataclass(kw_only=True)
class StreamOptions:
    """Options a stream function receives (pi's serialisable options plus the signal)."""

    api_key: str | None = None
    signal: AbortSignal | None = None
    reasoning: ThinkingLevel | None = None
    """The thinking level ("minimal" … "max"); ``None`` (or "off") for none."""
    session_id: str | None = None
    disable_continuation: bool | None = None
    """``True``: do not use or record server-side continuation state for this request (pi-ai
    1.6's ``disableContinuation``, for replays such as cache warming that must not replace the
    real conversation's state). No built-in adapter keeps such state (pi-ai's only user is
    Anthropic's message threads, which piagent does not implement), so they ignore it; the
    proxy forwards it to the server's stream function."""
    max_tokens: int | None = None
    temperature: float | None = None
    headers: Mapping[str, str | None] | None = None
    """Extra request headers over the adapter's and the model's (a header of the same name,
    compared case-insensitively, is replaced); a ``None`` value removes that header,
    a default one (``User-Agent``, ``Accept``, …) included."""
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
    on_payload: Callable[[Any, Model], Any] | None = None
    """``on_payload(body, model)``: called with the request body (the JSON-ready dict) just
    before it is sent; return a replacement body, or ``None`` to send ``body`` (edits made
    to it in place included). Called once per request (not again on a retry)."""
    on_response: Callable[[ProviderResponse, Model], None] | None = None
    """``on_response(response, model)``: called with the status and headers (rate-limit
    headers, request ids) of every HTTP response: each error response (retried or not) and
    the accepted one, before any event."""
    on_provider_stream_event: Callable[[Any, Model], None] | None = None
    """``on_provider_stream_event(data, model)``: called with each parsed provider event (the
    JSON of one server-sent event) before piagent maps it; read it, do not change it."""
    identity: ClientIdentity | None = None
    """How requests identify the app (``User-Agent``, attribution); ``None``: a detailed
    ``User-Agent`` and no attribution."""
    timeout_ms: float | None = None
    """The longest wait for the server, in milliseconds: connecting, the response head, and
    each read of the body (a stalled stream fails after it); ``None``: 10 s to connect and
    600 s per read."""
    env: Mapping[str, str] | None = None
    """Variables read before ``os.environ`` for this request: the provider's API key variable
    (``OPENAI_API_KEY``, …) and ``PI_CACHE_RETENTION``."""
    telemetry: Any = None
    """An explicit parent for the run's spans (pi-ai's ``telemetry`` option): an OpenTelemetry
    ``Span`` or ``Context``; ``None``: the span current where the run starts. Read only when
    ``piagent.otel.instrument()`` is on (docs/observability.md)."""

    def __post_init__(self) -> None:
        # built per turn from the loop's config: the checks run only for options that are set
        if (self.max_tokens is not None or self.temperature is not None
                or self.reasoning is not None or self.api_key is not None
                or self.session_id is not None or self.max_retries is not None
                or self.max_retry_delay_ms is not None):
            _check_values(self)
        if self.disable_continuation is not None and type(self.disable_continuation) is not bool:
            msg = (f"disable_continuation must be a bool or None, got "
                   f"{_got(self.disable_continuation)}.")
            raise TypeError(msg)
        if (self.on_payload is not None or self.on_response is not None
                or self.on_provider_stream_event is not None or self.identity is not None
                or self.timeout_ms is not None or self.env is not None
                or self.telemetry is not None):
            _check_request_options(self)


_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")


def _got(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_LEVEL_SET = frozenset(_LEVELS)


def _check_values(options: StreamOptions) -> None:
    """The value options' checks: one expression for the usual values (this runs per turn
    when an option is set), the full checks otherwise."""
    o = options
    t, n, d = o.temperature, o.max_tokens, o.max_retry_delay_ms
    if ((o.api_key is None or type(o.api_key) is str)
            and (o.session_id is None or type(o.session_id) is str)
            and (t is None or (type(t) is float or type(t) is int) and 0 <= t <= 2)
            and (n is None or type(n) is int and n >= 1)
            and (o.max_retries is None or type(o.max_retries) is int and o.max_retries >= 0)
            and (d is None or (type(d) is int or type(d) is float) and d >= 0)
            and (o.reasoning is None or o.reasoning in _LEVEL_SET)):
        return
    _check_values_fully(options)


def _check_values_fully(options: StreamOptions) -> None:
    """``TypeError``/``ValueError`` naming the first wrong value option (subclasses of the
    accepted types, a str enum say, pass)."""
    for name in ("api_key", "session_id"):
        value = getattr(options, name)
        if value is not None and not isinstance(value, str):
            msg = f"{name} must be a str or None, got {_got(value)}."
            raise TypeError(msg)
    temperature = options.temperature
    if temperature is not None:
        if not _number(temperature):
            msg = f"temperature must be a number from 0 to 2, or None, got {_got(temperature)}."
            raise TypeError(msg)
        if not 0 <= temperature <= 2:
            msg = f"temperature must be from 0 to 2, got {temperature!r}."
            raise ValueError(msg)
    for name, least in (("max_tokens", 1), ("max_retries", 0)):
        value = getattr(options, name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                msg = f"{name} must be an int >= {least} or None, got {_got(value)}."
                raise TypeError(msg)
            if value < least:
                msg = f"{name} must be an int >= {least} or None, got {value}."
                raise ValueError(msg)
    delay = options.max_retry_delay_ms
    if delay is not None:
        if not _number(delay):
            msg = (f"max_retry_delay_ms must be a number of milliseconds >= 0 or None, got "
                   f"{_got(delay)}.")
            raise TypeError(msg)
        if not delay >= 0:
            msg = f"max_retry_delay_ms must be a number of milliseconds >= 0, got {delay!r}."
            raise ValueError(msg)
    if options.reasoning is not None and options.reasoning not in _LEVELS:
        levels = ", ".join(repr(level) for level in _LEVELS)
        msg = f"reasoning must be one of {levels}, or None, got {options.reasoning!r}."
        raise ValueError(msg)


def _check_request_options(options: StreamOptions) -> None:
    """``TypeError``/``ValueError`` naming the first wrong request option."""
    for name in ("on_payload", "on_response", "on_provider_stream_event"):
        value = getattr(options, name)
        if value is not None and not callable(value):
            msg = (f"StreamOptions.{name} must be a callable or None, got "
                   f"{type(value).__name__}.")
            raise TypeError(msg)
    if options.identity is not None and not isinstance(options.identity, ClientIdentity):
        msg = ("StreamOptions.identity must be a ClientIdentity (e.g. "
               f"ClientIdentity(user_agent='short')) or None, got "
               f"{type(options.identity).__name__}.")
        raise TypeError(msg)
    timeout = options.timeout_ms
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not timeout > 0 or timeout == float("inf")):
        msg = (f"StreamOptions.timeout_ms must be a positive, finite number of milliseconds, "
               f"got {timeout!r}.")
        raise ValueError(msg)
    env = options.env
    if env is not None and (not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        bad = type(env).__name__ if not isinstance(env, Mapping) else "a mapping with " + next(
            f"{type(v).__name__} value for {k!r}" if isinstance(k, str) else f"key {k!r}"
            for k, v in env.items() if not (isinstance(k, str) and isinstance(v, str)))
        msg = f"StreamOptions.env must be a mapping of str to str (names to values), got {bad}."
        raise TypeError(msg)
    if options.telemetry is not None:
        _check_telemetry(options.telemetry)


def _check_telemetry(telemetry: object) -> None:
    """``TypeError`` unless ``telemetry`` is an OpenTelemetry ``Span`` or ``Context``."""
    try:
        from opentelemetry import context, trace
    except ImportError:
        msg = ("StreamOptions.telemetry is an OpenTelemetry Span or Context, and OpenTelemetry "
               "is not installed: pip install 'piagent[otel]'.")
        raise TypeError(msg) from None
    if not isinstance(telemetry, trace.Span | context.Context):
        msg = (f"StreamOptions.telemetry must be an OpenTelemetry Span or Context, or None, "
               f"got {type(telemetry).__name__}.")
        raise TypeError(msg)


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
