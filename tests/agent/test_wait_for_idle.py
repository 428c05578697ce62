"""``wait_for_idle()`` returns once the run's worker thread has ended, not merely once the
run has settled (the run is no longer active a few instructions before its thread exits)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from piagent import Agent
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT

Tracer = Callable[[FrameType, str, Any], Any]


@pytest.fixture
def held_worker_exit() -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold each new piagent-run thread as its worker function returns (after the run has
    settled) until ``release`` is set; ``reached`` is set when a thread is held there."""
    reached, release = threading.Event(), threading.Event()

    def on_call(frame: FrameType, event: str, arg: Any) -> Tracer | None:
        if event == "call" and frame.f_code.co_name == "run_worker":
            def on_line(frame: FrameType, event: str, arg: Any) -> Tracer:
                if event == "return":
                    reached.set()
                    release.wait(WAIT)
                return on_line
            return on_line
        return None

    threading.settrace(on_call)
    try:
        yield reached, release
    finally:
        threading.settrace(None)
        release.set()
        sys.settrace(None)


def test_wait_for_idle_waits_for_the_worker_thread(
        held_worker_exit: tuple[threading.Event, threading.Event]) -> None:
    reached, release = held_worker_exit
    scripted = ScriptedStreamFn([assistant_text("ok")])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    agent.prompt("hi", block=False)
    assert reached.wait(WAIT)  # the run has settled; its thread is held just before exiting
    assert not agent.state.is_streaming
    worker = next(t for t in threading.enumerate() if t.name == "piagent-run")
    assert agent.wait_for_idle(0.05) is False  # the worker is still alive: not idle yet
    release.set()
    assert agent.wait_for_idle(WAIT) is True
    assert not worker.is_alive()
