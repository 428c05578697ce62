"""Tool-call ids repeat (``piagent.testing`` numbers ``call_1`` in every message; some servers
number calls per response; a model may reuse an id): a call of a later batch with an id seen
before is a new call. Approvals, start marks and ``resume()`` treat it so on every store, in
this process and after SIGKILL of another (docs/sessions.md, docs/approvals.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import (
    Agent,
    AgentTool,
    AgentToolResult,
    ApprovalError,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from piagent.sessions import MemoryStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import WAIT, read_child_line, store_of
from .conftest import UNKNOWN, child_script, kill_child, make_agent, opened, posix_only


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A store of each kind this process opens itself, closed (its schema dropped) after."""
    with store_of(request.param, tmp_path) as opened_store:
        yield opened_store


def counting_tool(name: str, counts: Path, *, replay: Any = None,
                  needs_approval: bool = False) -> AgentTool:
    def execute(call_id: str, params: Any, *args: Any) -> AgentToolResult:
        with counts.open("a") as f:
            f.write(f"{name}:{call_id}:{params.get('n')}\n")
        return AgentToolResult(content=[TextContent(f"{name} {params.get('n')} done")])

    return AgentTool(name=name, description=name, parameters={"type": "object"},
                     execute=execute, replay=replay, needs_approval=needs_approval)


def runs_of(counts: Path) -> list[str]:
    return counts.read_text().split() if counts.exists() else []


def resume_here(store: Any, counts: Path) -> None:
    """Resume session "s" of ``store`` in this process, three calls at a time, with the
    child's four replay-policy tools counting into ``counts``; the model answers
    "recovered"."""
    tools = [counting_tool("safe", counts, replay="safe"),
             counting_tool("never", counts, replay="never"),
             counting_tool("unset", counts),
             counting_tool("later", counts, replay="never")]
    agent, _ = make_agent([assistant_text("recovered")], store=store, session_id="s",
                          tools=tools, max_parallel_tools=3)
    assert agent.resume(timeout=WAIT).text == "recovered"


# --- approvals in one process -------------------------------------------------------------

def test_a_repeated_id_waits_and_is_approved_again(store: Any, tmp_path: Path) -> None:
    counts = tmp_path / "counts"
    # every batch numbers its calls call_1, call_2, ...
    fn = ScriptedStreamFn([
        assistant_tool_calls(("write", {"n": 1})), assistant_text("first"),
        assistant_tool_calls(("write", {"n": 2}), ("free", {"n": 3})),
        assistant_text("second"), assistant_text("third")])
    agent = Agent(model=fn.model, stream_fn=fn, store=store, session_id="s",
                  tools=[counting_tool("write", counts, needs_approval=True),
                         counting_tool("free", counts)])
    for n, text in ((1, "first"), (2, "second")):
        run = agent.prompt(f"go {n}")
        assert run.waiting
        assert [(p.tool_call_id, p.args) for p in run.pending_approvals] == [
            ("call_1", {"n": n})]
        assert agent.pending_approvals() == run.pending_approvals
        follow = agent.approve("call_1")
        assert follow is not None and follow.wait(WAIT) and follow.text == text
        assert agent.pending_approvals() == []
    # the free call ran while call_1 waited; then the approved call_1
    assert runs_of(counts) == ["write:call_1:1", "free:call_2:3", "write:call_1:2"]
    assert agent.prompt("go 3").text == "third"
    # the model never read "No result provided": every call has its own result
    texts = [m.content[0].text for m in store.load("s") if isinstance(m, ToolResultMessage)]
    assert texts == ["write 1 done", "write 2 done", "free 3 done"]
    assert not any("No result provided" in str(c.context.messages) for c in fn.calls)


# --- a child process killed with SIGKILL -------------------------------------------------

CHILD = child_script('''
    from piagent import Agent, AgentTool, AgentToolResult, TextContent
    from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

    kind, where, counts, stage = sys.argv[1:5]
    store = open_store(kind, where)
    hang = [False]

    def tool(name, replay, needs=False):
        def execute(call_id, params, signal, on_update):
            with open(counts, "a") as f:
                f.write(name + ":" + call_id + ":" + str(params.get("n")) + "\\n")
                f.flush(); os.fsync(f.fileno())
            say("started " + name + " " + call_id)
            if hang[0]:
                signal.wait(60)  # killed long before
            return AgentToolResult(content=[TextContent(name + " done")])
        return AgentTool(name=name, description=name, parameters={"type": "object"},
                         execute=execute, replay=replay, needs_approval=needs)

    tools = [tool("safe", "safe"), tool("never", "never"), tool("unset", None),
             tool("later", "never"), tool("write", None, True)]
    batch = [("safe", {"n": 1}), ("never", {"n": 1}), ("unset", {"n": 1}),
             ("later", {"n": 1})]
    again = [("safe", {"n": 2}), ("never", {"n": 2}), ("unset", {"n": 2}),
             ("later", {"n": 2})]
    if stage == "shared":  # one batch, one id for every call, killed mid-way
        fn = ScriptedStreamFn([assistant_tool_calls(
            ("safe", {"n": 1}, "d"), ("never", {"n": 2}, "d"), ("unset", {"n": 3}, "d"),
            ("later", {"n": 4}, "d"))])
        agent = Agent(model=fn.model, stream_fn=fn, tools=tools, max_parallel_tools=3,
                      store=store, session_id="s")
        hang[0] = True
        agent.prompt("go")
    elif stage == "crash":  # one batch answered, the next (the same ids) killed mid-way
        fn = ScriptedStreamFn([assistant_tool_calls(*batch), assistant_text("once"),
                               assistant_tool_calls(*again)])
        agent = Agent(model=fn.model, stream_fn=fn, tools=tools, max_parallel_tools=3,
                      store=store, session_id="s")
        agent.prompt("first")
        say("answered")
        hang[0] = True
        agent.prompt("second")
    elif stage == "approve_shared":  # two waiting calls and a held result, one id
        fn = ScriptedStreamFn([assistant_tool_calls(
            ("write", {"n": 1}, "w"), ("unset", {"n": 2}, "w"), ("write", {"n": 3}, "w"))])
        agent = Agent(model=fn.model, stream_fn=fn, tools=tools, store=store,
                      session_id="s")
        run = agent.prompt("go")
        say("waiting " + " ".join(p.call_key for p in run.pending_approvals))
    else:  # approve: call_1 approved and answered, then call_1 again waits
        fn = ScriptedStreamFn([assistant_tool_calls(("write", {"n": 1})),
                               assistant_text("once"),
                               assistant_tool_calls(("write", {"n": 2}))])
        agent = Agent(model=fn.model, stream_fn=fn, tools=tools, store=store,
                      session_id="s")
        agent.prompt("first")
        agent.approve("call_1").wait(30)
        run = agent.prompt("second")
        say("waiting " + " ".join(p.tool_call_id for p in run.pending_approvals))
    sys.stdin.read()  # until killed
''')


def run_child_until(tmp_path: Path, place: tuple[str, str], stage: str, until: int
                    ) -> list[str]:
    """Run the child at ``stage`` until it printed ``until`` lines, then SIGKILL it."""
    return kill_child(tmp_path, CHILD, [*place, str(tmp_path / "counts"), stage],
                      lambda proc: [read_child_line(proc) for _ in range(until)])


@contextlib.contextmanager
def deciding_after_sigkill(tmp_path: Path, place: tuple[str, str], stage: str,
                           said: list[str], *names: str) -> Iterator[tuple[Any, Agent]]:
    """The child at ``stage``, killed once it said ``said`` (checked); then (its store, an
    agent here on its session "s" with the tools ``names`` counting into the child's file,
    ``write`` needing approval, whose model answers "done")."""
    assert run_child_until(tmp_path, place, stage, len(said)) == said
    counts = tmp_path / "counts"
    with opened(place) as store:
        tools = [counting_tool(name, counts, needs_approval=name == "write") for name in names]
        agent, _ = make_agent([assistant_text("done")], store=store, session_id="s",
                              tools=tools)
        yield store, agent


@posix_only
def test_resume_after_sigkill_follows_replay_for_a_repeated_id(
        tmp_path: Path, place: tuple[str, str]) -> None:
    lines = run_child_until(tmp_path, place, "crash", 4 + 1 + 3)
    assert lines[4] == "answered"
    assert sorted(lines[5:]) == ["started never call_2", "started safe call_1",
                                 "started unset call_3"]
    with opened(place) as store:
        # the second batch's call_1..call_3 started; call_4 waited for a pool slot
        assert store.started("s") == {"call_1", "call_2", "call_3"}
        counts = tmp_path / "counts"
        resume_here(store, counts)
        second = [r for r in runs_of(counts) if r.endswith(":2")]
        # safe runs again, never and unset do not, the never-started one runs once
        assert sorted(second) == ["later:call_4:2", "never:call_2:2", "safe:call_1:2",
                                  "safe:call_1:2", "unset:call_3:2"]
        results = [m for m in store.load("s") if isinstance(m, ToolResultMessage)][4:]
        assert [(r.tool_call_id, r.is_error) for r in results] == [
            ("call_1", False), ("call_2", True), ("call_3", True), ("call_4", False)]
        assert results[1].content[0].text.startswith(UNKNOWN + " 'never' was running")
        assert results[2].content[0].text.startswith(UNKNOWN + " 'unset' was running")
        assert store.started("s") == set()


@posix_only
@pytest.mark.parametrize("place", ["sqlite", "postgres"], indirect=True)
def test_a_repeated_id_waiting_survives_sigkill_and_is_approved_elsewhere(
        tmp_path: Path, place: tuple[str, str]) -> None:
    said = ["started write call_1", "waiting call_1"]
    with deciding_after_sigkill(tmp_path, place, "approve", said, "write") as (store, agent):
        assert [(p.tool_call_id, p.args) for p in agent.pending_approvals()] == [
            ("call_1", {"n": 2})]
        run = agent.approve("call_1")
        assert run is not None and run.wait(WAIT) and run.text == "done"
        assert runs_of(tmp_path / "counts") == ["write:call_1:1", "write:call_1:2"]
        assert [m.content[0].text for m in store.load("s")
                if isinstance(m, ToolResultMessage)] == ["write done", "write 2 done"]


# --- two calls of one batch with one id ---------------------------------------------------

def test_two_waiting_calls_of_one_batch_with_one_id_are_told_apart(store: Any,
                                                                    tmp_path: Path) -> None:
    counts = tmp_path / "counts"
    fn = ScriptedStreamFn([assistant_tool_calls(
        ("write", {"n": 1}, "c1"), ("free", {"n": 2}, "c1"), ("write", {"n": 3}, "c1")),
        assistant_text("done")])
    agent = Agent(model=fn.model, stream_fn=fn, store=store, session_id="s",
                  tools=[counting_tool("write", counts, needs_approval=True),
                         counting_tool("free", counts)])
    seen: list[Any] = []
    agent.subscribe(lambda event, signal: seen.append(event)
                    if event.type == "tool_approval_request" else None)
    run = agent.prompt("go")
    assert run.waiting and runs_of(counts) == ["free:c1:2"]  # its result held back
    # the assistant message is the transcript's third (after the system message and the
    # prompt): keys 2:0 and 2:2
    assert [(p.call_key, p.args) for p in agent.pending_approvals()] == [
        ("2:0", {"n": 1}), ("2:2", {"n": 3})]
    assert [e.call_key for e in seen] == ["2:0", "2:2"]
    with pytest.raises(ApprovalError, match=r"2 tool calls waiting for approval in session "
                                            r"'s' have the id 'c1'; pass the call_key of "
                                            r"the one meant: '2:0' .*, '2:2'"):
        agent.approve("c1")
    assert agent.deny("2:2", reason="not that one") is None
    with pytest.raises(ApprovalError, match="'c1' .* was already denied"):
        agent.approve("2:2")
    follow = agent.approve("c1")  # now one waiting call has that id: it is meant
    assert follow is not None and follow.wait(WAIT) and follow.text == "done"
    assert runs_of(counts) == ["free:c1:2", "write:c1:1"]
    texts = [m.content[0].text for m in store.load("s") if isinstance(m, ToolResultMessage)]
    assert texts == ["write 1 done", "free 2 done",
                     "Tool call denied by the user: not that one"]
    assert agent.pending_approvals() == []


def test_the_second_call_of_an_id_left_unanswered_is_resumed() -> None:
    # the k-th result of an id answers the k-th call of it: one result, two calls "c1"
    store = MemoryStore()
    store.append("s", [UserMessage("go"), assistant_tool_calls(("free", {"n": 1}, "c1"),
                                                               ("free", {"n": 2}, "c1")),
                       ToolResultMessage("c1", "free", [TextContent("free 1 done")])])
    ran: list[str] = []

    def execute(call_id: str, params: Any, *args: Any) -> AgentToolResult:
        ran.append(f"{call_id}:{params['n']}")
        return AgentToolResult(content=[TextContent(f"free {params['n']} done")])

    free = AgentTool(name="free", description="free", parameters={"type": "object"},
                     execute=execute)
    fn = ScriptedStreamFn([assistant_text("resumed")])
    agent = Agent(model=fn.model, stream_fn=fn, store=store, session_id="s", tools=[free])
    assert agent.resume(timeout=WAIT).text == "resumed"
    assert ran == ["c1:2"]
    assert [m.content[0].text for m in store.load("s") if isinstance(m, ToolResultMessage)] \
        == ["free 1 done", "free 2 done"]


@posix_only
def test_resume_after_sigkill_tells_apart_calls_of_one_batch_sharing_an_id(
        tmp_path: Path, place: tuple[str, str]) -> None:
    lines = run_child_until(tmp_path, place, "shared", 3)
    assert sorted(lines) == ["started never d", "started safe d", "started unset d"]
    with opened(place) as store:
        # each call of the shared id is marked with its key (system 0, prompt 1, reply 2)
        assert store.started("s") == {"d @ 2:0", "d @ 2:1", "d @ 2:2"}
        counts = tmp_path / "counts"
        resume_here(store, counts)
        assert sorted(runs_of(counts)) == ["later:d:4", "never:d:2", "safe:d:1", "safe:d:1",
                                           "unset:d:3"]
        results = [m for m in store.load("s") if isinstance(m, ToolResultMessage)]
        assert [(r.tool_name, r.is_error) for r in results] == [
            ("safe", False), ("never", True), ("unset", True), ("later", False)]
        assert results[1].content[0].text.startswith(UNKNOWN + " 'never' was running")


@posix_only
@pytest.mark.parametrize("place", ["sqlite", "postgres"], indirect=True)
def test_waiting_calls_of_one_batch_sharing_an_id_are_decided_elsewhere(
        tmp_path: Path, place: tuple[str, str]) -> None:
    said = ["started unset w", "waiting 2:0 2:2"]
    with deciding_after_sigkill(tmp_path, place, "approve_shared", said,
                                "write", "unset") as (store, agent):
        assert [(p.call_key, p.args) for p in agent.pending_approvals()] == [
            ("2:0", {"n": 1}), ("2:2", {"n": 3})]
        with pytest.raises(ApprovalError, match="have the id 'w'; pass the call_key"):
            agent.approve("w")
        assert agent.approve("2:2") is None
        run = agent.deny("2:0", reason="no")
        assert run is not None and run.wait(WAIT) and run.text == "done"
        # the held result is used
        assert runs_of(tmp_path / "counts") == ["unset:w:2", "write:w:3"]
        assert [m.content[0].text for m in store.load("s")
                if isinstance(m, ToolResultMessage)] == [
            "Tool call denied by the user: no", "unset done", "write 3 done"]
