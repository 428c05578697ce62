"""Where tool calls execute: a batch of one call on the run's own thread (no pool thread at
all for a run whose batches are all of one call), a wider batch on the run's pool, whose
calls carry the run's contextvars; a caller's executor is used for every batch, one call
or many."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from piagent import AbortSignal, AgentLoopConfig, AgentToolResult, UserMessage, run_agent_loop
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT, Recorder
from tests.tools.conftest import make_tool, ok

from .conftest import context_for

pytestmark = pytest.mark.usefixtures("no_thread_leak")

tag: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="none")


def _run(batches: list[int], execute: Callable[..., AgentToolResult],
         rec: Recorder | None = None, **config: Any) -> Recorder:
    fn = ScriptedStreamFn([assistant_tool_calls(*[("read", {"path": str(i)})
                                                  for i in range(width)])
                           for width in batches] + [assistant_text("done")])
    rec = rec if rec is not None else Recorder()
    run_agent_loop([UserMessage("go")], context_for(make_tool(execute=execute)),
                   AgentLoopConfig(model=fn.model, convert_to_llm=list, **config), rec,
                   stream_fn=fn)
    return rec


def test_one_call_batches_execute_on_the_runs_thread_and_start_no_pool() -> None:
    threads: list[tuple[threading.Thread, list[str]]] = []

    def execute(*args: Any) -> AgentToolResult:
        names = [t.name for t in threading.enumerate() if t.name.startswith("piagent-tool")]
        threads.append((threading.current_thread(), names))
        return ok()

    rec = _run([1, 1, 1], execute, after_tool_call=lambda ctx, s: threads.append(
        (threading.current_thread(), [])) and None)
    me = threading.current_thread()
    assert [t for t, _ in threads] == [me] * 6  # execute, after_tool_call, three times
    assert all(names == [] for _, names in threads)
    assert set(rec.threads) == {me}
    assert [e.is_error for e in rec.of("tool_execution_end")] == [False] * 3


def test_an_update_from_a_call_on_the_runs_thread_is_emitted_before_the_call_returns() -> None:
    seen = threading.Event()
    rec = Recorder(on_event=lambda e: seen.set() if e.type == "tool_execution_update" else None)

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        on_update(ok("half way"))
        return ok("listener saw it" if seen.is_set() else "not yet")

    _run([1], execute, rec=rec)
    assert [r.content[0].text for r in rec.results()] == ["listener saw it"]


def test_a_wider_batch_runs_on_pool_threads_that_carry_the_runs_context() -> None:
    barrier = threading.Barrier(3, timeout=WAIT)  # breaks unless three calls run at once
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()  # guards seen

    def execute(*args: Any) -> AgentToolResult:
        barrier.wait()
        with lock:
            seen.append((threading.current_thread().name, tag.get()))
        return ok()

    def loop() -> None:
        tag.set("the run's")
        _run([3, 3], execute)

    contextvars.copy_context().run(loop)
    assert len(seen) == 6
    assert {name for name, _ in seen} <= {f"piagent-tool_{n}" for n in range(6)}
    assert len({name for name, _ in seen}) >= 3
    assert {value for _, value in seen} == {"the run's"}


def test_a_callers_executor_takes_one_call_batches_too() -> None:
    names: list[str] = []

    def execute(*args: Any) -> AgentToolResult:
        names.append(threading.current_thread().name)
        return ok()

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="caller-pool") as executor:
        _run([1, 2], execute, tool_executor=executor)
    assert len(names) == 3 and all(name.startswith("caller-pool") for name in names)
