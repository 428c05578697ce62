"""A blocking ``prompt()`` off the main thread executes the run on the calling thread.

Nothing else needs that thread while it blocks, and no Ctrl-C can reach it, so no worker
thread is started: every event comes from the caller's thread (the run's own thread), the
run can still be aborted and waited for from any other thread, and the caller's
contextvars are seen by hooks and listeners but what they set does not leak back. On the
main thread, with ``timeout=`` or with ``block=False`` the run has its own worker thread,
as before; a waiter off the main thread wakes once, when the run settles.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest

from piagent import AbortSignal, AgentBusyError, AgentEvent, AgentRun
from piagent.agent._record import RunRecord
from piagent.testing import assistant_text, assistant_tool_calls
from tests.conftest import WAIT, Recorder, piagent_threads

from .conftest import GateTool, label, make_agent, non_system, quick_tool

pytestmark = pytest.mark.usefixtures("piagent_threads_back_to_baseline")

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def _on_thread(body: Callable[[], Any], name: str = "view") -> tuple[threading.Thread, list[Any]]:
    """Run ``body`` on a new thread (a request thread); its result or exception lands in
    the returned list."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(body())
        except BaseException as exc:  # handed to the test, which asserts on it
            out.append(exc)

    thread = threading.Thread(target=target, name=name)
    thread.start()
    return thread, out


def test_every_event_comes_from_the_calling_thread_and_no_worker_starts() -> None:
    agent, _ = make_agent([assistant_tool_calls(("noop", {})), assistant_text("done")],
                          tools=[quick_tool()])
    rec = Recorder(agent)
    seen_threads: list[list[str]] = []
    agent.subscribe(lambda event, signal: seen_threads.append(piagent_threads()))

    thread, out = _on_thread(lambda: agent.prompt("go"))
    thread.join(WAIT)
    assert not thread.is_alive()
    run = out[0]
    assert isinstance(run, AgentRun) and run.done and run.text == "done"
    assert {t.name for t in rec.threads} == {"view"}
    # no piagent-run thread at any event (the tool pool is the only piagent thread)
    assert all("piagent-run" not in names for names in seen_threads)
    assert agent.wait_for_idle(WAIT)


def test_on_the_main_thread_or_with_a_timeout_the_run_has_its_own_worker() -> None:
    agent, _ = make_agent([assistant_text("a"), assistant_text("b")])
    rec = Recorder(agent)
    agent.prompt("main")  # pytest runs tests on the main thread
    thread, out = _on_thread(lambda: agent.prompt("with a timeout", timeout=WAIT))
    thread.join(WAIT)
    assert isinstance(out[0], AgentRun) and out[0].text == "b"
    assert {t.name for t in rec.threads} == {"piagent-run"}


def test_abort_and_wait_from_other_threads_while_the_caller_runs_it() -> None:
    gate = GateTool(until_abort=True)
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("never")],
                           tools=[gate.tool])
    thread, out = _on_thread(lambda: agent.prompt("go"))
    assert gate.started("call_1").wait(WAIT)
    run_signal = agent.signal
    assert run_signal is not None and not run_signal.aborted
    with pytest.raises(AgentBusyError):
        agent.prompt("second")
    assert not agent.wait_for_idle(0.01)  # still running: bounded, and it says so
    agent.abort("stop")
    assert agent.wait_for_idle(WAIT)  # returns without joining the caller's thread
    thread.join(WAIT)
    assert not thread.is_alive()
    run = out[0]
    assert run.done and run.signal.aborted
    assert label(non_system(agent.state.messages)[-1]) == ("assistant", "aborted:")
    assert run.error_message == "stop"
    assert fn.call_count == 1


def test_a_waiter_on_another_thread_returns_once_the_run_settles() -> None:
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {"path": "a"})),
                           assistant_text("done")], tools=[gate.tool])
    runs: list[RunRecord] = []  # the active run's record (AgentRun.wait waits on it)
    agent.subscribe(lambda event, signal: runs.append(agent._slot.active) if not runs else None)
    thread, out = _on_thread(lambda: agent.prompt("go"))
    assert gate.started("call_1").wait(WAIT)
    waiter, waited = _on_thread(lambda: runs[0].wait(WAIT), name="waiter")
    gate.release("call_1").set()
    waiter.join(WAIT)
    thread.join(WAIT)
    assert waited == [True]
    assert out[0]._record is runs[0] and out[0].text == "done"


def test_a_listener_that_raises_fails_the_run_on_the_callers_thread() -> None:
    agent, _ = make_agent([assistant_text("a")])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "turn_start":
            raise RuntimeError("listener broke")

    agent.subscribe(listener)
    thread, out = _on_thread(lambda: agent.prompt("go"))
    thread.join(WAIT)
    assert isinstance(out[0], AgentRun)
    assert out[0].error_message == "RuntimeError: listener broke"
    assert not agent.state.is_streaming


def test_hooks_see_the_callers_contextvars_and_their_changes_stay_in_the_run() -> None:
    seen: list[tuple[str, str]] = []
    agent, _ = make_agent([assistant_text("a"), assistant_text("b")])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "agent_start":
            seen.append((threading.current_thread().name, request_id.get()))
            request_id.set("changed by a listener")

    agent.subscribe(listener)

    def view() -> str:
        request_id.set("request-7")
        agent.prompt("here")  # on this thread
        agent.prompt("on a worker", timeout=WAIT)  # on a worker thread
        return request_id.get()

    thread, out = _on_thread(view)
    thread.join(WAIT)
    assert out == ["request-7"]
    assert seen == [("view", "request-7"), ("piagent-run", "request-7")]


def test_the_caller_can_run_several_agents_one_after_another() -> None:
    def view() -> list[str]:
        answers = []
        for n in range(3):
            agent, _ = make_agent([assistant_tool_calls(("noop", {})),
                                   assistant_text(f"answer {n}")], tools=[quick_tool()])
            answers.append(agent.prompt("go").text)
        return answers

    thread, out = _on_thread(view)
    thread.join(WAIT)
    assert out == [["answer 0", "answer 1", "answer 2"]]


class _CountingEvent(threading.Event):
    """A ``threading.Event`` that records the timeout of every ``wait`` (the wake-ups)."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []
        self.waiting = threading.Event()  # set at the first wait

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        self.waiting.set()
        return super().wait(timeout)


def _wait_counting(on_main: bool) -> list[float | None]:
    """The timeouts a waiter passed to the run's settled event: on the main thread or not."""
    counting = _CountingEvent()
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("done")],
                          tools=[gate.tool])
    run = agent.prompt("go", block=False)
    run._record.settled = counting  # before anyone waits: the worker sets it when the run settles
    assert gate.started("call_1").wait(WAIT)

    def release_once_waiting() -> None:
        if counting.waiting.wait(WAIT):
            gate.release("call_1").set()

    helper = threading.Thread(target=release_once_waiting, name="releaser")
    helper.start()
    if on_main:
        assert run.wait(WAIT)
    else:
        waiter, out = _on_thread(lambda: run.wait(WAIT), name="waiter")
        waiter.join(WAIT)
        assert out == [True]
    helper.join(WAIT)
    assert run.text == "done"
    return counting.timeouts


def test_a_wait_off_the_main_thread_sleeps_until_the_run_settles() -> None:
    timeouts = _wait_counting(on_main=False)
    assert len(timeouts) == 1 and timeouts[0] is not None and timeouts[0] > 1.0


def test_a_wait_on_the_main_thread_waits_in_slices_of_50_ms() -> None:
    timeouts = _wait_counting(on_main=True)
    assert timeouts and all(t is not None and t <= 0.05 for t in timeouts)
