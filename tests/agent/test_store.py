"""``Agent(store=..., session_id=...)`` and ``attach_store``: the transcript lives in a store.

Every message is stored at its ``message_end`` before any listener sees it, the tool calls
of an assistant message are durable before any of them runs, ``reset()`` and assigning
``state.messages`` replace the stored transcript, and a store that raises fails the run the
way a raising listener does (docs/sessions.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from piagent import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentEvent,
    AgentMessage,
    AgentToolResult,
    AssistantMessage,
    SystemMessage,
    TextContent,
    UserMessage,
    messages_to_json,
)
from piagent.sessions import MemoryStore, SessionStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import WAIT, store_of
from ..tools.conftest import NO_PARAMS, make_tool
from .conftest import GateTool, labels, make_agent


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    """Each store the package has (PostgreSQL skips with its reason when unreachable)."""
    with store_of(request.param, tmp_path) as opened:
        yield opened


def same(a: Sequence[AgentMessage], b: Sequence[AgentMessage]) -> bool:
    return messages_to_json(list(a)) == messages_to_json(list(b))


class FailingStore(MemoryStore):
    """A store whose ``append`` raises from the ``fail_at``-th call on (a full disk, say)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.appends = 0

    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        self.appends += 1
        if self.appends >= self.fail_at:
            msg = "disk full"
            raise OSError(msg)
        super().append(session_id, messages)


def test_a_new_session_stores_the_system_message_then_every_message(store: SessionStore) -> None:
    tool = make_tool("read", parameters=NO_PARAMS)
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("done")],
                          system_prompt="Be brief.", tools=[tool], store=store,
                          session_id="user-42")
    stored = store.load("user-42")
    assert len(stored) == 1 and isinstance(stored[0], SystemMessage)
    assert stored[0].content == "Be brief."
    assert agent.store is store and agent.session_id == "user-42"

    agent.prompt("hi")
    assert [m.role for m in store.load("user-42")] == [
        "system", "user", "assistant", "toolResult", "assistant"]
    assert same(store.load("user-42"), agent.state.messages)


def test_a_stored_session_is_loaded_and_continued(store: SessionStore) -> None:
    first, _ = make_agent([assistant_text("one")], system_prompt="S", store=store,
                          session_id="s")
    first.prompt("a")
    second, fn = make_agent([assistant_text("two")], system_prompt="ignored", store=store,
                            session_id="s")
    assert same(second.state.messages, first.state.messages)
    assert second.state.system_prompt == "S"
    second.prompt("b")
    # the model saw the whole stored conversation
    assert [m.role for m in fn.calls[0].context.messages] == [
        "system", "user", "assistant", "user"]
    assert labels(store.load("s")[1:]) == [
        ("user", "a"), ("assistant", "stop:one"), ("user", "b"), ("assistant", "stop:two")]


def test_every_message_is_stored_before_a_listener_sees_its_end(store: SessionStore) -> None:
    tool = make_tool("read", parameters=NO_PARAMS)
    agent, _ = make_agent([assistant_tool_calls(("read", {}), ("read", {})),
                           assistant_text("done")], tools=[tool], store=store, session_id="s")
    seen: list[tuple[str, bool]] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_end":
            stored = store.load("s")
            seen.append((event.message.role, same(stored[-1:], [event.message])))

    agent.subscribe(listener)
    agent.prompt("hi")
    assert seen == [("user", True), ("assistant", True), ("toolResult", True),
                    ("toolResult", True), ("assistant", True)]


def test_tool_calls_are_durable_before_any_tool_runs(store: SessionStore) -> None:
    seen: list[list[str]] = []

    def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any
                ) -> AgentToolResult:
        last = store.load("s")[-1]
        assert isinstance(last, AssistantMessage)
        seen.append([c.id for c in last.tool_calls])
        return AgentToolResult(content=[TextContent("ok")])

    tool = make_tool("read", execute, parameters=NO_PARAMS)
    agent, _ = make_agent([assistant_tool_calls(("read", {}), ("read", {})),
                           assistant_text("done")], tools=[tool], store=store, session_id="s")
    agent.prompt("hi")
    assert seen == [["call_1", "call_2"], ["call_1", "call_2"]]


def test_reset_and_assigning_messages_replace_the_stored_transcript(store: SessionStore) -> None:
    agent, _ = make_agent([assistant_text("one")], system_prompt="S", store=store,
                          session_id="s")
    agent.prompt("a")
    assert len(store.load("s")) == 3
    agent.reset()
    assert labels(store.load("s")) == [("system", "S")]
    agent.state.messages = [*agent.state.messages, UserMessage("restored")]
    assert labels(store.load("s")) == [("system", "S"), ("user", "restored")]
    assert same(store.load("s"), agent.state.messages)


def test_an_in_place_change_is_caught_at_the_next_stored_message(store: SessionStore) -> None:
    agent, _ = make_agent([assistant_text("one")], store=store, session_id="s")
    agent.state.messages.append(UserMessage("typed in place"))
    agent.prompt("a")
    assert labels(store.load("s")) == [("user", "typed in place"), ("user", "a"),
                                       ("assistant", "stop:one")]


def test_attach_store_loads_a_stored_session(store: SessionStore) -> None:
    store.append("s", [UserMessage("earlier"), assistant_text("reply")])
    agent, fn = make_agent([assistant_text("next")], system_prompt="S")
    agent.attach_store(store, "s")
    assert labels(agent.state.messages) == [("user", "earlier"), ("assistant", "stop:reply")]
    assert agent.session_id == "s"
    agent.prompt("again")
    assert fn.calls[0].options.session_id == "s"  # also the provider's session id
    assert labels(store.load("s"))[2:] == [("user", "again"), ("assistant", "stop:next")]


def test_attach_store_to_an_empty_session_stores_the_current_messages(
        store: SessionStore) -> None:
    agent, _ = make_agent([assistant_text("ok")], system_prompt="S")
    agent.attach_store(store, "fresh")
    assert labels(store.load("fresh")) == [("system", "S")]
    agent.prompt("x")
    assert same(store.load("fresh"), agent.state.messages)


def test_attach_store_is_refused_while_a_run_is_live(store: SessionStore) -> None:
    gate = GateTool("read")
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("done")],
                          tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    with pytest.raises(AgentBusyError, match="attaching a store"):
        agent.attach_store(store, "s")
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert store.load("s") == []


def test_wrong_store_arguments_are_refused_at_once(store: SessionStore) -> None:
    fn = ScriptedStreamFn()
    with pytest.raises(TypeError, match="store must be a SessionStore"):
        Agent(stream_fn=fn, store=object(), session_id="s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a session_id"):
        Agent(stream_fn=fn, store=store)
    with pytest.raises(ValueError, match="non-empty str of at most 200"):
        Agent(stream_fn=fn, store=store, session_id="")
    with pytest.raises(ValueError, match="non-empty str of at most 200"):
        Agent(stream_fn=fn).attach_store(store, 42)  # type: ignore[arg-type]
    store.append("busy", [UserMessage("x")])
    with pytest.raises(ValueError, match="pass messages= or a stored session, not both"):
        Agent(stream_fn=fn, store=store, session_id="busy", messages=[UserMessage("y")])
    # a session id without a store is pi's provider session id, as before
    assert Agent(stream_fn=fn, session_id="provider-only").store is None


def test_a_raising_store_fails_the_run_like_a_raising_listener() -> None:
    store = FailingStore(fail_at=3)  # system (replace), user ok, the assistant's append fails
    executed = threading.Event()

    def execute(*args: Any) -> AgentToolResult:
        executed.set()
        return AgentToolResult(content=[TextContent("ok")])

    tool = make_tool("read", execute, parameters=NO_PARAMS)
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("done")],
                           tools=[tool], store=store, session_id="s")
    events: list[AgentEvent] = []
    ends_seen: list[str] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        events.append(event)
        if event.type == "message_end":
            ends_seen.append(event.message.role)

    agent.subscribe(listener)
    agent.prompt("hi")  # appends: user (1), assistant (2) ok; first toolResult (3) fails
    assert executed.is_set()  # the tool ran: its call was durable
    assert events[-1].type == "agent_end"
    error = agent.state.error_message or ""
    assert "session store FailingStore failed to store the toolResult message" in error
    assert "OSError: disk full" in error
    # nothing after the failed message ran: no second model request
    assert fn.call_count == 1
    # listeners never saw the message the store did not keep
    assert ends_seen == ["user", "assistant", "assistant"]
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "error"


def test_a_store_failing_on_the_assistant_message_runs_no_tool() -> None:
    store = FailingStore(fail_at=2)  # the user message is stored, the assistant's is not
    executed = threading.Event()

    def execute(*args: Any) -> AgentToolResult:
        executed.set()
        return AgentToolResult(content=[TextContent("ok")])

    tool = make_tool("read", execute, parameters=NO_PARAMS)
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("done")],
                           tools=[tool], store=store, session_id="s")
    events: list[str] = []
    agent.subscribe(lambda event, signal: events.append(event.type))
    agent.prompt("hi")
    assert not executed.is_set()
    assert "tool_execution_start" not in events
    assert events[-1] == "agent_end"
    assert "failed to store the assistant message" in (agent.state.error_message or "")
    assert fn.call_count == 1


def test_a_store_that_recovers_gets_the_whole_transcript_again() -> None:
    store = FailingStore(fail_at=2)
    agent, _ = make_agent([assistant_text("lost"), assistant_text("kept")], store=store,
                          session_id="s")
    agent.prompt("one")
    assert agent.state.error_message is not None
    store.fail_at = 10**9  # the disk has room again
    agent.prompt("two")
    assert agent.state.error_message is None
    assert same(store.load("s"), agent.state.messages)
    assert labels(store.load("s")) == [
        ("user", "one"), ("assistant", "stop:lost"), ("assistant", "error:"),
        ("user", "two"), ("assistant", "stop:kept")]


def test_given_messages_start_an_empty_session(store: SessionStore) -> None:
    agent, _ = make_agent([assistant_text("ok")], system_prompt="S",
                          messages=[UserMessage("imported"), assistant_text("earlier")],
                          store=store, session_id="new")
    assert labels(store.load("new")) == [
        ("system", "S"), ("user", "imported"), ("assistant", "stop:earlier")]
    agent.prompt("next")
    assert same(store.load("new"), agent.state.messages)
