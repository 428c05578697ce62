"""The review of durable.md §1–§2 against ``Agent`` with a store: assigning the transcript
during a live run, a store failing on queued input, and ``resume()`` reading the store."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from piagent import (
    AbortSignal,
    AgentBusyError,
    AgentEvent,
    AgentMessage,
    UserMessage,
    messages_to_json,
)
from piagent.sessions import MemoryStore
from piagent.testing import assistant_text, assistant_tool_calls

from ..conftest import WAIT
from .conftest import GateTool, labels, make_agent


class FailOnText(MemoryStore):
    """A store whose ``append`` raises for a user message with the text ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        for message in messages:
            content = getattr(message, "content", None)
            if isinstance(message, UserMessage) and isinstance(content, list) \
                    and any(getattr(b, "text", None) == self.text for b in content):
                msg = "disk full"
                raise OSError(msg)
        super().append(session_id, messages)



def test_assigning_messages_during_a_live_run_is_refused() -> None:
    gate = GateTool()
    store = MemoryStore()
    agent, _ = make_agent([assistant_tool_calls(("read", {"path": "a"}, "c1")),
                           assistant_text("done")], tools=[gate.tool], store=store,
                          session_id="s")
    run = agent.prompt("go", block=False)
    assert gate.started("c1").wait(WAIT)
    before = list(agent.state.messages)
    with pytest.raises(AgentBusyError, match="before replacing the transcript"):
        agent.state.messages = [UserMessage("other")]
    assert agent.state.messages == before
    gate.release("c1").set()
    assert run.wait(WAIT)
    assert messages_to_json(store.load("s")) == messages_to_json(agent.state.messages)
    assert labels(store.load("s"))[-1] == ("assistant", "stop:done")


def test_a_listener_may_assign_messages_on_the_runs_own_thread() -> None:
    store = MemoryStore()
    agent, _ = make_agent([assistant_text("done")], store=store, session_id="s")

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "agent_end":
            agent.state.messages = agent.state.messages[-1:]

    agent.subscribe(listener)
    agent.prompt("go")
    assert agent.state.error_message is None
    assert labels(store.load("s")) == [("assistant", "stop:done")]
