"""An ``Agent`` holds no reference cycle: dropped, it goes at once with its transcript.

A web view makes an ``Agent`` per request. Were the Agent part of a cycle, it, its
transcript and the provider caches kept for that transcript would stay until the cyclic
collector found them, by then in an old generation (a full collection), so every request's
objects would pile up between collections.
"""

from __future__ import annotations

import threading
import weakref

import pytest

from piagent.testing import assistant_text, assistant_tool_calls
from tests.conftest import WAIT

from .conftest import make_agent, quick_tool


def _run_and_drop() -> tuple[weakref.ref[object], weakref.ref[object]]:
    agent, fn = make_agent([assistant_tool_calls(("noop", {}), ("noop", {})),
                            assistant_text("done")], tools=[quick_tool()], system_prompt="S")
    run = agent.prompt("go")
    assert run.text == "done" and len(run.messages) == 5  # a parallel batch ran on the pool
    return weakref.ref(agent), weakref.ref(agent.state.messages[0])


@pytest.mark.usefixtures("no_gc")
def test_an_agent_run_on_the_main_thread_is_freed_when_dropped() -> None:
    agent, first = _run_and_drop()  # a piagent-run worker thread, a tool pool
    assert agent() is None
    assert first() is None  # its transcript too


@pytest.mark.usefixtures("no_gc")
def test_an_agent_run_on_a_request_thread_is_freed_when_dropped() -> None:
    refs: list[weakref.ref[object]] = []
    thread = threading.Thread(target=lambda: refs.extend(_run_and_drop()))  # runs right there
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive() and len(refs) == 2
    assert refs[0]() is None and refs[1]() is None
