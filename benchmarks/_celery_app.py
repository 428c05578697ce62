"""The Celery app of ``celery_bench.py``'s workers (``celery -A benchmarks._celery_app worker``).

Wiring from the environment (set by the benchmark): ``PIAGENT_BENCH_REDIS``,
``PIAGENT_BENCH_POSTGRES``, ``PIAGENT_BENCH_SCHEMA``, ``PIAGENT_BENCH_QUEUE``. The model is
scripted by the session id's prefix: ``tick-*`` calls ``ticker``, which reports ``n``
progress updates 5 ms apart, each stamped with ``time.monotonic()`` (system-wide on Linux,
so the reader in another process can subtract); ``hold-*`` calls ``hold``, which waits for
the abort; anything else gets a one-line answer.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery  # type: ignore[import-untyped]
from celery.signals import worker_ready  # type: ignore[import-untyped]

from piagent import AbortSignal, Agent, AgentToolResult, TextContent, tool
from piagent.celery import CeleryRunner
from piagent.sessions import PostgresStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.tools import ToolUpdateFn

QUEUE = os.environ.get("PIAGENT_BENCH_QUEUE", "piagent-bench")
app = Celery("piagent_bench", broker=os.environ.get("PIAGENT_BENCH_REDIS",
                                                    "redis://127.0.0.1:6379/0"))
app.conf.update(task_default_queue=QUEUE, worker_prefetch_multiplier=1,
                broker_connection_retry_on_startup=True, worker_hijack_root_logger=False)
store = PostgresStore(os.environ.get("PIAGENT_BENCH_POSTGRES",
                                     "postgresql://postgres@127.0.0.1:5432/test"),
                      schema=os.environ.get("PIAGENT_BENCH_SCHEMA", "piagent_bench"),
                      max_connections=8)


@tool
def ticker(n: int, signal: AbortSignal, on_update: ToolUpdateFn) -> str:
    """Report n stamped progress updates.

    Args:
        n: How many.
    """
    for _ in range(n):
        on_update(AgentToolResult([TextContent("tick")], {"t": time.monotonic()}))
        signal.wait(0.005)
    return "ticked"


@tool
def hold(signal: AbortSignal) -> str:
    """Wait for the abort (at most 30 s)."""
    signal.wait(30.0)
    return "released"


def make_agent(session_id: str) -> Agent:
    def answer(context: Any, options: Any) -> Any:
        if context.messages[-1].role != "user":
            return assistant_text("done")
        if session_id.startswith("tick-"):
            return assistant_tool_calls(("ticker", {"n": 50}))
        if session_id.startswith("hold-"):
            return assistant_tool_calls(("hold", {}))
        return assistant_text("ok")

    scripted = ScriptedStreamFn([answer] * 4)
    return Agent(model=scripted.model, stream_fn=scripted, tools=[ticker, hold],
                 system_prompt="bench")


runner = CeleryRunner(app, store, make_agent, queue=QUEUE)


@worker_ready.connect  # type: ignore[untyped-decorator]
def _ready(sender: Any = None, **kwargs: Any) -> None:
    path = os.environ.get("PIAGENT_BENCH_READY")
    if path:
        with open(path, "w") as out:
            out.write(str(os.getpid()))
