"""``prompt()``/``continue_()`` on a transcript a stopped process left mid-batch (calls marked
started, no results): one ``UserWarning`` at the caller pointing to ``resume()``, and the
abandoned calls' start marks are dropped once the new run's first reply is stored."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from piagent import (
    AgentTool,
    TextContent,
    ToolResultMessage,
    UserMessage,
    create_initial_system_message,
    to_tool_declaration,
)
from piagent.sessions import MemoryStore, SessionStore, SQLiteStore
from piagent.testing import assistant_text, assistant_tool_calls
from tests.tools.conftest import NO_PARAMS, make_tool

from .conftest import make_agent

WARNING = ("prompt(): the transcript ends in a tool batch that a stopped process left "
           "unfinished: 1 tool call marked started ('pay' (c1)) never got a result. prompt() "
           "goes on without them (the model sees them unanswered) and they cannot be resumed "
           "afterwards; call agent.resume() instead to finish them (docs/sessions.md).")


def left_mid_batch(store: SessionStore, tool: AgentTool, *, started: bool = True) -> None:
    """A session whose process stopped while ``tool``'s call ``c1`` ran (``c2`` answered)."""
    system = create_initial_system_message("", [to_tool_declaration(tool)])
    assert system is not None
    store.append("s", [system, UserMessage("pay twice"),
                       assistant_tool_calls((tool.name, {}, "c1"), (tool.name, {}, "c2")),
                       ToolResultMessage(tool_call_id="c2", tool_name=tool.name,
                                         content=[TextContent("paid")])])
    if started:
        store.mark_started("s", "c1")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_prompt_after_a_stopped_batch_warns_once_and_drops_the_marks(kind: str,
                                                                     tmp_path: Path) -> None:
    store: SessionStore = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    pay = make_tool("pay", parameters=NO_PARAMS)
    left_mid_batch(store, pay)
    agent, _ = make_agent([assistant_text("something else"), assistant_text("again")],
                          tools=[pay], store=store, session_id="s")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = agent.prompt("forget it, what time is it?")
    assert [str(w.message) for w in caught] == [WARNING]
    assert caught[0].category is UserWarning
    assert caught[0].filename == __file__  # said at the caller's line
    assert run.text == "something else"
    assert store.started("s") == set()  # resume() could never finish them now
    assert len(store.load("s")) == 6  # the stored transcript is whole
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert agent.prompt("and now?").text == "again"
    assert caught == []  # once: the batch is no longer the last


def test_continue_after_a_stopped_batch_warns_and_names_continue() -> None:
    store = MemoryStore()
    pay = make_tool("pay", parameters=NO_PARAMS)
    left_mid_batch(store, pay)
    agent, _ = make_agent([assistant_text("steered")], tools=[pay], store=store,
                          session_id="s")
    agent.steer("never mind")
    with pytest.warns(UserWarning) as caught:
        assert agent.continue_().text == "steered"
    assert [str(w.message) for w in caught] == [WARNING.replace("prompt()", "continue_()")]
    assert store.started("s") == set()


def test_no_warning_for_resume_for_calls_never_started_or_without_a_store() -> None:
    pay = make_tool("pay", parameters=NO_PARAMS)
    store = MemoryStore()
    left_mid_batch(store, pay, started=False)  # stopped before execute: nothing to warn about
    agent, _ = make_agent([assistant_text("ok")], tools=[pay], store=store, session_id="s")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent.prompt("hello")

    store = MemoryStore()
    left_mid_batch(store, pay)
    agent, _ = make_agent([assistant_text("finished")], tools=[pay], store=store,
                          session_id="s")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert agent.resume().text == "finished"  # what the warning points to: no warning

    plain, _ = make_agent([assistant_text("ok")], tools=[pay], messages=store.load("s")[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plain.prompt("hello").text == "ok"  # no store, no marks: nothing to say
