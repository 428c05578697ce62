"""The store contract (docs/sessions.md) against ``Agent`` with a store: assigning the transcript
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


def test_a_store_failing_on_a_steering_message_fails_the_run_without_duplicating_it() -> None:
    gate = GateTool()
    store = FailOnText("steer me")
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"}, "c1")),
                            assistant_text("never"), assistant_text("after")],
                           tools=[gate.tool], store=store, session_id="s")
    ends: list[str] = []
    agent.subscribe(lambda e, s: ends.append(e.type))
    run = agent.prompt("go", block=False)
    assert gate.started("c1").wait(WAIT)
    agent.steer("steer me")
    gate.release("c1").set()
    assert run.wait(WAIT)
    assert "failed to store the user message" in (agent.state.error_message or "")
    assert fn.call_count == 1  # nothing after the failed message ran
    assert ends[-1] == "agent_end"
    # the message is in the transcript (it is not lost) and not back in the queue as well
    assert [text for role, text in labels(agent.state.messages)].count("steer me") == 1
    assert not agent.has_queued_messages()
    assert [text for role, text in labels(run.messages)].count("steer me") == 1


def test_a_store_failing_on_a_follow_up_fails_the_run_without_duplicating_it() -> None:
    store = FailOnText("later")
    agent, fn = make_agent([assistant_text("first"), assistant_text("never")], store=store,
                           session_id="s")
    agent.follow_up("later")
    agent.prompt("go")
    assert "failed to store the user message" in (agent.state.error_message or "")
    assert fn.call_count == 1
    assert [text for role, text in labels(agent.state.messages)].count("later") == 1
    assert not agent.has_queued_messages()


def test_a_store_failing_in_resume_fails_the_run() -> None:
    class FailResults(MemoryStore):
        def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
            if any(getattr(m, "role", None) == "toolResult" for m in messages):
                msg = "disk full"
                raise OSError(msg)
            super().append(session_id, messages)

    store = FailResults()
    store.append("s", [UserMessage("go"), assistant_tool_calls(("read", {"path": "a"}, "c1"),
                                                               ("read", {"path": "b"}, "c2"))])
    gate = GateTool()
    gate.release("c1").set()
    gate.release("c2").set()
    agent, fn = make_agent([assistant_text("never")], tools=[gate.tool], store=store,
                           session_id="s")
    events: list[str] = []
    agent.subscribe(lambda e, s: events.append(e.type))
    agent.resume()
    assert "failed to store the toolResult message" in (agent.state.error_message or "")
    assert fn.call_count == 0
    assert events[-1] == "agent_end"


def test_resume_reads_what_another_agent_appended_to_the_store() -> None:
    store = MemoryStore()
    gate = GateTool()
    gate.release("c1").set()
    agent, fn = make_agent([assistant_text("resumed")], tools=[gate.tool], store=store,
                           session_id="s")
    # meanwhile another process (another Agent on the same store) ran and crashed mid-batch
    store.append("s", [UserMessage("elsewhere"),
                       assistant_tool_calls(("read", {"path": "a"}, "c1"))])
    agent.resume()
    assert agent.state.error_message is None
    assert gate.finished("c1").is_set()
    assert labels(store.load("s")) == [
        ("system", ""), ("user", "elsewhere"), ("assistant", "toolUse:call:c1"), ("toolResult", "c1:a:ok"),
        ("assistant", "stop:resumed")]
    assert messages_to_json(store.load("s")) == messages_to_json(agent.state.messages)
