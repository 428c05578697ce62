"""Runs by id join the trace of the request that started them: a ``LocalRunner`` thread, and
a ``QueuedRunner`` executed elsewhere (the trace context travels in the run's payload, so a
redelivered payload, a recovered run, continues it). Real Celery workers:
tests/celery/test_workers.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from piagent import Agent
from piagent.runs import LocalRunner, QueuedRunner
from piagent.sessions import MemoryStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import WAIT
from .conftest import Spans


def _agent(session_id: str) -> Agent:
    return Agent(stream_fn=ScriptedStreamFn([assistant_text("hi")]),
                 model=ScriptedStreamFn().model)


def test_a_local_runners_run_is_a_child_of_the_starting_request(spans: Spans) -> None:
    runner = LocalRunner(MemoryStore(), _agent)
    with spans.tracer.start_as_current_span("GET /chat") as request:
        run_id = runner.start("s1", "hello")
    assert runner.wait(run_id, WAIT)
    run = spans.one("invoke_agent support")
    assert run.parent is not None and run.parent.span_id == request.get_span_context().span_id
    assert run.context.trace_id == request.get_span_context().trace_id


def test_a_queued_run_carries_the_trace_context_in_its_payload(spans: Spans,
                                                               tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    sent: list[tuple[str, dict[str, Any]]] = []
    runner = QueuedRunner(store, _agent, lambda run_id, payload: sent.append((run_id, payload)))
    with spans.tracer.start_as_current_span("POST /chat") as request:
        runner.start("s1", "hello")
    untraced = runner.start("s2", "no request span")
    (run_id, payload), (other_id, other) = sent
    context = request.get_span_context()
    assert payload["trace"] == {"traceparent": f"00-{context.trace_id:032x}-"
                                               f"{context.span_id:016x}-{context.trace_flags:02x}"}
    assert "trace" not in other

    assert runner.execute(run_id, payload) == "done"  # the "worker": here, no span current
    assert runner.execute(other_id, other) == "done"
    runs = spans.named("invoke_agent support")
    assert len(runs) == 2
    joined = [r for r in runs if r.context.trace_id == context.trace_id]
    assert len(joined) == 1 and joined[0].parent.span_id == context.span_id  # type: ignore[union-attr]
    alone = [r for r in runs if r is not joined[0]]
    assert alone[0].parent is None and untraced
    store.close()
