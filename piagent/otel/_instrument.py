"""``instrument()``: OpenTelemetry spans for every run of this process, in one line.

It installs a process-wide tracer the loop consults when a run starts (an untraced run
pays one global read); the runners ask it for the current trace context to send along
with a run (``carrier``) and join it where the run executes (``joined``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

try:
    from opentelemetry import context as otel_context, propagate, trace
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    msg = "piagent.otel needs OpenTelemetry: pip install 'piagent[otel]'"
    raise ImportError(msg) from exc

from .._version import __version__
from ..events import AgentEvent
from ..loop import AgentLoopConfig, RunTrace, Tracing, get_tracing, set_tracing
from ..stream import StreamFn
from ._attributes import capture_from_env
from ._spans import RunSpans

__all__ = ["Instrumentation", "instrument", "is_instrumented", "uninstrument"]

Emit = Callable[[AgentEvent], None]


class Instrumentation:
    """The installed tracer (``instrument()`` builds it): spans from ``tracer_provider``'s
    ``piagent`` tracer. ``capture_content``: ``None`` reads
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` at each run's start."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None, *,
                 agent_name: str | None = None, capture_content: bool | None = None) -> None:
        if tracer_provider is not None and not isinstance(tracer_provider,
                                                          trace.TracerProvider):
            msg = (f"tracer_provider must be an OpenTelemetry TracerProvider or None (the "
                   f"global one), got {type(tracer_provider).__name__}.")
            raise TypeError(msg)
        if agent_name is not None and (not isinstance(agent_name, str) or not agent_name):
            msg = f"agent_name must be None or a non-empty string, got {agent_name!r}."
            raise ValueError(msg)
        if capture_content is not None and not isinstance(capture_content, bool):
            msg = f"capture_content must be None, True or False, got {capture_content!r}."
            raise TypeError(msg)
        self.tracer = trace.get_tracer("piagent", __version__, tracer_provider=tracer_provider)
        self.agent_name = agent_name
        self.capture_content = capture_content

    def start_run(self, config: AgentLoopConfig, emit: Emit, stream_fn: StreamFn
                  ) -> tuple[RunTrace, AgentLoopConfig, Emit, StreamFn] | None:
        capture = self.capture_content
        spans = RunSpans(self.tracer, config, self.agent_name,
                         capture_from_env() if capture is None else capture)
        config, emit, stream_fn = spans.wrapped(emit, stream_fn)
        return spans, config, emit, stream_fn

    def carrier(self) -> dict[str, str] | None:
        if not trace.get_current_span().get_span_context().is_valid:
            return None
        headers: dict[str, str] = {}
        propagate.inject(headers)
        return headers or None

    def joined(self, carrier: dict[str, str] | None) -> AbstractContextManager[object]:
        return _joined(carrier)


@contextmanager
def _joined(carrier: dict[str, str] | None) -> Iterator[None]:
    if not carrier:
        yield None
        return
    token = otel_context.attach(propagate.extract(carrier))
    try:
        yield None
    finally:
        otel_context.detach(token)


def instrument(tracer_provider: Any = None, *, agent_name: str | None = None,
               capture_content: bool | None = None) -> Instrumentation:
    """Trace every run that starts from now on (docs/observability.md); returns the tracer.

    ``tracer_provider``: where the spans go (``None``: OpenTelemetry's global provider).
    ``agent_name`` names the run's span (``invoke_agent {agent_name}``). Message content
    (``gen_ai.input.messages`` …, tool arguments and results) is left out unless
    ``capture_content=True`` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is
    ``SPAN_ONLY``/``SPAN_AND_EVENT``/``true``. Calling it again replaces the tracer.
    """
    instrumentation = Instrumentation(tracer_provider, agent_name=agent_name,
                                      capture_content=capture_content)
    set_tracing(instrumentation)
    return instrumentation


def uninstrument() -> None:
    """Stop tracing the runs that start from now on (runs already going keep their spans)."""
    set_tracing(None)


def is_instrumented() -> bool:
    """Whether ``instrument()`` is on."""
    return isinstance(get_tracing(), Instrumentation)


_check: type[Tracing] = Instrumentation  # Instrumentation is piagent's Tracing
