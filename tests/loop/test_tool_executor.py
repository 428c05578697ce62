"""``tool_executor``: tools on a caller-owned ``concurrent.futures.Executor``.

The default stays a pool per run (no thread outlives a run); a caller's executor runs the
tools of every run, keeps its threads, and is never shut down by the loop or the Agent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest

from piagent import (
    AbortSignal,
    Agent,
    AgentLoopConfig,
    AgentToolResult,
    UserMessage,
    run_agent_loop,
)
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import Recorder
from tests.tools.conftest import make_tool, ok

from .conftest import context_for


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="caller-pool")
    yield pool
    pool.shutdown(wait=True)


def thread_recording_tool() -> tuple[Any, list[str]]:
    names: list[str] = []
    lock = threading.Lock()  # guards names (appended from pool threads)

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        with lock:
            names.append(threading.current_thread().name)
        return ok(tool_call_id)

    return make_tool(execute=execute), names


def run(executor: Executor | None, tool: Any, calls: int = 3, **config: Any) -> Recorder:
    fn = ScriptedStreamFn([assistant_tool_calls(*[("read", {"path": str(i)})
                                                  for i in range(calls)]),
                           assistant_text("done")])
    rec = Recorder()
    run_agent_loop([UserMessage("go")], context_for(tool),
                   AgentLoopConfig(model=fn.model, convert_to_llm=list,
                                   tool_executor=executor, **config), rec, stream_fn=fn)
    return rec


def test_tools_run_on_the_callers_executor_which_stays_open(
        executor: ThreadPoolExecutor) -> None:
    tool, names = thread_recording_tool()
    for _ in range(2):  # two runs share the executor
        rec = run(executor, tool)
        assert [e.is_error for e in rec.of("tool_execution_end")] == [False] * 3
    assert len(names) == 6
    assert all(name.startswith("caller-pool") for name in names)
    assert not [t for t in threading.enumerate() if t.name.startswith("piagent-tool")]
    # never shut down: it still takes work after the runs
    assert executor.submit(lambda: 42).result(timeout=5) == 42


@pytest.mark.usefixtures("no_thread_leak")
def test_the_default_pool_is_the_runs_and_leaves_no_thread() -> None:
    tool, names = thread_recording_tool()
    rec = run(None, tool)
    assert [e.is_error for e in rec.of("tool_execution_end")] == [False] * 3
    assert all(name.startswith("piagent-tool") for name in names)


def test_max_parallel_tools_caps_a_batch_on_the_callers_executor(
        executor: ThreadPoolExecutor) -> None:
    lock = threading.Lock()  # guards state
    state = {"active": 0, "peak": 0}

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
        try:
            return ok(tool_call_id)
        finally:
            with lock:
                state["active"] -= 1

    rec = run(executor, make_tool(execute=execute), calls=6, max_parallel_tools=1)
    assert state["peak"] == 1
    ids = [f"call_{i}" for i in range(1, 7)]
    assert [r.tool_call_id for r in rec.results()] == ids
    assert [e.is_error for e in rec.of("tool_execution_end")] == [False] * 6


def test_a_shut_down_executor_fails_the_run_loudly_with_every_call_recorded() -> None:
    pool = ThreadPoolExecutor(max_workers=2)
    pool.shutdown(wait=True)
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"}),
                                                ("read", {"path": "b"})),
                           assistant_text("done")])
    rec = Recorder()
    with pytest.raises(RuntimeError, match="tool executor refused a tool call"):
        run_agent_loop([UserMessage("go")], context_for(make_tool()),
                       AgentLoopConfig(model=fn.model, convert_to_llm=list,
                                       tool_executor=pool), rec, stream_fn=fn)
    ends = rec.of("tool_execution_end")
    assert [(e.tool_call_id, e.is_error) for e in ends] == [("call_1", True), ("call_2", True)]
    assert [r.tool_call_id for r in rec.results()] == ["call_1", "call_2"]
    assert "must stay open" in ends[0].result.content[0].text


class _NotAnExecutor:
    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        raise AssertionError("never called")


@pytest.mark.parametrize("value", [_NotAnExecutor(), 4, "pool"])
def test_anything_but_an_executor_is_refused_at_once(value: Any) -> None:
    fn = ScriptedStreamFn([assistant_text("hi")])
    with pytest.raises(TypeError, match=r"tool_executor must be a concurrent\.futures\.Executor"):
        AgentLoopConfig(model=fn.model, convert_to_llm=list, tool_executor=value)
    with pytest.raises(TypeError, match=r"tool_executor must be a concurrent\.futures\.Executor"):
        Agent(model=fn.model, stream_fn=fn, tool_executor=value)
    agent = Agent(model=fn.model, stream_fn=fn)
    with pytest.raises(TypeError, match=r"not " + type(value).__name__):
        agent.tool_executor = value
    assert agent.tool_executor is None


def test_an_agent_runs_its_tools_on_the_callers_executor_and_leaves_it_open(
        executor: ThreadPoolExecutor) -> None:
    tool, names = thread_recording_tool()
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"}),
                                                ("read", {"path": "b"})),
                           assistant_text("done"),
                           assistant_tool_calls(("read", {"path": "c"})),
                           assistant_text("done again")])
    agent = Agent(model=fn.model, stream_fn=fn, tools=[tool], tool_executor=executor)
    assert agent.tool_executor is executor
    agent.prompt("first", timeout=10)
    agent.prompt("second", timeout=10)
    assert agent.wait_for_idle(10)
    assert len(names) == 3 and all(n.startswith("caller-pool") for n in names)
    assert not [t for t in threading.enumerate() if t.name.startswith("piagent")]
    assert executor.submit(lambda: "open").result(timeout=5) == "open"
