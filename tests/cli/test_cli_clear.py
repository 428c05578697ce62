"""``/clear`` in ``piagent chat`` drops what a stopped run left in the queues."""

from __future__ import annotations

import threading

from piagent import Agent, UserMessage
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from .conftest import after, chat, wait_forever_tool, when_idle


def test_clear_drops_steering_left_by_a_stopped_run() -> None:
    started = threading.Event()
    wait_forever = wait_forever_tool(started)
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
