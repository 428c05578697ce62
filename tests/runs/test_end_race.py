"""A run's ``agent_end`` is stored with its final state in one step: a reader that sees it
sees the run ended, and a ``start`` of the same session right after is not busy."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from piagent import Agent, AgentBusyError
from piagent.runs import LocalRunner
from piagent.sessions import SessionStore
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import WAIT, hold_new_threads
from .conftest import DJANGO, SQLALCHEMY, store_fixture

store = store_fixture("memory", "sqlite", "postgres", *SQLALCHEMY, *DJANGO)


@pytest.fixture
def held_end() -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold each new runner thread as it starts recording its run's end (``agent_end`` is
    stored by then) until ``release`` is set; ``reached`` is set when one is held there."""
    with hold_new_threads("_end", file_suffix="_execution.py") as events:
        yield events


def make_runner(store: SessionStore) -> LocalRunner:
    fn = ScriptedStreamFn([assistant_text("first"), assistant_text("second")])
    return LocalRunner(store, lambda session_id: Agent(model=fn.model, stream_fn=fn))


def test_a_reader_that_sees_agent_end_sees_the_run_ended(
        store: SessionStore, held_end: tuple[threading.Event, threading.Event]) -> None:
    """Issue 49 item 6: ``agent_end`` is stored with the run's final state in one step, so
    ``status()`` after a reader saw ``agent_end`` is never ``running``, and the session's
    next ``start()`` is never busy."""
    reached, release = held_end
    runner = make_runner(store)
    first = runner.start("s", "one")
    assert reached.wait(WAIT)  # the run settled; its supervisor is about to record the end
    seen: list[str] = []
    for item in runner.events(first, timeout=0.2):  # every event stored so far, then idle
        if item is None:
            break
        seen.append(item.event["type"])
    assert seen[0] == "agent_start" and "agent_end" not in seen  # not before the end state
    assert runner.status(first).state == "running"

    states: list[str] = []

    def read() -> None:
        for item in runner.events(first, timeout=WAIT):
            if item is not None and item.event["type"] == "agent_end":
                states.append(runner.status(first).state)  # at once, as a polling page does
                return

    reader = threading.Thread(target=read)
    reader.start()
    release.set()
    reader.join(WAIT)
    assert states == ["done"]
    second = runner.start("s", "two")  # not busy: the first run's end is recorded
    assert runner.wait(second, timeout=WAIT)
    assert runner.status(second).state == "done"
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
