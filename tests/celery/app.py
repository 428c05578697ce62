"""The Celery app the worker tests start (``celery -A tests.celery.app worker``).

Both sides import this module: the test process (to start, stream, steer and abort runs)
and the worker processes (to execute them). It reads its wiring from the environment, set by
``tests/celery/conftest.py``:

* ``PIAGENT_TEST_REDIS`` (the broker, a Redis URL with its own db number),
  ``PIAGENT_TEST_POSTGRES`` and ``PIAGENT_TEST_SCHEMA`` (the store; a ``SQLAlchemyStore``
  on the URL ``PIAGENT_TEST_SQLALCHEMY`` instead, when that is set), ``PIAGENT_TEST_QUEUE``
  (a queue of this test run only), ``PIAGENT_TEST_DIR`` (files tools and workers leave for
  the test), ``PIAGENT_TEST_LEASE`` (the lease, short so a killed worker's run is recovered
  soon). With ``PIAGENT_TEST_DJANGO_ALIAS`` (and ``PIAGENT_TEST_DJANGO_DATABASES``, the test
  process's ``settings.DATABASES`` as JSON) the store is a ``DjangoStore`` on that alias.

The model is scripted by the session id's prefix: ``echo-*`` answers every user message with
``echo <text>``; ``block-*`` first calls ``block`` (which waits for its gate file or the
abort); ``kill-*`` calls ``look`` (replay "safe") and ``charge`` (replay "never") in one
batch, each of which blocks the first time it runs (the test kills that worker) and records
every run in ``ran-<session>``; ``steer3-*`` calls ``batch`` three times, one batch a
turn (batch ``n`` touches ``entered-<session>-<n>`` and waits for ``gate-<session>-<n>``),
takes every queued steer at once (``steering_mode="all"``), then answers ``done``;
``approve-*`` calls ``delete`` (needs approval) and ``look`` in one batch (each records its
runs in ``ran-<session>``), then sums the results up; ``hang-*`` calls ``hang``, which
ignores its signal and outlives its 0.5 s timeout (then echoes the timeout's result).

A worker (``PIAGENT_TEST_WORKER`` set) traces its runs with ``piagent.otel``: each finished
span is one JSON line in ``spans-<pid>.jsonl`` (name, trace and span ids, parent id).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celery import Celery  # type: ignore[import-untyped]
from celery.signals import worker_ready  # type: ignore[import-untyped]
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from piagent import AbortSignal, Agent, otel, tool
from piagent.celery import CeleryRunner
from piagent.sessions import PostgresStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

BROKER = os.environ.get("PIAGENT_TEST_REDIS", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("PIAGENT_TEST_QUEUE", "piagent-test")
DIR = Path(os.environ.get("PIAGENT_TEST_DIR", "."))
LEASE = float(os.environ.get("PIAGENT_TEST_LEASE", "2"))
BLOCK_S = 30.0  # the most a blocking tool waits

app = Celery("piagent_tests", broker=BROKER)
app.conf.update(
    # redeliver a dead worker's run soon: unacknowledged after LEASE + 1 s, looked for every
    # second (kombu's defaults: an hour, and a scan every 100 s); this run's keys only
    broker_transport_options={
        "visibility_timeout": LEASE + 1.0, "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1, "unacked_key": f"{QUEUE}-unacked",
        "unacked_index_key": f"{QUEUE}-unacked-index",
        "unacked_mutex_key": f"{QUEUE}-unacked-mutex"},
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
)

store: Any
if os.environ.get("PIAGENT_TEST_SQLALCHEMY"):  # a SQLAlchemyStore on this URL instead
    from sqlalchemy import create_engine

    from piagent.contrib.sqlalchemy import SQLAlchemyStore

    store = SQLAlchemyStore(create_engine(os.environ["PIAGENT_TEST_SQLALCHEMY"]))
elif os.environ.get("PIAGENT_TEST_DJANGO_ALIAS"):  # tests/celery/test_django.py: a DjangoStore
    import django
    from django.conf import settings

    if not settings.configured:  # a worker; the test process configured Django already
        from tests.contrib import django_settings

        settings.configure(**{**{k: v for k, v in vars(django_settings).items()
                                 if k.isupper()},
                              "DATABASES": json.loads(os.environ[
                                  "PIAGENT_TEST_DJANGO_DATABASES"])})
        django.setup()
    from piagent.contrib.django import DjangoStore

    store = DjangoStore(os.environ["PIAGENT_TEST_DJANGO_ALIAS"])
else:
    store = PostgresStore(os.environ.get("PIAGENT_TEST_POSTGRES",
                                         "postgresql://postgres@127.0.0.1:5432/test"),
                          schema=os.environ.get("PIAGENT_TEST_SCHEMA", "piagent"),
                          max_connections=8, timeout=5.0)


def _echo(context: Any, options: Any) -> Any:
    return assistant_text(f"echo {getattr(context.messages[-1], 'text', '')}")


def _gate(name: str, signal: AbortSignal) -> bool:
    """Wait (bounded) until the test creates the file ``name`` or the run is aborted."""
    for _ in range(int(BLOCK_S / 0.01)):
        if (DIR / name).exists() or signal.aborted:
            return True
        signal.wait(0.01)
    return False


def _record(session_id: str, tool_name: str) -> int:
    """Append ``tool pid`` to ``ran-<session>``; how many times the tool ran before."""
    path = DIR / f"ran-{session_id}"
    before = path.read_text().split().count(tool_name) if path.exists() else 0
    with path.open("a") as out:
        out.write(f"{tool_name} {os.getpid()}\n")
    return before


def make_agent(session_id: str) -> Agent:
    @tool
    def block(signal: AbortSignal) -> str:
        """Wait for the test's gate file (or the abort); with an ``expect-steer`` file, also
        for a steering message to reach the Agent (so the test knows it arrived in time)."""
        (DIR / f"entered-{session_id}").touch()
        if not _gate(f"gate-{session_id}", signal):
            return "timed out"
        expect = DIR / f"expect-steer-{session_id}"
        for _ in range(int(BLOCK_S / 0.01)):
            if not expect.exists() or agent.has_queued_messages() or signal.aborted:
                return "opened"
            signal.wait(0.01)
        return "the steer never came"

    @tool(replay="safe")
    def look(signal: AbortSignal) -> str:
        """Look something up (safe to repeat)."""
        if _record(session_id, "look") == 0:
            _gate(f"never-{session_id}", signal)  # the test kills this worker meanwhile
        return "looked"

    @tool(replay="never")
    def charge(signal: AbortSignal) -> str:
        """Charge a card (never repeated)."""
        if _record(session_id, "charge") == 0:
            _gate(f"never-{session_id}", signal)
        return "charged"

    @tool(needs_approval=True)
    def delete(name: str) -> str:
        """Delete a thing (needs approval)."""
        _record(session_id, "delete")
        return f"deleted {name}"

    @tool(timeout=0.5)
    def hang() -> str:
        """Never answers in time, and ignores its signal (a stuck call)."""
        (DIR / f"entered-{session_id}").touch()
        threading.Event().wait(BLOCK_S)
        return "late"

    @tool
    def batch(n: int, signal: AbortSignal) -> str:
        """Batch ``n``: wait for the test's gate file."""
        (DIR / f"entered-{session_id}-{n}").touch()
        return f"gate {n}" if _gate(f"gate-{session_id}-{n}", signal) else "timed out"

    # the answers depend on the transcript only, so a worker that recovers a run (with a
    # new Agent) answers as the first one would have
    def answer(context: Any, options: Any) -> Any:
        last = context.messages[-1]
        if session_id.startswith("steer3-"):
            done = sum(m.role == "toolResult" for m in context.messages)
            return (assistant_tool_calls(("batch", {"n": done + 1})) if done < 3
                    else assistant_text("done"))
        asked = last.role == "user" and getattr(last, "text", "") != "steered"
        if asked and session_id.startswith("block-"):
            return assistant_tool_calls(("block", {}))
        if asked and session_id.startswith("hang-"):
            return assistant_tool_calls(("hang", {}))
        if asked and session_id.startswith("approve-"):
            return assistant_tool_calls(("delete", {"name": "report"}, "c-delete"),
                                        ("look", {}, "c-look"))
        if last.role == "toolResult" and session_id.startswith("approve-"):
            return assistant_text("results: " + "; ".join(
                f"{m.tool_name}={m.text}" for m in context.messages if m.role == "toolResult"))
        if asked and session_id.startswith("kill-"):
            return assistant_tool_calls(("look", {}, "c-look"), ("charge", {}, "c-charge"))
        return _echo(context, options)

    scripted = ScriptedStreamFn([answer] * 20)
    agent = Agent(model=scripted.model, stream_fn=scripted,
                  tools=[block, look, charge, batch, delete, hang],
                  system_prompt="test",
                  steering_mode="all" if session_id.startswith("steer3-") else "one-at-a-time")
    return agent


class _SpanFile(SpanExporter):
    """Finished spans as JSON lines in ``spans-<pid>.jsonl`` (one write per span)."""

    def __init__(self) -> None:
        self.path = DIR / f"spans-{os.getpid()}.jsonl"
        self._lock = threading.Lock()  # guards the file's appends (the worker's threads)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps({
            "name": span.name, "trace_id": f"{span.context.trace_id:032x}",
            "span_id": f"{span.context.span_id:016x}",
            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
            "attributes": dict(span.attributes or {})}) + "\n" for span in spans)
        with self._lock, self.path.open("a") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS


if os.environ.get("PIAGENT_TEST_WORKER"):  # a worker: trace its runs
    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(_SpanFile()))
    otel.instrument(_provider)


runner = CeleryRunner(app, store, make_agent, lease_s=LEASE, queue=QUEUE,
                      redelivery_grace=60.0)

_ready_lock = threading.Lock()  # guards the ready file's write (one worker, one signal)


@worker_ready.connect  # type: ignore[untyped-decorator]
def _ready(sender: Any = None, **kwargs: Any) -> None:
    name = os.environ.get("PIAGENT_TEST_WORKER", "worker")
    with _ready_lock:
        (DIR / f"ready-{name}").write_text(str(os.getpid()))
