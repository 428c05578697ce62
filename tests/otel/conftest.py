"""An in-memory span exporter on a ``TracerProvider`` of the test's own (never the global
one), and ``instrumented``: ``piagent.otel.instrument()`` on it for one test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from piagent import otel


class Spans:
    """The finished spans of one test, and the provider that makes them."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.finished() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [span.name for span in self.finished()]
        return found[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    recorded = Spans()
    otel.instrument(recorded.provider, agent_name="support")
    try:
        yield recorded
    finally:
        otel.uninstrument()
        recorded.provider.shutdown()
