"""piagent.mcp against real MCP servers nobody here wrote: mcp-server-time (PyPI),
@modelcontextprotocol/server-everything (npm), and a server built with the mcp 2.3.0 SDK."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from piagent import Agent, AgentEvent, ToolResultMessage
from piagent.mcp import MCPConnectionError, MCPError, MCPServer, MCPTimeoutError, refresh_tools
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.transcript import get_current_tools
from tests.conftest import WAIT

from .conftest import HERE, OutputLines, ServerProcess

TINY = [sys.executable, "-I", "-S", str(HERE / "tiny_server.py")]


def run_tool(server: MCPServer, name: str, args: dict[str, Any]) -> tuple[Agent, Any]:
    """An Agent run whose scripted model calls ``name`` once, then repeats what it got."""
    scripted = ScriptedStreamFn([
        assistant_tool_calls((name, args)),
        lambda context, options: assistant_text(f"got: {context.messages[-1].text}"),
    ])
    agent = Agent(model=scripted.model, tools=server.tools(), stream_fn=scripted)
    return agent, agent.prompt("use the tool", timeout=WAIT * 6)


# --- {stdio, HTTP} x {handshake, stateless}, through a real Agent run -----------------------

CASES = [
    # (server, transport, protocol asked, protocol expected, tool, arguments, text expected)
    ("time", "stdio", "auto", "2026-07-28", "convert_time",
     {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
     '"datetime": "'),
    ("time", "stdio", "2025-11-25", "2025-11-25", "get_current_time", {"timezone": "UTC"},
     '"timezone": "UTC"'),
    ("everything", "stdio", "auto", "2025-11-25", "get-sum", {"a": 2, "b": 3},
     "The sum of 2 and 3 is 5."),
    ("everything", "http", "auto", "2025-11-25", "echo", {"message": "hi"}, "Echo: hi"),
    ("sdk", "stdio", "auto", "2026-07-28", "add", {"a": 2, "b": 40}, "42"),
    ("sdk", "stdio", "2025-11-25", "2025-11-25", "add", {"a": 1, "b": 1}, "2"),
    ("sdk", "http", "auto", "2026-07-28", "echo", {"text": "stateless"}, "stateless"),
    ("sdk", "http", "2025-06-18", "2025-06-18", "echo", {"text": "handshake"}, "handshake"),
]


@pytest.mark.parametrize(("kind", "transport", "protocol", "expected", "tool", "args", "text"),
                         CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_an_agent_runs_a_server_tool(request: pytest.FixtureRequest, kind: str, transport: str,
                                     protocol: str, expected: str, tool: str,
                                     args: dict[str, Any], text: str) -> None:
    if transport == "stdio":
        command = {"time": "time_server_command", "everything": "everything_stdio",
                   "sdk": "sdk_command"}[kind]
        server = MCPServer.stdio(request.getfixturevalue(command), protocol=protocol,
                                 stderr=subprocess.DEVNULL)
    else:
        url = (request.getfixturevalue("everything_http") if kind == "everything"
               else request.getfixturevalue("sdk_http")[0])
        server = MCPServer.http(url, protocol=protocol)
    with server:
        agent, run = run_tool(server, tool, args)
        assert server.protocol_version == expected
    assert run.error_message is None
    result = agent.state.messages[-2]
    assert isinstance(result, ToolResultMessage) and result.tool_name == tool
    assert not result.is_error, result.text
    assert text in result.text
    assert run.text == f"got: {result.text}"


def test_results_map_to_pi_content(sdk_command: list[str], everything_stdio: list[str]) -> None:
    with MCPServer.stdio(sdk_command, stderr=subprocess.DEVNULL, prefix="fx_") as sdk:
        tools = {t.name: t for t in sdk.tools()}
        assert tools["fx_add"].replay == "safe"  # readOnlyHint
        assert tools["fx_echo"].replay is None
        assert tools["fx_add"].parameters["required"] == ["a", "b"]
        assert tools["fx_add"].description == "Add two integers."
        picture = sdk.call_tool("picture")
        assert [b.type for b in picture.content] == ["image", "text"]
        assert picture.content[0].mime_type == "image/png"  # type: ignore[union-attr]
        failed = sdk.call_tool("fail", {"reason": "no disk"})
        assert failed.is_error
        assert failed.content[0].text.startswith("Error executing tool fail")  # type: ignore[union-attr]
        added = sdk.call_tool("add", {"a": 1, "b": 2})
        assert added.structured_content == {"result": 3}
    with MCPServer.stdio(everything_stdio, stderr=subprocess.DEVNULL) as everything:
        structured = everything.call_tool("get-structured-content", {"location": "New York"})
        assert isinstance(structured.structured_content, dict)
        assert "temperature" in structured.structured_content


# --- abort, timeout, a dying server, close --------------------------------------------------

def abort_at_first_progress(server: MCPServer, tool: str, args: dict[str, Any]
                            ) -> tuple[float, list[AgentEvent], Agent]:
    """Run ``tool`` in an Agent, abort at its first progress update; seconds from the abort
    to the tool's end."""
    aborted_at: list[float] = []
    ended = threading.Event()
    events: list[AgentEvent] = []
    agent_box: list[Agent] = []

    def listen(event: AgentEvent, signal: object) -> None:
        events.append(event)
        if event.type == "tool_execution_update" and not aborted_at:
            aborted_at.append(time.monotonic())
            agent_box[0].abort("user pressed stop")
        if event.type == "tool_execution_end":
            aborted_at.append(time.monotonic())
            ended.set()

    scripted = ScriptedStreamFn([assistant_tool_calls((tool, args)), assistant_text("done")])
    agent = Agent(model=scripted.model, tools=server.tools(), stream_fn=scripted)
    agent_box.append(agent)
    agent.subscribe(listen)
    run = agent.prompt("go", block=False)
    assert ended.wait(WAIT * 6)
    run.wait(WAIT)
    return aborted_at[1] - aborted_at[0], events, agent


def test_abort_cancels_a_long_running_operation_over_stdio(
        everything_stdio: list[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="piagent.mcp")
    with MCPServer.stdio(everything_stdio, stderr=subprocess.DEVNULL) as server:
        seconds, events, _ = abort_at_first_progress(
            server, "trigger-long-running-operation", {"duration": 2, "steps": 40})
        assert seconds < 1.0
        end = [e for e in events if e.type == "tool_execution_end"][0]
        assert end.is_error
        # The server saw the cancellation: an operation as long, started after the cancelled
        # one, answers; had the server not cancelled, the first one's answer would come first.
        after = server.call_tool("trigger-long-running-operation", {"duration": 2, "steps": 2})
        assert "Long running operation completed" in after.content[0].text  # type: ignore[union-attr]
    assert "which nobody waits for any more" not in caplog.text


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_abort_cancels_the_call_on_the_server(transport: str, sdk_command: list[str],
                                              request: pytest.FixtureRequest,
                                              stderr_pipe: tuple[int, OutputLines]) -> None:
    if transport == "stdio":
        fd, output = stderr_pipe
        server = MCPServer.stdio(sdk_command, stderr=fd)
    else:
        url, process = request.getfixturevalue("sdk_http")
        server, output = MCPServer.http(url), process.output
    with server:
        seconds, _, _ = abort_at_first_progress(server, "wait_for_cancel", {"seconds": 30})
        assert seconds < 1.0
        assert output.wait_for("MARK cancelled", WAIT * 2), output.seen


def test_a_call_past_its_timeout_is_cancelled(sdk_command: list[str],
                                              stderr_pipe: tuple[int, OutputLines]) -> None:
    fd, output = stderr_pipe
    with MCPServer.stdio(sdk_command, stderr=fd, call_timeout=0.5) as server:
        agent, run = run_tool(server, "wait_for_cancel", {"seconds": 30})
        result = agent.state.messages[-2]
        assert isinstance(result, ToolResultMessage) and result.is_error
        assert "did not answer tools/call within 0.5 s" in result.text
        assert output.wait_for("MARK cancelled", WAIT * 2)
        with pytest.raises(MCPTimeoutError, match="within 0.2 s"):
            server.call_tool("wait_for_cancel", {"seconds": 30}, timeout=0.2)


def test_a_dead_server_gives_an_error_result_and_the_next_call_restarts_it(
        sdk_command: list[str], stderr_pipe: tuple[int, OutputLines],
        caplog: pytest.LogCaptureFixture) -> None:
    fd, output = stderr_pipe
    with MCPServer.stdio(sdk_command, stderr=fd, name="fixture") as server:
        agent, run = run_tool(server, "crash", {})
        result = agent.state.messages[-2]
        assert isinstance(result, ToolResultMessage) and result.is_error
        assert "The MCP server 'fixture' closed its output (exit code 3)." in result.text
        assert server.call_tool("add", {"a": 2, "b": 2}).content[0].text == "4"  # type: ignore[union-attr]
    assert "MCP server 'fixture': the connection ended; reconnecting" in caplog.text
    assert output.wait_count("MARK process", 2, WAIT)  # a second process


def test_a_server_logging_to_a_file_says_its_last_lines_when_it_dies(
        sdk_command: list[str], tmp_path: Path) -> None:
    """Issue 49 item 6: with ``stderr=`` a regular file, the error of a server that exits
    ends with the file's last lines (read without moving its offset)."""
    with (tmp_path / "server.log").open("w+b") as log, \
            MCPServer.stdio(sdk_command, stderr=log, name="fixture") as server:
        agent, run = run_tool(server, "crash", {})
        result = agent.state.messages[-2]
        assert isinstance(result, ToolResultMessage) and result.is_error
        said = result.text.split("closed its output (exit code 3).", 1)[1]
        assert said.startswith("\nIts last stderr lines:\n  MARK process ")
        assert "MARK crashed" in said.splitlines()[-1]
        assert len(said.splitlines()) <= 11  # the heading and ten lines at most


def test_close_returns_within_two_seconds_against_a_hung_server() -> None:
    server = MCPServer.stdio([*TINY, "hang"], name="hung", timeout=30)
    server.connect()
    transport = server._session._transport
    assert transport is not None
    pid = transport.pid  # type: ignore[attr-defined]
    calling = threading.Thread(target=lambda: pytest.raises(MCPError, server.call_tool, "ping"))
    calling.start()  # a call the hung server never answers
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 2.0
    calling.join(WAIT)
    assert not calling.is_alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone and reaped


def _children() -> set[int]:
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(pid) for pid in text)
    return found


@pytest.mark.timeout(600)  # 1,000 process starts: about 20 s on a quiet machine
def test_a_thousand_open_close_cycles_leave_nothing_behind() -> None:
    with MCPServer.stdio(TINY) as warm:  # imports and first-use caches
        warm.tools()
    fds = len(os.listdir("/proc/self/fd"))
    threads = threading.active_count()
    children = _children()
    for _ in range(1000):
        with MCPServer.stdio(TINY) as server:
            assert server.call_tool("ping").content[0].text == "pong"  # type: ignore[union-attr]
    assert _children() == children
    assert threading.active_count() == threads
    assert len(os.listdir("/proc/self/fd")) == fds


def test_tool_list_changes_show_at_the_next_turn(sdk_command: list[str]) -> None:
    with MCPServer.stdio(sdk_command, protocol="2025-11-25", stderr=subprocess.DEVNULL) as server:
        scripted = ScriptedStreamFn([assistant_tool_calls(("grow", {"name": "fresh"})),
                                     assistant_tool_calls(("fresh", {})),
                                     assistant_text("done")])
        agent = Agent(model=scripted.model, tools=server.tools(), stream_fn=scripted,
                      prepare_next_turn=refresh_tools(server))
        run = agent.prompt("grow a tool, then use it", timeout=WAIT * 6)
        assert run.error_message is None
        declared = [[t.name for t in get_current_tools(call.context.messages)]
                    for call in scripted.calls]
        assert "fresh" not in declared[0]
        assert "fresh" in declared[1]
        result = agent.state.messages[-2]
        assert isinstance(result, ToolResultMessage) and result.text == "I am fresh"


def test_works_inside_a_running_event_loop(sdk_command: list[str]) -> None:
    """A Jupyter cell runs inside an event loop: nothing here may need one of its own."""
    async def cell() -> str:
        assert asyncio.get_running_loop().is_running()
        with MCPServer.stdio(sdk_command, stderr=subprocess.DEVNULL) as server:
            agent, run = run_tool(server, "add", {"a": 20, "b": 22})
            return run.text

    assert asyncio.run(cell()) == "got: 42"


def test_headers_may_be_a_callable_called_for_each_request(
        sdk_http: tuple[str, ServerProcess]) -> None:
    tokens = iter(range(1000))
    seen: list[str] = []

    def headers() -> dict[str, str]:
        token = f"Bearer t{next(tokens)}"
        seen.append(token)
        return {"Authorization": token}

    with MCPServer.http(sdk_http[0], headers=headers) as server:
        server.call_tool("add", {"a": 1, "b": 1})
        server.call_tool("add", {"a": 1, "b": 1})
    assert len(seen) == 3  # discover and two calls: a fresh token each time
    assert len(set(seen)) == len(seen)


# --- the words a user reads -----------------------------------------------------------------

def test_unreachable_and_wrong_input_say_what_to_do() -> None:
    server = MCPServer.http("http://127.0.0.1:9/mcp", name="nowhere", timeout=5)
    with pytest.raises(MCPConnectionError, match="Could not reach the MCP server at "
                                                 "http://127.0.0.1:9/mcp: connection refused"):
        server.tools()
    server.close()
    with pytest.raises(ValueError, match=r"MCPServer.http\(url=...\) must be an http:// or "
                                         r"https:// URL, not '127.0.0.1:9/mcp'"):
        MCPServer.http("127.0.0.1:9/mcp")
    with pytest.raises(TypeError, match=r"MCPServer.stdio\(command=...\) must be a non-empty"):
        MCPServer.stdio([])
    with pytest.raises(ValueError, match="protocol= must be one of auto, 2026-07-28"):
        MCPServer.stdio(TINY, protocol="2024-01-01")
    with pytest.raises(ValueError, match="timeout= must be a positive number of seconds"):
        MCPServer.stdio(TINY, timeout=0)
    server = MCPServer.stdio(TINY, protocol="2026-07-28", name="tiny")
    with pytest.raises(MCPError, match="'tiny' does not speak the stateless protocol 2026-07-28: "
                                       "The MCP server 'tiny' answered server/discover with an "
                                       r"error: Method not found: server/discover \(code -32601\)"):
        server.tools()
    server.close()


def test_a_missing_command_says_so() -> None:
    server = MCPServer.stdio(["/nonexistent/mcp-server"], name="ghost")
    with pytest.raises(MCPConnectionError, match="Could not start the MCP server 'ghost'"):
        server.tools()
    server.close()



def test_one_connection_serves_concurrent_runs(sdk_command: list[str]) -> None:
    """Eight threads share one server: each gets its own answer, one process serves all."""
    with MCPServer.stdio(sdk_command, stderr=subprocess.DEVNULL) as server:
        tools = server.tools()
        results: dict[int, str] = {}
        barrier = threading.Barrier(8, timeout=WAIT)

        def run(n: int) -> None:
            scripted = ScriptedStreamFn([assistant_tool_calls(("add", {"a": n, "b": 1000})),
                                         assistant_text("done")])
            agent = Agent(model=scripted.model, tools=tools, stream_fn=scripted)
            barrier.wait()
            agent.prompt("add", timeout=WAIT * 6)
            results[n] = agent.state.messages[-2].text  # type: ignore[union-attr]

        threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT * 6)
        assert results == {n: str(n + 1000) for n in range(8)}


def test_a_server_killed_between_calls_is_started_again(everything_stdio: list[str]) -> None:
    with MCPServer.stdio(everything_stdio, stderr=subprocess.DEVNULL) as server:
        assert "Echo: one" in server.call_tool("echo", {"message": "one"}).content[0].text  # type: ignore[union-attr]
        transport = server._session._transport
        assert transport is not None
        first = transport.pid  # type: ignore[attr-defined]
        os.killpg(first, signal.SIGKILL)
        transport._reader.join(WAIT)  # type: ignore[attr-defined]  # it saw the end
        assert not transport.alive
        again = server.call_tool("echo", {"message": "two"})
        assert "Echo: two" in again.content[0].text  # type: ignore[union-attr]
        assert server._session._transport.pid != first  # type: ignore[union-attr]
