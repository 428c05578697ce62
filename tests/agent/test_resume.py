"""Durable intent and ``agent.resume()`` by each tool's ``replay`` policy (docs/sessions.md).

Each tool call is marked started just before its ``execute`` (not at
``tool_execution_start``, not while it waits for a pool slot). ``resume()`` finishes the
batch a stopped process left: never-started calls run, started ones run again only when
their tool's ``replay`` is ``"safe"``, the others get an unknown-outcome error result. The
last tests kill a real child process with SIGKILL while its tools run and resume its
SQLite session here.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from piagent import (
    AbortSignal,
    AgentEvent,
    AgentTool,
    AgentToolResult,
    BeforeToolCallContext,
    TextContent,
    ToolResultMessage,
    UserMessage,
    create_initial_system_message,
    to_tool_declaration,
)
from piagent.sessions import MemoryStore, SessionStore, SQLiteStore
from piagent.testing import assistant_text, assistant_tool_calls

from ..conftest import WAIT, read_child_line
from .conftest import UNKNOWN, GateTool, kill_child, labels, make_agent, posix_only, summary


def counting_tool(name: str, log: list[str], replay: Any = None) -> AgentTool:
    def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any
                ) -> AgentToolResult:
        log.append(call_id)
        return AgentToolResult(content=[TextContent(f"{name} done")])

    return AgentTool(name=name, description=f"The {name} tool.",
                     parameters={"type": "object", "properties": {}}, execute=execute,
                     replay=replay)


def crashed_session(store: SessionStore, tools: list[AgentTool], calls: list[tuple[str, str]],
                    started: list[str], answered: tuple[str, ...] = ()) -> None:
    """What an agent whose process died mid-batch leaves: its system message, a prompt, an
    assistant message asking for ``calls`` ((tool, id) pairs), the results of ``answered``,
    and marks for ``started``."""
    system = create_initial_system_message("", [to_tool_declaration(t) for t in tools])
    assert system is not None
    store.append("s", [system])
    asked = assistant_tool_calls(*[(tool, {}, call_id) for tool, call_id in calls])
    results = [ToolResultMessage(tool_call_id=call_id, tool_name=tool,
                                 content=[TextContent(f"{tool} done")])
               for tool, call_id in calls if call_id in answered]
    store.append("s", [UserMessage("go"), asked, *results])
    for call_id in started:
        store.mark_started("s", call_id)


# --- durable intent ---------------------------------------------------------------------

def test_a_call_is_marked_started_just_before_execute() -> None:
    store = MemoryStore()
    seen: list[set[str]] = []

    def execute(call_id: str, *args: Any) -> AgentToolResult:
        seen.append(store.started("s"))
        return AgentToolResult(content=[TextContent("ok")])

    tool = AgentTool(name="read", description="Reads.", parameters={"type": "object"},
                     execute=execute)
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("done")],
                          tools=[tool], store=store, session_id="s")
    marks_at_start: list[set[str]] = []
    agent.subscribe(lambda event, signal: marks_at_start.append(store.started("s"))
                    if event.type == "tool_execution_start" else None)
    agent.prompt("go")
    assert marks_at_start == [set()]  # the start event is not the mark
    assert seen == [{"call_1"}]
    assert store.started("s") == set()  # answered by its result


def test_a_call_waiting_for_a_pool_slot_is_not_marked() -> None:
    store = MemoryStore()
    gate = GateTool("read")
    agent, _ = make_agent([assistant_tool_calls(("read", {}), ("read", {})),
                           assistant_text("done")], tools=[gate.tool], store=store,
                          session_id="s", max_parallel_tools=1)
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    assert store.started("s") == {"call_1"}  # call_2 had its start event, not its execute
    gate.release("call_1").set()
    assert gate.started("call_2").wait(WAIT)
    # call_1 finished, but its result comes with the batch's: both are marked, unanswered
    assert store.started("s") == {"call_1", "call_2"}
    gate.release("call_2").set()
    assert run.wait(WAIT)
    assert store.started("s") == set()


def test_a_failing_mark_runs_nothing_and_fails_the_run() -> None:
    class NoMarks(MemoryStore):
        def mark_started(self, session_id: str, tool_call_id: str) -> None:
            msg = "database is locked"
            raise OSError(msg)

    log: list[str] = []
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("done")],
                           tools=[counting_tool("read", log)], store=NoMarks(), session_id="s")
    events: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: events.append(event))
    agent.prompt("go")
    assert log == []
    assert fn.call_count == 1
    assert events[-1].type == "agent_end"
    error = agent.state.error_message or ""
    assert "failed to mark tool call call_1 ('read') of session 's' started" in error
    assert "OSError: database is locked" in error
    result = agent.state.messages[-2]
    assert isinstance(result, ToolResultMessage) and result.is_error
    assert "was not executed: recording its start failed" in result.content[0].text


# --- resume() in this process -----------------------------------------------------------

def test_resume_applies_each_tools_replay_policy() -> None:
    store = MemoryStore()
    log: list[str] = []
    tools = [counting_tool("safe", log, "safe"), counting_tool("never", log, "never"),
             counting_tool("unset", log)]
    crashed_session(store, tools,
                    [("safe", "c1"), ("never", "c2"), ("unset", "c3"), ("never", "c4")],
                    started=["c1", "c2", "c3"])
    checked: list[str] = []

    def before(ctx: BeforeToolCallContext, signal: AbortSignal) -> None:
        checked.append(ctx.tool_call.id)

    agent, fn = make_agent([assistant_text("recovered")], tools=tools, store=store,
                           session_id="s", before_tool_call=before)
    events: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: events.append(event))
    agent.resume()
    assert sorted(log) == ["c1", "c4"]  # safe again, never-started once; c2 and c3 not
    assert sorted(checked) == ["c1", "c4"]  # through the usual hooks
    results = [m for m in store.load("s") if isinstance(m, ToolResultMessage)]
    assert [r.tool_call_id for r in results] == ["c1", "c2", "c3", "c4"]  # source order
    assert [r.is_error for r in results] == [False, True, True, False]
    for result in results[1:3]:
        text = result.content[0].text
        assert text.startswith(UNKNOWN) and "outcome is unknown" in text
        assert "not run again" in text
    shape = [entry[0] for entry in summary(events) if not entry[0].startswith("tool_")]
    assert shape == ["agent_start", "turn_start", *["message_start", "message_end"] * 4,
                     "turn_end", "turn_start", "message_start", "message_update*",
                     "message_end", "turn_end", "agent_end"]
    kinds = [e.type for e in events]
    assert kinds.count("tool_execution_start") == 4 == kinds.count("tool_execution_end")
    assert labels(store.load("s"))[-1] == ("assistant", "stop:recovered")
    # the model read the four results
    assert [m.tool_call_id for m in fn.calls[0].context.messages
            if isinstance(m, ToolResultMessage)] == ["c1", "c2", "c3", "c4"]
    assert store.started("s") == set()


def test_resume_finishes_a_sequential_batch_after_its_recorded_results() -> None:
    store = MemoryStore()
    log: list[str] = []
    tools = [counting_tool("unset", log)]
    crashed_session(store, tools, [("unset", "a"), ("unset", "b")], started=["a"],
                    answered=("a",))
    agent, _ = make_agent([assistant_text("ok")], tools=tools,
                          store=store, session_id="s", tool_execution="sequential")
    agent.resume()
    assert log == ["b"]
    assert labels(store.load("s"))[3:] == [
        ("toolResult", "a:unset done"), ("toolResult", "b:unset done"), ("assistant", "stop:ok")]


def test_resume_without_a_batch_is_continue() -> None:
    store = MemoryStore()
    store.append("s", [UserMessage("hello")])
    agent, fn = make_agent([assistant_text("hi")], store=store, session_id="s")
    agent.resume()
    assert fn.call_count == 1
    assert labels(store.load("s")) == [("user", "hello"), ("assistant", "stop:hi")]
    with pytest.raises(ValueError, match="Cannot continue from message role: assistant"):
        agent.resume()


def test_resume_needs_a_store() -> None:
    agent, _ = make_agent([], messages=[UserMessage("x")])
    with pytest.raises(ValueError, match=r"resume\(\) needs a session store"):
        agent.resume()


def test_steering_queued_before_resume_comes_after_the_batch() -> None:
    store = MemoryStore()
    log: list[str] = []
    tools = [counting_tool("unset", log)]
    crashed_session(store, tools, [("unset", "a")], started=[])
    agent, fn = make_agent([assistant_text("ok")], tools=tools,
                           store=store, session_id="s")
    agent.steer("also this")
    agent.resume()
    assert labels(store.load("s"))[3:] == [
        ("toolResult", "a:unset done"), ("user", "also this"), ("assistant", "stop:ok")]
    assert fn.call_count == 1


# --- a real process killed with SIGKILL mid-batch --------------------------------------

CHILD = textwrap.dedent('''
    import os, sys
    from piagent import Agent, AgentTool, AgentToolResult, TextContent
    from piagent.sessions import SQLiteStore
    from piagent.testing import ScriptedStreamFn, assistant_tool_calls

    db, counts, mode = sys.argv[1], sys.argv[2], sys.argv[3]

    def tool(name, replay, hang):
        def execute(call_id, params, signal, on_update):
            with open(counts, "a") as f:
                f.write(call_id + "\\n"); f.flush(); os.fsync(f.fileno())
            os.write(1, ("started " + call_id + "\\n").encode())  # one write: whole lines
            if hang:
                signal.wait(60)  # killed long before
            return AgentToolResult(content=[TextContent(name + " done")])
        return AgentTool(name=name, description=name, parameters={"type": "object"},
                         execute=execute, replay=replay)

    tools = [tool("safe", "safe", True), tool("never", "never", True),
             tool("unset", None, True), tool("later", "never", False),
             tool("quick", None, False)]
    if mode == "parallel":  # three calls run and hang, the fourth waits for a pool slot
        calls = [("safe", {}, "c1"), ("never", {}, "c2"), ("unset", {}, "c3"),
                 ("later", {}, "c4")]
    else:  # one after another: s1 finishes, s2 hangs, s3 has not started
        calls = [("quick", {}, "s1"), ("never", {}, "s2"), ("later", {}, "s3")]
    fn = ScriptedStreamFn([assistant_tool_calls(*calls)])
    agent = Agent(model=fn.model, stream_fn=fn, tools=tools, max_parallel_tools=3,
                  tool_execution=mode, store=SQLiteStore(db), session_id="crash")
    agent.prompt("go")
''')


def kill_mid_batch(tmp_path: Path, mode: str, ready: int) -> tuple[Path, Path, list[str]]:
    """Run the child until ``ready`` tools have started, then SIGKILL it: (its SQLite file,
    the file counting executions, the start lines it printed)."""
    db, counts = tmp_path / "s.db", tmp_path / "counts.txt"
    started = kill_child(tmp_path, CHILD, [str(db), str(counts), mode],
                         lambda proc: [read_child_line(proc) for _ in range(ready)])
    return db, counts, started


def recovering_tools(counts: Path) -> list[AgentTool]:
    """The child's tools as the new process has them (counting into the same file)."""
    def tool(name: str, replay: Any) -> AgentTool:
        def execute(call_id: str, *args: Any) -> AgentToolResult:
            with counts.open("a") as f:
                f.write(call_id + "\n")
            return AgentToolResult(content=[TextContent(name + " done")])
        return AgentTool(name=name, description=name, parameters={"type": "object"},
                         execute=execute, replay=replay)

    return [tool("safe", "safe"), tool("never", "never"), tool("unset", None),
            tool("later", "never"), tool("quick", None)]


@posix_only
def test_resume_after_sigkill_in_a_new_process(tmp_path: Path) -> None:
    db, counts, started = kill_mid_batch(tmp_path, "parallel", 3)
    assert sorted(started) == ["started c1", "started c2", "started c3"]

    # a new process: here, the test's, with a fresh store on the same file
    store = SQLiteStore(db)
    assert store.started("crash") == {"c1", "c2", "c3"}
    assert labels(store.load("crash"))[-1][0] == "assistant"

    agent, fn = make_agent([assistant_text("recovered")], tools=recovering_tools(counts),
                           store=store, session_id="crash", max_parallel_tools=3)
    agent.resume(timeout=WAIT)
    runs = counts.read_text().split()
    assert {call: runs.count(call) for call in ("c1", "c2", "c3", "c4")} == {
        "c1": 2, "c2": 1, "c3": 1, "c4": 1}
    results = [m for m in store.load("crash") if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error) for r in results] == [
        ("c1", False), ("c2", True), ("c3", True), ("c4", False)]
    assert results[0].content[0].text == "safe done"
    assert results[1].content[0].text.startswith(UNKNOWN + " 'never' was running (call c2)")
    assert results[2].content[0].text.startswith(UNKNOWN + " 'unset' was running (call c3)")
    assert results[3].content[0].text == "later done"
    assert labels(store.load("crash"))[-1] == ("assistant", "stop:recovered")
    assert store.started("crash") == set()
    store.close()


@posix_only
def test_resume_after_sigkill_mid_sequential_batch(tmp_path: Path) -> None:
    db, counts, started = kill_mid_batch(tmp_path, "sequential", 2)
    assert started == ["started s1", "started s2"]
    store = SQLiteStore(db)
    assert store.started("crash") == {"s2"}  # s1 is answered by its stored result
    agent, _ = make_agent([assistant_text("recovered")], tools=recovering_tools(counts),
                          store=store, session_id="crash", tool_execution="sequential")
    agent.resume(timeout=WAIT)
    runs = counts.read_text().split()
    assert {call: runs.count(call) for call in ("s1", "s2", "s3")} == {"s1": 1, "s2": 1, "s3": 1}
    results = [m for m in store.load("crash") if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error) for r in results] == [
        ("s1", False), ("s2", True), ("s3", False)]
    assert results[1].content[0].text.startswith(UNKNOWN + " 'never' was running (call s2)")
    assert labels(store.load("crash"))[-1] == ("assistant", "stop:recovered")
    store.close()

