"""Tool timeouts (``AgentTool.timeout``, ``@tool(timeout=)``, ``Agent(tool_timeout=)``): a
call past its time is answered with an error result naming the limit, its signal is
aborted, the batch and the run go on, and its thread, which Python cannot stop, is left
running: it holds neither ``wait()``, ``abort()``, the run's pool nor the interpreter's exit.
Every stuck tool here waits on an Event the test releases at teardown."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from piagent import AbortSignal, Agent, AgentTool, AgentToolResult, tool
from piagent.testing import assistant_text, assistant_tool_calls
from tests.conftest import WAIT, join_piagent_threads
from tests.tools.conftest import NO_PARAMS, make_tool, ok

from .conftest import make_agent

REPO = Path(__file__).resolve().parents[2]
LIMIT = 0.2  # seconds: the limit of the stuck tools


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown: every stuck tool returns, and its thread is joined."""
    gate = threading.Event()
    yield gate
    gate.set()
    assert join_piagent_threads() == []


def stuck(gate: threading.Event, name: str = "stuck", **kwargs: Any) -> AgentTool:
    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        gate.wait(60)  # ignores its signal
        return ok("stuck returned")
    return make_tool(name, execute, parameters=NO_PARAMS, **kwargs)


def quick(name: str) -> AgentTool:
    return make_tool(name, lambda *args: ok(f"{name} done"), parameters=NO_PARAMS)


def timed_out(name: str, seconds: float = LIMIT) -> str:
    return f"Tool {name!r} timed out after {seconds:g} s; it was abandoned and its result " \
           f"will not be used."


def results(run: Any) -> list[tuple[str, str, bool]]:
    return [(m.tool_name, m.content[0].text, m.is_error) for m in run.messages
            if m.role == "toolResult"]


def test_the_limits_are_checked_at_the_call_naming_the_parameter() -> None:
    with pytest.raises(ValueError, match=r"AgentTool 'x': timeout must be a positive number"):
        make_tool("x", timeout=0)
    with pytest.raises(TypeError, match=r"AgentTool 'x': timeout must be .* not str"):
        make_tool("x", timeout="5")
    with pytest.raises(TypeError, match=r"@tool\(timeout=\.\.\.\) must be .* not bool"):
        tool(timeout=True)
    with pytest.raises(ValueError, match=r"tool_timeout must be a positive number .* -1"):
        Agent(tool_timeout=-1)
    with pytest.raises(ValueError, match=r"tool_timeout must be a positive number .* inf"):
        Agent(tool_timeout=float("inf"))

    @tool(timeout=3)
    def limited() -> str:
        """Has a limit."""
        return ""

    assert limited.timeout == 3.0 and make_tool("y").timeout is None


def test_a_blocking_tool_times_out_and_the_run_goes_on(release: threading.Event,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    agent, _ = make_agent([assistant_tool_calls(("stuck", {})), assistant_text("after"),
                           assistant_text("next turn")],
                          tools=[stuck(release)], tool_timeout=LIMIT)
    with caplog.at_level(logging.WARNING, "piagent.loop"):
        run = agent.prompt("go", timeout=WAIT)
    assert results(run) == [("stuck", timed_out("stuck"), True)]
    assert run.text == "after" and run.abandoned_tool_calls == 1
    end = next(e for e in run.events() if e.type == "tool_execution_end")
    assert end.is_error and end.result.details == {"timed_out_after_s": LIMIT}
    assert end.duration_ms is not None and end.duration_ms >= LIMIT * 1000 - 1
    warnings = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert len(warnings) == 1 and "abandoned" in warnings[0]
    assert agent.prompt("again", timeout=WAIT).text == "next turn"  # the agent is free


def test_the_tools_own_limit_wins_over_the_agents(release: threading.Event) -> None:
    def slowish(*args: Any) -> AgentToolResult:
        threading.Event().wait(LIMIT * 2)  # longer than the agent's limit, within its own
        return ok("finished")

    agent, _ = make_agent([assistant_tool_calls(("slowish", {}), ("stuck", {})),
                           assistant_text("after")],
                          tools=[make_tool("slowish", slowish, parameters=NO_PARAMS,
                                           timeout=WAIT),
                                 stuck(release, timeout=LIMIT / 2)],
                          tool_timeout=LIMIT)
    run = agent.prompt("go", timeout=WAIT)
    assert results(run) == [("slowish", "finished", False),
                            ("stuck", timed_out("stuck", LIMIT / 2), True)]


def test_the_signal_of_a_call_that_timed_out_is_aborted(release: threading.Event) -> None:
    reasons: list[object] = []
    run_signal: list[bool] = []

    def polite(tool_call_id: str, params: Any, signal: AbortSignal,
               on_update: Callable[[Any], None]) -> AgentToolResult:
        signal.wait(WAIT)
        reasons.append(signal.reason)
        return ok("stopped")

    agent, _ = make_agent([assistant_tool_calls(("polite", {})), assistant_text("after")],
                          tools=[make_tool("polite", polite, parameters=NO_PARAMS,
                                           timeout=LIMIT)])
    run = agent.prompt("go", timeout=WAIT)
    run_signal.append(run.signal.aborted)
    assert join_piagent_threads() == []
    assert results(run) == [("polite", timed_out("polite"), True)]
    assert run_signal == [False]  # the run's own signal: untouched
    assert len(reasons) == 1 and isinstance(reasons[0], TimeoutError)
    assert str(reasons[0]) == timed_out("polite")


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_the_other_calls_of_the_batch_keep_their_results_in_source_order(
        mode: str, release: threading.Event) -> None:
    agent, _ = make_agent([assistant_tool_calls(("a", {}), ("stuck", {}), ("b", {})),
                           assistant_text("after")],
                          tools=[quick("a"), stuck(release), quick("b")], tool_timeout=LIMIT,
                          tool_execution=mode)
    run = agent.prompt("go", timeout=WAIT)
    assert results(run) == [("a", "a done", False), ("stuck", timed_out("stuck"), True),
                            ("b", "b done", False)]
    starts = [e.tool_name for e in run.events() if e.type == "tool_execution_start"]
    assert starts == ["a", "stuck", "b"]
    assert run.text == "after" and run.abandoned_tool_calls == 1


def test_abort_does_not_wait_past_the_limit(release: threading.Event) -> None:
    entered = threading.Event()

    def deaf(*args: Any) -> AgentToolResult:
        entered.set()
        release.wait(60)
        return ok("late")

    agent, _ = make_agent([assistant_tool_calls(("deaf", {})), assistant_text("never")],
                          tools=[make_tool("deaf", deaf, parameters=NO_PARAMS)],
                          tool_timeout=LIMIT)
    run = agent.prompt("go", block=False)
    assert entered.wait(WAIT)
    run.abort()
    assert run.wait(WAIT)  # the tool still runs: the run ended at the limit
    assert not release.is_set() and agent.wait_for_idle(WAIT)
    assert [text for _, text, _ in results(run)] in ([timed_out("deaf")],
                                                     ["Operation aborted"])


def test_a_call_past_its_limit_during_an_abort_is_answered_as_aborted(
        release: threading.Event) -> None:
    """As pi-agent-core 1.6 answers every call of an aborted run: "Operation aborted", not
    the timeout text (the call outlived its limit only because the run was stopping)."""
    agent: Agent

    def deaf(*args: Any) -> AgentToolResult:
        agent.abort()  # the run is aborted while the call runs, well before its limit
        release.wait(60)  # ignores its signal: still running at the limit
        return ok("late")

    agent, _ = make_agent([assistant_tool_calls(("deaf", {}), ("quick", {})),
                           assistant_text("never")],
                          tools=[make_tool("deaf", deaf, parameters=NO_PARAMS),
                                 quick("quick")],
                          tool_timeout=LIMIT * 3, tool_execution="sequential")
    run = agent.prompt("go", block=False)
    assert run.wait(WAIT)
    assert not release.is_set() and agent.wait_for_idle(WAIT)
    assert results(run) == [("deaf", "Operation aborted", True),
                            ("quick", "Operation aborted", True)]
    end = next(e for e in run.events() if e.type == "tool_execution_end")
    assert end.is_error and "timed_out_after_s" not in (end.result.details or {})
    assert end.duration_ms is not None and end.duration_ms >= LIMIT * 3000 - 1


def test_a_callers_executor_answers_the_call_and_keeps_its_thread(
        release: threading.Event) -> None:
    pool = ThreadPoolExecutor(2, thread_name_prefix="callers")
    try:
        agent, _ = make_agent([assistant_tool_calls(("stuck", {}), ("a", {})),
                               assistant_text("after")],
                              tools=[stuck(release, timeout=LIMIT), quick("a")],
                              tool_executor=pool)
        run = agent.prompt("go", timeout=WAIT)
        assert results(run) == [("stuck", timed_out("stuck"), True), ("a", "a done", False)]
        assert any(t.name.startswith("callers") for t in threading.enumerate())
    finally:
        release.set()
        pool.shutdown(wait=True)


def test_without_a_limit_no_thread_is_made_beyond_the_pool() -> None:
    names: list[str] = []

    def record(*args: Any) -> AgentToolResult:
        names.append(threading.current_thread().name)
        return ok("x")

    agent, _ = make_agent([assistant_tool_calls(("r", {})), assistant_text("done")],
                          tools=[make_tool("r", record, parameters=NO_PARAMS)])
    agent.prompt("go", timeout=WAIT)
    assert names[0].startswith("piagent-tool_")


CHILD = r"""
import sys, threading
from piagent import Agent, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

@tool(timeout=0.2)
def forever() -> str:
    "Never returns."
    threading.Event().wait()
    return "never"

@tool
def fine() -> str:
    "Returns."
    return "fine"

scripted = ScriptedStreamFn([assistant_tool_calls(("forever", {}), ("fine", {})),
                             assistant_text("after")])
agent = Agent(model=scripted.model, tools=[forever, fine], stream_fn=scripted)
run = agent.prompt("go", block=False)
print(run.wait(10), run.text, run.abandoned_tool_calls, flush=True)
print([m.content[0].text for m in run.messages if m.role == "toolResult"], flush=True)
"""


def test_a_process_with_a_tool_that_never_returns_exits() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=WAIT * 2, env=env, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "True after 1"
    assert lines[1] == repr([timed_out("forever"), "fine"])


def test_the_runs_abort_reaches_a_timed_call_with_its_reason() -> None:
    entered = threading.Event()
    reasons: list[object] = []

    def polite(tool_call_id: str, params: Any, signal: AbortSignal,
               on_update: Callable[[Any], None]) -> AgentToolResult:
        entered.set()
        signal.wait(WAIT)
        reasons.append(signal.reason)
        return ok("stopped")

    agent, _ = make_agent([assistant_tool_calls(("polite", {})), assistant_text("never")],
                          tools=[make_tool("polite", polite, parameters=NO_PARAMS,
                                           timeout=WAIT * 3)])
    run = agent.prompt("go", block=False)
    assert entered.wait(WAIT)
    run.abort("user pressed stop")
    assert run.wait(WAIT)
    assert reasons == ["user pressed stop"] and run.abandoned_tool_calls == 0
    assert join_piagent_threads() == []
