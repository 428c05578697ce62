"""OpenTelemetry traces of agent runs (extra ``piagent[otel]``: ``opentelemetry-api``).

``piagent.otel.instrument()`` turns them on for the whole process: a span
``invoke_agent`` per run, ``chat {model}`` per model call and ``execute_tool {name}`` per
tool call, with the GenAI semantic conventions' attributes (docs/observability.md).
"""

from __future__ import annotations

from ._instrument import Instrumentation, instrument, is_instrumented, uninstrument

__all__ = ["Instrumentation", "instrument", "is_instrumented", "uninstrument"]
