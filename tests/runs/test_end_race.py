"""A reader sees ``agent_end`` a moment before the run records its end: a ``start`` of the
same session in that moment waits for the end (bounded) instead of failing as busy."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from piagent import Agent, AgentBusyError
from piagent.runs import LocalRunner
from piagent.sessions import MemoryStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text

WAIT = 10.0  # seconds: the bound on every wait in this file
Tracer = Callable[[FrameType, str, Any], Any]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        with SQLiteStore(tmp_path / "runs.db") as sqlite:
            yield sqlite


@pytest.fixture
def held_end() -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold each new runner thread as it starts recording its run's end (``agent_end`` is
    stored by then) until ``release`` is set; ``reached`` is set when one is held there."""
    reached, release = threading.Event(), threading.Event()

    def on_call(frame: FrameType, event: str, arg: Any) -> Tracer | None:
        if event == "call" and frame.f_code.co_name == "_end" \
                and frame.f_code.co_filename.endswith("_execution.py"):
            reached.set()
            release.wait(WAIT)
        return None

    threading.settrace(on_call)
    try:
        yield reached, release
    finally:
        threading.settrace(None)
        release.set()
        sys.settrace(None)


def make_runner(store: SessionStore) -> LocalRunner:
    fn = ScriptedStreamFn([assistant_text("first"), assistant_text("second")])
    return LocalRunner(store, lambda session_id: Agent(model=fn.model, stream_fn=fn))


def test_a_start_right_after_agent_end_waits_for_the_end(
        store: SessionStore, held_end: tuple[threading.Event, threading.Event]) -> None:
    reached, release = held_end
    runner = make_runner(store)
    first = runner.start("s", "one")
    types = [item.event["type"] for item in runner.events(first, timeout=WAIT) if item]
    assert types[-1] == "agent_end"
    assert reached.wait(WAIT)  # agent_end is stored; the run has not recorded its end yet
    assert runner.status(first).state == "running"

    started: list[str] = []
    failures: list[BaseException] = []

    def start_again() -> None:
        try:
            started.append(runner.start("s", "two"))
        except BaseException as exc:  # reported below
            failures.append(exc)

    thread = threading.Thread(target=start_again)
    thread.start()
    thread.join(0.2)  # it waits for the first run's end rather than refusing at once
    assert thread.is_alive() and not failures
    release.set()
    thread.join(WAIT)
    assert not failures and len(started) == 1
    assert runner.wait(started[0], timeout=WAIT)
    assert runner.status(first).state == "done"
    assert runner.status(started[0]).state == "done"
    assert [m.role for m in store.load("s")] == ["user", "assistant", "user", "assistant"]


def test_a_live_run_before_its_end_is_still_busy(store: SessionStore) -> None:
    gate = threading.Event()

    def slow(context: Any, options: Any) -> Any:
        gate.wait(WAIT)
        return assistant_text("late")

    fn = ScriptedStreamFn([slow])
    runner = LocalRunner(store, lambda session_id: Agent(model=fn.model, stream_fn=fn))
    run_id = runner.start("s", "one")
    with pytest.raises(AgentBusyError, match="already has a live run"):
        runner.start("s", "two")
    gate.set()
    assert runner.wait(run_id, timeout=WAIT)
