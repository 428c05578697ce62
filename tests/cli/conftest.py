"""Helpers for the command-line tests: a fake TTY and a scripted typist for ``chat_loop``.

* ``Tty``: a ``StringIO`` that says it is a terminal.
* ``Typist(agent, steps)``: ``chat_loop``'s input function; each step is a line, an
  exception to raise, or a callable giving one (``when_idle``/``after`` wait, bounded, first).
* ``chat(agent, steps)``: run the chat over ``steps``; returns ``(exit code, output)``.
* ``ChatServer`` / ``serving(answer)``: a local OpenAI-compatible server on 127.0.0.1 that
  answers each request with ``answer(request body)``'s text, streamed as Chat Completions
  chunks (with ``usage`` when given); ``.bodies`` keeps every request body, ``.url`` is the
  base URL.
* ``COMMAND_TIMEOUT``: the bound on a ``piagent`` command run in a subprocess.
* ``wait_forever_tool(started)``: a tool that sets ``started`` and waits for its abort.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from piagent import AbortSignal, AgentTool, tool
from piagent.cli import EventPrinter, chat_loop
from tests.conftest import WAIT

COMMAND_TIMEOUT = 60  # seconds: a piagent command in a subprocess, on a busy machine

Answer = Callable[[dict[str, Any]], tuple[str, dict[str, int] | None]]
"""What a ``ChatServer`` answers a request body: the reply's text and its usage (or None)."""


class Tty(io.StringIO):
    def isatty(self):
        return True


class Typist:
    """Feeds chat_loop one line at a time; each step may first wait for a condition."""

    def __init__(self, agent, steps):
        self.agent = agent
        self.steps = list(steps)

    def __call__(self):
        if not self.steps:
            raise EOFError
        step = self.steps.pop(0)
        if callable(step):
            step = step()
        if isinstance(step, BaseException):
            raise step
        return step


def when_idle(agent, then):
    """A step that waits (bounded) for the agent to be idle, then types ``then``."""
    def step():
        assert agent.wait_for_idle(WAIT)
        return then
    return step


def after(event, then):
    """A step that waits (bounded) for ``event``, then types ``then``."""
    def step():
        assert event.wait(WAIT)
        return then
    return step


def chat(agent, steps):
    """Run ``chat_loop`` over ``steps`` with an ``EventPrinter``: (exit code, output)."""
    out = io.StringIO()
    printer = EventPrinter(out)
    agent.subscribe(printer)
    code = chat_loop(agent, Typist(agent, steps), printer)
    return code, out.getvalue()


class ChatServer(ThreadingHTTPServer):
    """A local OpenAI-compatible server; see ``serving``."""

    daemon_threads = True

    def __init__(self, answer: Answer) -> None:
        super().__init__(("127.0.0.1", 0), _ChatHandler)
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _ChatHandler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        text, usage = self.server.answer(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        if usage is not None:
            chunks.append({"choices": [], "usage": usage})
        for chunk in chunks:
            chunk.update(id="c1", object="chat.completion.chunk", model=body["model"])
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@contextmanager
def serving(answer: Answer) -> Iterator[ChatServer]:
    """A started ``ChatServer``; shut down and joined (bounded) on exit."""
    server = ChatServer(answer)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="test-openai-server")
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


def wait_forever_tool(started: threading.Event) -> AgentTool:
    """A tool ``wait_forever`` that sets ``started``, then waits (bounded) for its abort."""

    @tool
    def wait_forever(signal: AbortSignal) -> str:
        """Wait until aborted."""
        started.set()
        signal.wait(WAIT)
        return "stopped"

    return wait_forever
