"""``piagent chat --mcp``: the real command, a local OpenAI-compatible model server that
calls an MCP server's tool, and the errors a user reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from .conftest import HERE
from .test_mcp import TINY

ROOT = HERE.parent.parent
TIMEOUT = 60


class _Model(ThreadingHTTPServer):
    daemon_threads = True
    bodies: list[dict[str, Any]]


class _Handler(BaseHTTPRequestHandler):
    """The first request calls the tool ``ping``; the next answers with what it returned."""

    server: _Model

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if len(self.server.bodies) == 1:
            call = {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "ping", "arguments": "{}"}}
            chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "tool_calls": [call]}}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
        else:
            said = body["messages"][-1]["content"]
            text = said if isinstance(said, str) else said[0]["text"]
            chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "content": f"It said {text}."}}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        for chunk in chunks:
            chunk.update(id="c1", object="chat.completion.chunk", model=body["model"])
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def model() -> Iterator[_Model]:
    srv = _Model(("127.0.0.1", 0), _Handler)
    srv.bodies = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(TIMEOUT)


def _piagent(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
           "PIAGENT_HISTORY": os.devnull}
    return subprocess.run([sys.executable, "-m", "piagent", *args], capture_output=True,
                          text=True, timeout=TIMEOUT, env=env, stdin=subprocess.DEVNULL)


def test_chat_gives_the_model_an_mcp_servers_tools(model: _Model) -> None:
    url = f"http://127.0.0.1:{model.server_address[1]}/v1"
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", url,
                    "--mcp", " ".join(TINY), "What does ping say?")
    assert proc.returncode == 0, proc.stderr
    assert "It said pong." in proc.stdout
    assert [t["function"]["name"] for t in model.bodies[0]["tools"]] == ["ping"]


def test_an_mcp_server_that_cannot_start_is_named() -> None:
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", "http://127.0.0.1:9/v1",
                    "--mcp", "/nonexistent/server --flag", "hi")
    assert proc.returncode == 1
    assert proc.stderr.startswith("piagent chat: --mcp '/nonexistent/server --flag': Could "
                                  "not start the MCP server '/nonexistent/server': ")


def test_an_mcp_server_that_exits_says_the_tail_of_its_stderr() -> None:
    """Issue 49 item 6: the server's log is kept (a temporary file, not dropped): its last
    lines say why it exited."""
    server = (f"{sys.executable} -c 'import sys; print(\"loading config\", file=sys.stderr); "
              f"print(\"error: no such file: tools.toml\", file=sys.stderr); sys.exit(3)'")
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", "http://127.0.0.1:9/v1",
                    "--mcp", server, "hi")
    assert proc.returncode == 1
    assert proc.stderr.endswith("closed its output (exit code 3).\nIts last stderr lines:\n"
                                "  loading config\n  error: no such file: tools.toml\n")
