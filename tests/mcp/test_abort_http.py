"""An abort stops an MCP call over streamable HTTP within 1 s, whatever the server answers
with: one ``application/json`` body (no response headers until the answer is ready) or an
SSE stream, on both protocol generations, against servers built with the official ``mcp``
2.3.0 SDK and with fastmcp 4.x (``hold_server.py``). The server's tool holds until the test
releases it, ignoring cancellation: its late answer must be dropped."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest

from piagent import Agent, AgentEvent, AgentToolResult, ToolResultMessage
from piagent.abort import AbortController
from piagent.mcp import MCPError, MCPServer
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT

from .conftest import HoldServer

PROTOCOLS = ["2026-07-28", "2025-11-25"]
CANCELLED = "The call was cancelled: the run was aborted (user pressed stop)."
T = TypeVar("T")


def started(server: HoldServer, tag: str) -> tuple[int, str]:
    """Wait until the server runs the ``hold`` tagged ``tag``: its mark's line number and
    the request id the server saw."""
    line = server.output.find(f"MARK started {tag} ", WAIT * 3)
    assert line is not None, server.output.seen
    return line, server.output.seen[line].split()[-1]


def assert_cancel_sent_and_late_answer_dropped(server: HoldServer, tag: str, line: int,
                                               request_id: str) -> None:
    """The server received ``notifications/cancelled`` for this call; released, it answers
    (late) without anyone reading it."""
    assert server.output.wait_for(f"MARK cancel {request_id}\n", WAIT, since=line), \
        server.output.seen[line:]
    server.release(tag)
    assert server.output.wait_for(f"MARK answered {tag}\n", WAIT, since=line)


def abort_a_held_call(server: MCPServer, args: dict[str, Any], held: Callable[[], T]
                      ) -> tuple[Agent, list[AgentEvent], T]:
    """An agent whose model asks for ``hold`` with ``args`` on ``server``; once ``held()``
    returns (the server holds the call), the run is aborted and the tool's execution must
    end within a second of that. The agent, its events and what ``held()`` returned."""
    ended_at: list[float] = []
    ended = threading.Event()
    events: list[AgentEvent] = []

    def listen(event: AgentEvent, signal: object) -> None:
        events.append(event)
        if event.type == "tool_execution_end":
            ended_at.append(time.monotonic())
            ended.set()

    scripted = ScriptedStreamFn([assistant_tool_calls(("hold", args)),
                                 assistant_text("stopped")])
    agent = Agent(model=scripted.model, tools=server.tools(), stream_fn=scripted)
    agent.subscribe(listen)
    run = agent.prompt("hold on", block=False)
    got = held()
    agent.abort("user pressed stop")
    aborted_at = time.monotonic()
    assert ended.wait(WAIT)
    assert ended_at[0] - aborted_at < 1.0
    run.wait(WAIT)
    return agent, events, got


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_abort_ends_an_agents_http_call_within_a_second(hold_server: HoldServer,
                                                        protocol: str) -> None:
    tag = f"agent-{hold_server.kind}-{hold_server.mode}-{protocol}"
    with MCPServer.http(hold_server.url, protocol=protocol) as server:
        assert server.protocol_version == protocol
        agent, events, (line, request_id) = abort_a_held_call(
            server, {"tag": tag}, lambda: started(hold_server, tag))

        end = [e for e in events if e.type == "tool_execution_end"][0]
        assert end.is_error
        assert end.result.content[0].text == "MCPError: " + CANCELLED  # type: ignore[union-attr]
        assert_cancel_sent_and_late_answer_dropped(hold_server, tag, line, request_id)
        results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
        assert [(r.is_error, r.text) for r in results] == [(True, "MCPError: " + CANCELLED)]
        assert f"released {tag}" not in repr(agent.state.messages)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_call_tool_with_an_aborted_signal_raises_within_a_second(hold_server: HoldServer,
                                                                 protocol: str) -> None:
    tag = f"direct-{hold_server.kind}-{hold_server.mode}-{protocol}"
    controller = AbortController()
    outcome: list[AgentToolResult | BaseException] = []
    done = threading.Event()

    with MCPServer.http(hold_server.url, protocol=protocol) as server:
        def call() -> None:
            try:
                outcome.append(server.call_tool("hold", {"tag": tag},
                                                signal=controller.signal))
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                outcome.append(exc)
            finally:
                done.set()

        caller = threading.Thread(target=call)
        caller.start()
        line, request_id = started(hold_server, tag)
        controller.abort("user pressed stop")
        aborted_at = time.monotonic()
        assert done.wait(WAIT)
        seconds = time.monotonic() - aborted_at
        caller.join(WAIT)
        assert seconds < 1.0
        assert isinstance(outcome[0], MCPError), outcome
        assert str(outcome[0]) == CANCELLED
        assert_cancel_sent_and_late_answer_dropped(hold_server, tag, line, request_id)
        # The connection serves the next call as before.
        hold_server.release(f"{tag}-after")
        after = server.call_tool("hold", {"tag": f"{tag}-after"}, timeout=WAIT)
        assert after.content[0].text == f"released {tag}-after"  # type: ignore[union-attr]


# --- headers sent, body late; a server that never accepts the cancellation ----------------

class SlowBody(ThreadingHTTPServer):
    """A hand-written handshake server: its ``tools/call`` answer sends the headers and the
    body's first bytes, then waits until ``release`` before the rest; it never answers a
    ``notifications/cancelled`` POST (it records it and hangs until ``release``)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), SlowBodyHandler)
        self.started = threading.Event()
        self.release = threading.Event()
        self.cancelled: list[Any] = []  # the requestIds of notifications/cancelled received
        self.late_written = threading.Event()


class SlowBodyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: SlowBody

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        return

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method = message.get("method")
        if method == "notifications/cancelled":
            self.server.cancelled.append(message["params"]["requestId"])
            self.server.release.wait(WAIT)  # never accepted while the test runs
            return self.send_body(202, b"")
        if "id" not in message:
            return self.send_body(202, b"")
        if method == "initialize":
            result: dict[str, Any] = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                      "serverInfo": {"name": "slow-body", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "hold", "inputSchema": {"type": "object"}}]}
        else:
            result = {"content": [{"type": "text", "text": "late"}]}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        if method != "tools/call":
            return self.send_body(200, body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:10])
        self.wfile.flush()
        self.server.started.set()
        self.server.release.wait(WAIT)
        try:
            self.wfile.write(body[10:])
            self.wfile.flush()
        except OSError:
            pass  # the client has gone
        self.server.late_written.set()

    def send_body(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def slow_body() -> Iterator[SlowBody]:
    server = SlowBody()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


def test_abort_reaches_a_json_body_that_stops_midway(slow_body: SlowBody) -> None:
    """The headers came, the body has not ended; the server never accepts the cancellation
    either: the call still ends within a second, and the late rest is never read."""
    url = f"http://127.0.0.1:{slow_body.server_address[1]}/mcp"

    def held() -> None:
        assert slow_body.started.wait(WAIT)

    with MCPServer.http(url, protocol="2025-11-25") as server:
        agent, _, _ = abort_a_held_call(server, {}, held)
        assert slow_body.cancelled == [3]  # initialize 1, tools/list 2, tools/call 3
        slow_body.release.set()
        assert slow_body.late_written.wait(WAIT)
        results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
        assert [(r.is_error, r.text) for r in results] == [(True, "MCPError: " + CANCELLED)]
