"""Where tool calls execute: every batch on the run's pool (one call too, so updates from
any thread are live), whose calls carry the run's contextvars; a caller's executor is used
for every batch, one call or many."""

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


def test_an_update_from_another_thread_is_emitted_while_a_lone_call_runs() -> None:
    """A batch of one call runs on the pool, so the run's thread emits an update sent from
    any thread (a tool's helper thread, an MCP reader) before the call returns."""
    seen = threading.Event()
    rec = Recorder(on_event=lambda e: seen.set() if e.type == "tool_execution_update" else None)

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        helper = threading.Thread(target=on_update, args=(ok("half way"),))
        helper.start()
        helper.join(WAIT)
        return ok("listener saw it" if seen.wait(WAIT) else "not yet")

    _run([1], execute, rec=rec)
    assert [r.content[0].text for r in rec.results()] == ["listener saw it"]
    assert rec.threads.count(threading.current_thread()) == len(rec.events)  # events: here


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


def test_the_runs_pool_takes_no_process_wide_lock() -> None:
    """A run's pool does not go through ``concurrent.futures``' process-wide lock (which
    every ``ThreadPoolExecutor.submit`` of the process takes, and holds while a new thread
    starts): a batch runs while another thread holds that lock."""
    from concurrent.futures import thread as cf_thread

    barrier = threading.Barrier(2, timeout=WAIT)  # breaks unless both calls run at once

    def execute(*args: Any) -> AgentToolResult:
        barrier.wait()
        return ok("both")

    done = threading.Event()
    rec = Recorder(on_event=lambda e: done.set() if e.type == "agent_end" else None)
    with cf_thread._global_shutdown_lock:  # type: ignore[attr-defined]
        runner = threading.Thread(target=_run, args=([2], execute, rec))
        runner.start()
        finished = done.wait(WAIT)  # bounded: a pool that takes the lock waits here
    runner.join(WAIT)
    assert finished, "the batch waited for concurrent.futures' process-wide lock"
    assert [r.content[0].text for r in rec.results()] == ["both", "both"]


_EXIT_SCRIPT = """
import sys, threading
from piagent import Agent, AgentToolResult, TextContent, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

started = threading.Event()
release = threading.Event()

@tool
def slow() -> str:
    "Waits, then writes its mark."
    started.set()
    release.wait(30)
    sys.stdout.write("tool finished\\n")
    sys.stdout.flush()
    return "done"

fn = ScriptedStreamFn([assistant_tool_calls(("slow", {})), assistant_text("end")])
agent = Agent(model=fn.model, stream_fn=fn, tools=[slow])
agent.prompt("go", block=False)
assert started.wait(30)
print("main ends", flush=True)
threading.Timer(0.2, release.set).start()
"""


def test_the_interpreters_exit_waits_for_a_call_still_running() -> None:
    """As with a ``ThreadPoolExecutor``: the main thread ends while a call of a run runs on
    its pool; the process exits once the call has returned (its mark is written)."""
    import subprocess
    import sys

    from tests.conftest import finish_child

    proc = subprocess.Popen([sys.executable, "-c", _EXIT_SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out, err = finish_child(proc)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["main ends", "tool finished"]
