"""A plain ``ContextVar`` (no OpenTelemetry) set by the caller is seen everywhere the run
does work: its worker thread, its listeners, hooks, and tools on the run's own pool and on
a caller-owned ``tool_executor``; what they set stays in the run."""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from piagent import Agent, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import WAIT

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


@pytest.mark.parametrize("executor", [None, "caller's"])
def test_the_callers_context_reaches_every_thread_of_the_run(executor: str | None) -> None:
    seen: list[tuple[str, str, str]] = []
    lock = threading.Lock()  # guards seen
    barrier = threading.Barrier(2, timeout=WAIT)  # the two calls run at once, on two threads

    def note(where: str) -> None:
        with lock:
            seen.append((where, threading.current_thread().name, request_id.get()))

    @tool
    def look(q: str) -> str:
        """Look.

        Args:
            q: what.
        """
        barrier.wait()
        note("tool")
        request_id.set("changed by a tool")
        return q

    def listener(event: Any, signal: Any) -> None:
        if event.type in ("agent_start", "agent_end"):
            note("listener")

    def transform(messages: Any, signal: Any) -> Any:
        note("hook")
        return messages

    pool = ThreadPoolExecutor(2, thread_name_prefix="caller-pool") if executor else None
    stream = ScriptedStreamFn([assistant_tool_calls(("look", {"q": "a"}), ("look", {"q": "b"})),
                               assistant_text("done")])
    agent = Agent(model=stream.model, stream_fn=stream, tools=[look], tool_executor=pool,
                  transform_context=transform)
    agent.subscribe(listener)

    def request() -> None:
        request_id.set("req-42")
        agent.prompt("go", timeout=WAIT)  # with a timeout: the run has its own worker thread

    contextvars.copy_context().run(request)
    if pool is not None:
        pool.shutdown()
    assert request_id.get() == "-"
    assert {value for _, _, value in seen} == {"req-42"}
    wheres = [where for where, _, _ in seen]
    assert wheres.count("tool") == 2 and wheres.count("listener") == 2 and "hook" in wheres
    threads = {name for where, name, _ in seen if where == "tool"}
    assert len(threads) == 2
    prefix = "caller-pool" if executor else "piagent-tool"
    assert all(name.startswith(prefix) for name in threads)
    assert {name for where, name, _ in seen if where != "tool"} == {"piagent-run"}
