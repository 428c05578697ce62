"""A queued run keeps the starting request's trace context beside its record
(``piagent.otel`` on): an executor whose payload does not carry it (a recovery payload, say)
still joins the request's trace, and ``purge`` removes it with the run."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from piagent import Agent, otel
from piagent.runs import QueuedRunner
from piagent.runs._traces import kept_trace
from piagent.sessions import SessionStore
from piagent.testing import ScriptedStreamFn, assistant_text

from .conftest import SQLALCHEMY, store_fixture

store = store_fixture("sqlite", "postgres", *SQLALCHEMY)


def _agent(session_id: str) -> Agent:
    stream = ScriptedStreamFn([assistant_text("hi")])
    return Agent(model=stream.model, stream_fn=stream)


def test_an_executor_without_the_payloads_trace_joins_the_kept_one(store: SessionStore) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sent: list[tuple[str, dict[str, Any]]] = []
    runner = QueuedRunner(store, _agent, lambda run_id, payload: sent.append((run_id, payload)))
    otel.instrument(provider)
    try:
        with provider.get_tracer("web").start_as_current_span("POST /chat") as request:
            run_id = runner.start("s1", "hello")
        untraced = runner.start("s2", "no span here")
        (_, payload), (_, other) = sent
        assert kept_trace(runner._backend, run_id) == payload["trace"]
        assert kept_trace(runner._backend, untraced) is None and "trace" not in other
        stripped = {key: value for key, value in payload.items() if key != "trace"}
        assert runner.execute(run_id, stripped) == "done"
    finally:
        otel.uninstrument()
    [run] = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent"]
    assert run.context.trace_id == request.get_span_context().trace_id
    assert run.parent is not None and run.parent.span_id == request.get_span_context().span_id

    assert runner.purge(0) == [run_id]
    assert kept_trace(runner._backend, run_id) is None
