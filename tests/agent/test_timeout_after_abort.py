"""``prompt(timeout=...)`` when the part that is running ignores the abort: the wait after
the abort is bounded, and the ``TimeoutError`` names the part that did not stop."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from piagent import AbortSignal, Agent, AgentToolResult
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT
from tests.tools.conftest import NO_PARAMS, make_tool, ok

AFTER_ABORT_WAIT_S = 5.0  # docs/errors.md: how long prompt(timeout=...) waits after its abort


def test_a_stream_function_that_ignores_the_abort() -> None:
    release = threading.Event()
    scripted = ScriptedStreamFn([assistant_text("late")])

    def stuck(model: Any, context: Any, options: Any) -> Any:
        release.wait(AFTER_ABORT_WAIT_S + 4 * WAIT)  # ignores options.signal
        return scripted(model, context, options)

    agent = Agent(model=scripted.model, stream_fn=stuck)
    with pytest.raises(TimeoutError) as caught:
        agent.prompt("hi", timeout=0.2)
    text = str(caught.value)
    assert "did not finish within 0.2 seconds, so it was aborted" in text
    assert (f"the stream function (the model call) has not stopped {AFTER_ABORT_WAIT_S:g} s "
            "after the abort") in text
    assert agent.state.is_streaming  # still busy, as the message says
    release.set()
    assert agent.wait_for_idle(WAIT)


def test_a_tool_that_ignores_the_abort() -> None:
    release, started = threading.Event(), threading.Event()

    def execute(call_id: str, params: Any, signal: AbortSignal,
                on_update: Any) -> AgentToolResult:
        started.set()
        release.wait(AFTER_ABORT_WAIT_S + 4 * WAIT)  # ignores signal
        return ok("done")

    scripted = ScriptedStreamFn([assistant_tool_calls(("slow", {})), assistant_text("end")])
    agent = Agent(model=scripted.model, stream_fn=scripted,
                  tools=[make_tool("slow", execute, parameters=NO_PARAMS)])
    with pytest.raises(TimeoutError, match=r"but tool 'slow' has not stopped"):
        agent.prompt("hi", timeout=3.0)
    assert started.is_set()
    release.set()
    assert agent.wait_for_idle(WAIT)
