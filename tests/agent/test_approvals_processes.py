"""A run waiting for approval survives SIGKILL of its process: another process builds an Agent
on the same session (SQLiteStore, PostgresStore), sees the waiting calls, decides, and the run
completes with every call's one result in source order; a process killed while an approved
call runs leaves it to ``resume()`` (unknown outcome), the held and denied results intact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from piagent import AgentTool, AgentToolResult, TextContent, ToolResultMessage
from piagent.testing import assistant_text

from ..conftest import WAIT, read_child_line
from .conftest import UNKNOWN, child_script, kill_child, make_agent, opened, posix_only

CHILD = child_script('''
    from piagent import Agent, AgentTool, AgentToolResult, TextContent
    from piagent.testing import ScriptedStreamFn, assistant_tool_calls

    kind, where, counts, stage = sys.argv[1:5]
    store = open_store(kind, where)

    def tool(name, needs, hang):
        def execute(call_id, params, signal, on_update):
            with open(counts, "a") as f:
                f.write(call_id + "\\n"); f.flush(); os.fsync(f.fileno())
            say("started " + call_id)
            if hang:
                signal.wait(60)  # killed long before
            return AgentToolResult(content=[TextContent(name + " " + call_id + " done")])
        return AgentTool(name=name, description=name, parameters={"type": "object"},
                         execute=execute, needs_approval=needs)

    tools = [tool("free", False, False), tool("guarded", True, stage == "decide")]
    calls = [("free", {"n": 1}, "c1"), ("guarded", {"n": 2}, "c2"),
             ("free", {"n": 3}, "c3"), ("guarded", {"n": 4}, "c4")]
    fn = ScriptedStreamFn([assistant_tool_calls(*calls)])
    agent = Agent(model=fn.model, stream_fn=fn, tools=tools, store=store, session_id="wait")
    if stage == "prompt":
        run = agent.prompt("go")
        say("waiting " + " ".join(p.tool_call_id for p in run.pending_approvals))
    else:  # decide: c2 is approved and hangs while it runs
        assert agent.approve("c2") is None
        agent.deny("c4", reason="not that one")
    sys.stdin.read()  # until killed
''')


def run_child_until(tmp_path: Path, place: tuple[str, str], stage: str,
                    last: str) -> list[str]:
    """Run the child at ``stage`` until it prints a line starting with ``last``, then
    SIGKILL it; the lines it printed."""
    def read(proc: Any) -> list[str]:
        lines: list[str] = []
        while not (lines and lines[-1].startswith(last)):
            lines.append(read_child_line(proc))
        return lines

    return kill_child(tmp_path, CHILD, [*place, str(tmp_path / "counts"), stage], read)


def counting_tools(counts: Path) -> list[AgentTool]:
    def tool(name: str, needs: bool) -> AgentTool:
        def execute(call_id: str, *args: Any) -> AgentToolResult:
            with counts.open("a") as f:
                f.write(call_id + "\n")
            return AgentToolResult(content=[TextContent(f"{name} {call_id} done")])
        return AgentTool(name=name, description=name, parameters={"type": "object"},
                         execute=execute, needs_approval=needs)

    return [tool("free", False), tool("guarded", True)]


def executions(counts: Path) -> dict[str, int]:
    runs = counts.read_text().split()
    return {call: runs.count(call) for call in ("c1", "c2", "c3", "c4")}


def stored_results(store: Any) -> list[tuple[str, str]]:
    return [(m.tool_call_id, m.content[0].text) for m in store.load("wait")
            if isinstance(m, ToolResultMessage)]


@posix_only
@pytest.mark.parametrize("place", ["sqlite", "postgres"], indirect=True)
def test_a_waiting_run_survives_sigkill_and_a_decision_elsewhere_resumes_it(
        tmp_path: Path, place: tuple[str, str]) -> None:
    lines = run_child_until(tmp_path, place, "prompt", "waiting")
    assert sorted(lines[:-1]) == ["started c1", "started c3"] and lines[-1] == "waiting c2 c4"

    with opened(place) as store:
        agent, fn = make_agent([assistant_text("finished")], store=store, session_id="wait",
                              tools=counting_tools(tmp_path / "counts"))
        assert [(p.tool_call_id, p.args) for p in agent.pending_approvals()] == [
            ("c2", {"n": 2}), ("c4", {"n": 4})]
        assert stored_results(store) == [("c1", "free c1 done")]  # c3's is held back
        assert agent.approve("c2", reason="ok") is None
        run = agent.deny("c4", reason="not that one")
        assert run is not None and run.wait(WAIT) and run.text == "finished"
        assert executions(tmp_path / "counts") == {"c1": 1, "c2": 1, "c3": 1, "c4": 0}
        assert stored_results(store) == [
            ("c1", "free c1 done"), ("c2", "guarded c2 done"), ("c3", "free c3 done"),
            ("c4", "Tool call denied by the user: not that one")]
        assert agent.pending_approvals() == [] and store.approvals("wait") == []
        assert store.held_results("wait") == [] and len(fn.calls) == 1


@posix_only
def test_a_process_killed_while_an_approved_call_runs_leaves_one_result_each(
        tmp_path: Path) -> None:
    place = ("sqlite", str(tmp_path / "s.db"))
    run_child_until(tmp_path, place, "prompt", "waiting")
    lines = run_child_until(tmp_path, place, "decide", "started c2")
    assert lines == ["started c2"]
    with opened(place) as store:
        agent, _ = make_agent([assistant_text("recovered")], store=store, session_id="wait",
                              tools=counting_tools(tmp_path / "counts"))
        assert [p.decision is not None for p in agent.pending_approvals()] == [True, True]
        assert agent.resume(timeout=WAIT).text == "recovered"
        assert executions(tmp_path / "counts") == {"c1": 1, "c2": 1, "c3": 1, "c4": 0}
        results = stored_results(store)
        assert [call for call, _ in results] == ["c1", "c2", "c3", "c4"]
        assert results[1][1].startswith(UNKNOWN + " 'guarded' was running (call c2)")
        assert results[2:] == [("c3", "free c3 done"),
                               ("c4", "Tool call denied by the user: not that one")]
