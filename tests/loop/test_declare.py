"""ToolDeclarations.declare: the transcript's declared tools always replay to ``context.tools``."""

from __future__ import annotations

from typing import Any

import pytest

from piagent import (
    AgentContext,
    AgentLoopTurnUpdate,
    AgentTool,
    SystemMessage,
    UserMessage,
    get_current_tools,
    run_agent_loop,
)
from piagent.loop._declare import ToolDeclarations
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.transcript import to_tool_declaration
from tests.tools.conftest import NO_PARAMS, make_tool

from .conftest import make_config

pytestmark = pytest.mark.usefixtures("no_thread_leak")


def head(*tools: AgentTool) -> SystemMessage:
    return SystemMessage("base", tools_added=[to_tool_declaration(t) for t in tools],
                         timestamp=0)


def names(declarations: list[Any] | None) -> list[str]:
    return [d.name for d in declarations or []]


def replayed(messages: list[Any]) -> list[str]:
    return names(get_current_tools(messages))


def _declare(messages: list[Any], tools: list[Any], pending: list[Any]) -> list[Any]:
    """The whole transcript replayed: a fresh run's declarations."""
    return ToolDeclarations().declare(messages, tools, pending)


A, B, C, D, E = (make_tool(n, parameters=NO_PARAMS) for n in "abcde")


# --- no pending system message: a new one before the first non-system message -----------


def test_nothing_changed_returns_the_pending_list_itself() -> None:
    pending: list[Any] = [UserMessage("hi")]
    assert _declare([head(A, B)], [A, B], pending) is pending
    empty: list[Any] = []
    assert _declare([head(A)], [A], empty) is empty


def test_a_new_system_message_goes_before_the_pending_messages() -> None:
    first, second = UserMessage("1"), UserMessage("2")
    out = _declare([head(A)], [A, B], [first, second])
    assert len(out) == 3 and out[1] is first and out[2] is second
    update = out[0]
    assert isinstance(update, SystemMessage)
    assert update.content == "" and update.sections is None
    assert names(update.tools_added) == ["b"] and update.tools_removed is None
    assert isinstance(update.timestamp, int) and update.timestamp > 0


def test_with_nothing_pending_the_update_is_the_only_message() -> None:
    out = _declare([head(A, B)], [A], [])
    assert len(out) == 1 and out[0].tools_removed == ["b"]  # type: ignore[union-attr]
    assert out[0].tools_added is None  # type: ignore[union-attr]


def test_an_empty_transcript_declares_every_tool() -> None:
    out = _declare([], [A, B], [UserMessage("hi")])
    assert names(out[0].tools_added) == ["a", "b"]  # type: ignore[union-attr]


def test_a_redefined_tool_is_removed_and_added() -> None:
    changed = make_tool("a", description="A better description", parameters=NO_PARAMS)
    out = _declare([head(A, B)], [changed, B], [])
    update = out[0]
    assert update.tools_removed == ["a"]  # type: ignore[union-attr]
    assert update.tools_added == [to_tool_declaration(changed)]  # type: ignore[union-attr]
    assert replayed([head(A, B), *out]) == ["b", "a"]


def test_added_follow_the_executable_order_and_removed_the_declared_order() -> None:
    out = _declare([head(A, B, C)], [E, D, B], [])
    update = out[0]
    assert names(update.tools_added) == ["e", "d"]  # type: ignore[union-attr]
    assert update.tools_removed == ["a", "c"]  # type: ignore[union-attr]


def test_later_system_messages_in_the_transcript_count() -> None:
    transcript = [head(A, B), UserMessage("x"), SystemMessage(tools_removed=["b"])]
    out = _declare(transcript, [A, B], [])
    assert names(out[0].tools_added) == ["b"]  # type: ignore[union-attr]
    assert _declare(transcript, [A], []) == []


# --- a pending system message: its tool fields are intent, rewritten to the real delta ------


def test_a_pending_system_messages_tool_fields_are_rewritten() -> None:
    user = UserMessage("hi")
    wish = SystemMessage("more rules", sections={"s": "1"},
                         tools_added=[to_tool_declaration(E)], tools_removed=["a"], timestamp=7)
    pending: list[Any] = [user, wish]
    out = _declare([head(A)], [A, B], pending)
    assert len(out) == 2 and out[0] is user
    rewritten = out[1]
    assert isinstance(rewritten, SystemMessage) and rewritten is not wish
    assert (rewritten.content, rewritten.sections, rewritten.timestamp) == (
        "more rules", {"s": "1"}, 7)
    assert names(rewritten.tools_added) == ["b"] and rewritten.tools_removed is None
    assert names(wish.tools_added) == ["e"]  # the caller's message is not changed
    assert replayed([head(A), *out]) == ["a", "b"]


def test_a_pending_system_message_asking_for_nothing_real_loses_its_tool_fields() -> None:
    wish = SystemMessage("x", tools_added=[to_tool_declaration(A)], timestamp=3)
    out = _declare([head(A)], [A], [wish])
    assert out[0] is not wish
    assert out[0].tools_added is None and out[0].tools_removed is None  # type: ignore[union-attr]
    assert out[0].content == "x"  # type: ignore[union-attr]


def test_a_pending_system_message_without_tool_fields_is_kept_when_nothing_changes() -> None:
    patch = SystemMessage(sections={"s": "2"})
    pending: list[Any] = [patch, UserMessage("hi")]
    out = _declare([head(A)], [A], pending)
    assert out is pending and out[0] is patch


def test_a_pending_system_message_carries_the_changes_instead_of_a_new_one() -> None:
    patch = SystemMessage(sections={"s": "2"}, timestamp=5)
    out = _declare([head(A)], [B], [patch, UserMessage("hi")])
    assert len(out) == 2
    assert names(out[0].tools_added) == ["b"] and out[0].tools_removed == ["a"]  # type: ignore[union-attr]
    assert out[0].sections == {"s": "2"} and out[0].timestamp == 5  # type: ignore[union-attr]


def test_the_last_pending_system_message_is_rewritten_and_earlier_ones_count() -> None:
    earlier = SystemMessage(tools_added=[to_tool_declaration(C)])
    last = SystemMessage("last", tools_removed=["a"])
    out = _declare([head(A)], [A, C, B], [earlier, UserMessage("x"), last])
    assert out[0] is earlier
    assert names(out[2].tools_added) == ["b"] and out[2].tools_removed is None  # type: ignore[union-attr]
    assert sorted(replayed([head(A), *out])) == ["a", "b", "c"]


# --- every request replays the whole transcript --------------------------------------------


def test_edits_in_place_are_seen_by_the_next_declaration() -> None:
    declarations = ToolDeclarations()
    transcript: list[Any] = [head(A, B)]
    assert declarations.declare(transcript, [A, B], []) == []
    transcript.append(SystemMessage(tools_removed=["b"]))  # appended since the last request
    assert names(declarations.declare(transcript, [A, B], [])[0].tools_added) == ["b"]  # type: ignore[union-attr]
    transcript[-1] = UserMessage("replaced")  # the tail was replaced in place
    assert declarations.declare(transcript, [A, B], []) == []
    transcript[0] = SystemMessage("no tools")  # the head replaced, the length unchanged
    assert names(declarations.declare(transcript, [A, B], [])[0].tools_added) == ["a", "b"]  # type: ignore[union-attr]
    transcript[0] = head(A, B)
    transcript[0].tools_added = None  # a message edited in place, not replaced
    assert names(declarations.declare(transcript, [A, B], [])[0].tools_added) == ["a", "b"]  # type: ignore[union-attr]


def test_a_system_message_replaced_in_place_by_prepare_next_turn_is_redeclared() -> None:
    """prepare_next_turn swaps ``messages[0]`` for a system message declaring no tools: the
    next request declares the tools again (pi's declareToolChanges replays every turn)."""
    fn = ScriptedStreamFn([assistant_tool_calls(("a", {})), assistant_text("ok")])

    def prepare_next_turn(ctx: Any) -> None:
        ctx.context.messages[0] = SystemMessage("new prompt", timestamp=0)

    run_agent_loop([UserMessage("hi")], AgentContext([head(A)], [A]),
                   make_config(fn, prepare_next_turn=prepare_next_turn), lambda e: None,
                   stream_fn=fn)
    assert replayed(fn.calls[0].context.messages) == ["a"]
    sent = fn.calls[1].context.messages
    assert sent[0].content == "new prompt" and replayed(sent) == ["a"]  # type: ignore[union-attr]


# --- through the loop ---------------------------------------------------------------------


def test_the_loop_declares_undeclared_tools_before_the_prompt() -> None:
    fn = ScriptedStreamFn([assistant_text("ok")])
    events: list[Any] = []
    prompt = UserMessage("hi")
    new = run_agent_loop([prompt], AgentContext([], [A]), make_config(fn), events.append,
                         stream_fn=fn)
    kinds = [(e.type, e.message.role) for e in events if e.type.startswith("message_")
             and e.type != "message_update"]
    assert kinds[:4] == [("message_start", "system"), ("message_end", "system"),
                         ("message_start", "user"), ("message_end", "user")]
    assert names(new[0].tools_added) == ["a"] and new[1] is prompt  # type: ignore[union-attr]
    assert [m.role for m in fn.calls[0].context.messages] == ["system", "user"]


def test_the_loop_rewrites_a_prompted_system_message() -> None:
    fn = ScriptedStreamFn([assistant_text("ok")])
    wish = SystemMessage(sections={"mode": "terse"}, tools_added=[to_tool_declaration(E)])
    new = run_agent_loop([wish, UserMessage("hi")], AgentContext([head(A)], [A]), make_config(fn),
                         lambda e: None, stream_fn=fn)
    assert new[0] is not wish and new[0].sections == {"mode": "terse"}  # type: ignore[union-attr]
    assert new[0].tools_added is None  # type: ignore[union-attr]
    assert replayed(fn.calls[0].context.messages) == ["a"]


def test_a_tool_change_from_prepare_next_turn_is_declared_before_the_next_request() -> None:
    """The seed: tools [first] -> [second] gives one system message +second -first."""
    first, second = (make_tool(n, parameters=NO_PARAMS) for n in ("first", "second"))
    original = head(first)
    fn = ScriptedStreamFn([assistant_tool_calls(("first", {})), assistant_text("ok")])

    def prepare_next_turn(ctx: Any) -> AgentLoopTurnUpdate:
        return AgentLoopTurnUpdate(context=AgentContext(ctx.context.messages, [second]))

    new = run_agent_loop([UserMessage("hi")], AgentContext([original], [first]),
                         make_config(fn, prepare_next_turn=prepare_next_turn), lambda e: None,
                         stream_fn=fn)
    assert [m.role for m in new] == ["user", "assistant", "toolResult", "system", "assistant"]
    update = new[3]
    assert names(update.tools_added) == ["second"]  # type: ignore[union-attr]
    assert update.tools_removed == ["first"]  # type: ignore[union-attr]
    sent = fn.calls[1].context.messages
    assert sent[0] is original and names(original.tools_added) == ["first"]
    assert replayed(sent) == ["second"]
    assert sum(1 for m in sent if isinstance(m, SystemMessage)) == 2


def test_an_unchanged_tool_set_adds_no_system_message_over_many_turns() -> None:
    fn = ScriptedStreamFn([assistant_tool_calls(("a", {})), assistant_tool_calls(("a", {})),
                           assistant_text("ok")])
    new = run_agent_loop([UserMessage("hi")], AgentContext([head(A)], [A]), make_config(fn),
                         lambda e: None, stream_fn=fn)
    assert not any(isinstance(m, SystemMessage) for m in new)
