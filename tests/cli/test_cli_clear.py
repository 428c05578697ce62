"""``/clear`` in ``piagent chat`` drops what a stopped run left in the queues."""

from __future__ import annotations

import threading

from piagent import AbortSignal, Agent, UserMessage, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT

from .conftest import after, chat, when_idle


def test_clear_drops_steering_left_by_a_stopped_run() -> None:
    started = threading.Event()

    @tool
    def wait_forever(signal: AbortSignal) -> str:
        """Wait until aborted."""
        started.set()
        signal.wait(WAIT)
        return "stopped"

    scripted = ScriptedStreamFn([assistant_tool_calls(("wait_forever", {})),
                                 assistant_text("fresh answer")])
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[wait_forever])

    code, text = chat(agent, [
        "go", after(started, "only the old thing"), KeyboardInterrupt(),
        when_idle(agent, "/clear"), "new question", when_idle(agent, "/quit")])
    assert code == 0
    assert "(queued messages will go with your next message; /clear drops them)" in text
    assert "(dropped 1 queued message)" in text
    assert "assistant> fresh answer" in text
    sent = [m.text for m in scripted.calls[-1].context.messages if isinstance(m, UserMessage)]
    assert sent == ["go", "new question"]  # the stopped run's steering did not ride along
