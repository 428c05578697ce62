"""``Agent`` approvals: a run ends waiting, ``approve()``/``deny()`` decide, the last decision
goes on with the batch's results in source order; refused decisions; ``prompt()`` while
waiting; steering kept for after the batch; a session store keeps the waiting batch
(docs/approvals.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from piagent import (
    Agent,
    AgentBusyError,
    ApprovalDecision,
    ApprovalError,
    ApprovalPendingError,
    BeforeToolCallContext,
    BeforeToolCallResult,
    ToolResultMessage,
    UserMessage,
)
from piagent.sessions import JsonlStore, MemoryStore, SQLiteStore, approval_digest
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT, logging_tool as make

from .conftest import label, summary


def batch() -> Any:
    return assistant_tool_calls(("free", {"n": 1}, "1"), ("guarded", {"n": 2}, "2"),
                                ("free", {"n": 3}, "3"), ("guarded", {"n": 4}, "4"))


def agent_for(fn: ScriptedStreamFn, log: list[str], **kwargs: Any) -> Agent:
    return Agent(stream_fn=fn, model=fn.model,
                 tools=[make("free", log), make("guarded", log, needs_approval=True)], **kwargs)


def result_texts(agent: Agent) -> list[str]:
    return [f"{m.tool_call_id}:{m.content[0].text}" for m in agent.state.messages
            if isinstance(m, ToolResultMessage)]


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_a_run_ends_waiting_and_the_last_decision_goes_on(mode: str) -> None:
    log: list[str] = []
    fn = ScriptedStreamFn([batch(), assistant_text("done")])
    agent = agent_for(fn, log, tool_execution=mode)
    seen: list[Any] = []
    agent.subscribe(lambda event, signal: seen.append(event))
    run = agent.prompt("go")
    assert run.waiting and not agent.state.is_streaming
    assert repr(run).startswith("<AgentRun waiting")
    assert sorted(log) == ["1", "3"] and len(fn.calls) == 1
    assert [p.tool_call_id for p in run.pending_approvals] == ["2", "4"]
    assert agent.pending_approvals() == run.pending_approvals
    assert result_texts(agent) == ["1:free 1 ok"]  # call 3's result is held back
    assert [e.type for e in seen][-3:] == ["tool_approval_request", "tool_approval_request",
                                          "agent_end"]

    with pytest.raises(ApprovalPendingError, match=r"prompt\(\): tool calls wait for approval: "
                                                   r"'guarded' \(call 2\), 'guarded' \(call 4\)"):
        agent.prompt("something else")
    with pytest.raises(ApprovalPendingError, match=r"continue_\(\)"):
        agent.continue_()
    agent.steer("after the batch")  # kept for after the batch

    assert agent.approve("2", reason="fine") is None  # one still undecided: nothing runs
    assert sorted(log) == ["1", "3"] and len(fn.calls) == 1
    assert [p.decision for p in agent.pending_approvals()] == [
        ApprovalDecision(True, "fine"), None]
    with pytest.raises(ApprovalError, match="'2' .* was already approved"):
        agent.deny("2")
    with pytest.raises(ApprovalError, match="No tool call 'nope' waits for approval"):
        agent.approve("nope")

    seen.clear()
    follow = agent.deny("4", reason="not that one")
    assert follow is not None and follow.wait(WAIT) and not follow.waiting
    assert sorted(log) == ["1", "2", "3"]
    assert result_texts(agent) == ["1:free 1 ok", "2:guarded 2 ok", "3:free 3 ok",
                                   "4:Tool call denied by the user: not that one"]
    assert summary(seen)[:4] == [("agent_start",), ("turn_start",),
                                 ("tool_execution_start", "2"), ("tool_execution_start", "4")] \
        or mode == "sequential"
    turn_end = next(e for e in seen if e.type == "turn_end")
    assert [r.tool_call_id for r in turn_end.tool_results] == ["2", "3", "4"]
    # the steering message came after the batch, then the model's answer
    users = [m for m in agent.state.messages if isinstance(m, UserMessage)]
    assert users[-1].content[0].text == "after the batch"
    assert follow.text == "done" and len(fn.calls) == 2
    assert agent.pending_approvals() == []
    assert agent.prompt("next", block=False).wait(WAIT)  # no longer waiting


def test_the_hook_sees_the_decision_and_the_marks_are_made() -> None:
    log: list[str] = []
    seen: list[Any] = []

    def before(ctx: BeforeToolCallContext, signal: Any) -> BeforeToolCallResult | None:
        seen.append((ctx.tool_call.id, ctx.approval))
        return BeforeToolCallResult(needs_approval=ctx.tool_call.name == "free")

    store = MemoryStore()
    fn = ScriptedStreamFn([assistant_tool_calls(("free", {}, "a")), assistant_text("done")])
    agent = agent_for(fn, log, before_tool_call=before, store=store, session_id="s")
    run = agent.prompt("go")
    assert run.waiting and seen == [("a", None)] and log == []
    follow = agent.approve("a", digest=approval_digest("free", {}))
    assert follow is not None and follow.wait(WAIT)
    assert seen == [("a", None), ("a", ApprovalDecision(True))] and log == ["a"]
    assert store.approvals("s") == [] and store.held_results("s") == []


def test_a_changed_argument_is_refused() -> None:
    log: list[str] = []
    store = MemoryStore()
    fn = ScriptedStreamFn([assistant_tool_calls(("guarded", {"path": "/a"}, "1")),
                           assistant_text("done")])
    agent = agent_for(fn, log, store=store, session_id="s")
    assert agent.prompt("go").waiting
    [pending] = agent.pending_approvals()
    with pytest.raises(ApprovalError, match="the digest given does not match its current"):
        agent.approve("1", digest=approval_digest("guarded", {"path": "/b"}))
    # the stored transcript is replaced: the same call id, other arguments
    stored = store.load("s")
    stored[-1].content[0].arguments = {"path": "/etc/passwd"}
    store.replace("s", stored)
    with pytest.raises(ApprovalError, match="its arguments changed since approval was asked"):
        agent.approve("1", digest=pending.digest)
    with pytest.raises(ApprovalError, match="its arguments changed since approval was asked"):
        agent.approve("1")
    assert log == [] and agent.pending_approvals()[0].decision is None


def test_decisions_are_checked_and_refused_while_a_run_is_active() -> None:
    fn = ScriptedStreamFn([assistant_tool_calls(("guarded", {}, "1"))])
    agent = agent_for(fn, [])
    assert agent.pending_approvals() == []
    with pytest.raises(ApprovalError, match="No tool call '1' waits for approval"):
        agent.approve("1")
    with pytest.raises(TypeError, match=r"deny\(\): reason must be a str or None, not int"):
        agent.deny("1", reason=3)  # type: ignore[arg-type]

    def decide_inside(event: Any, signal: Any) -> None:
        if event.type == "tool_approval_request":
            with pytest.raises(AgentBusyError, match="Decide once the run has ended"):
                agent.approve("1")
            caught.append(True)

    caught: list[bool] = []
    agent.subscribe(decide_inside)
    assert agent.prompt("go").waiting and caught == [True]


def test_resume_is_refused_while_undecided_and_completes_a_decided_batch(tmp_path: Path) -> None:
    log: list[str] = []
    with SQLiteStore(tmp_path / "s.db") as store:
        fn = ScriptedStreamFn([batch(), assistant_text("done")])
        agent = agent_for(fn, log, store=store, session_id="s")
        assert agent.prompt("go").waiting
        with pytest.raises(ApprovalPendingError, match=r"resume\(\): tool calls wait"):
            agent.resume()
        # decided from elsewhere (the store): the batch is complete but no run went on
        store.decide("s", "2", ApprovalDecision(True), None)
        store.decide("s", "4", ApprovalDecision(False), None)
        with pytest.raises(ApprovalPendingError, match=r"agent.resume\(\) completes it"):
            agent.prompt("other")
        run = agent.resume()
        assert run.text == "done" and sorted(log) == ["1", "2", "3"]
        assert [m.tool_call_id for m in store.load("s") if isinstance(m, ToolResultMessage)] \
            == ["1", "2", "3", "4"]


def test_a_store_without_approvals_fails_the_run_saying_so(tmp_path: Path) -> None:
    fn = ScriptedStreamFn([assistant_tool_calls(("guarded", {}, "1"))])
    agent = agent_for(fn, [], store=JsonlStore(tmp_path), session_id="s")
    run = agent.prompt("go")
    assert not run.waiting
    assert run.error_message is not None
    assert "JsonlStore does not keep tool calls waiting for approval" in run.error_message


def test_a_follow_up_sent_while_waiting_comes_after_the_batch() -> None:
    log: list[str] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("guarded", {}, "1")), assistant_text("first"),
                           assistant_text("second")])
    agent = agent_for(fn, log)
    assert agent.prompt("go").waiting
    agent.follow_up("and then this")
    run = agent.approve("1")
    assert run is not None and run.wait(WAIT)
    roles = [label(m) for m in agent.state.messages[-4:]]
    assert roles == [("toolResult", "1:guarded 1 ok"), ("assistant", "stop:first"),
                     ("user", "and then this"), ("assistant", "stop:second")]
    assert log == ["1"] and len(fn.calls) == 3
