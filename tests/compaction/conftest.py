"""Shared helpers for the compaction tests (``tests/compaction/``).

``TokenServer``: a stand-in OpenAI-compatible server on 127.0.0.1 speaking Chat Completions
with SSE. It counts a request's tokens by a rule of its own, ``ceil(len(body) / 4)`` over
the raw request body (UTF-8 bytes), refuses a request over ``limit`` tokens as OpenAI does
(status 400, ``context_length_exceeded``), and answers the rest by a fixed script: a user
message gets a ``read`` tool call, a tool result gets a long text answer, a summary request
(its user message starts with ``<conversation>``) gets a structured summary. It reports
its own count as the usage, and keeps every request body it saw with its count.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from piagent import Model, ModelCost
from tests.conftest import WAIT, StreamingHandler

LIMIT = 32_768


@dataclass
class Seen:
    """One request the server received: its JSON body, its token count, its answer."""

    body: dict[str, Any]
    tokens: int
    refused: bool
    summary: bool


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


@dataclass
class TokenServer:
    limit: int = LIMIT
    answer_chars: int = 1200
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards seen
    url: str = ""

    def handle(self, handler: StreamingHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length", "0")))
        body = json.loads(raw)
        tokens = math.ceil(len(raw) / 4)
        messages = body.get("messages", [])
        last = messages[-1] if messages else {}
        summary = last.get("role") == "user" and _text(last.get("content")).startswith(
            "<conversation>")
        refused = tokens > self.limit
        with self.lock:
            self.seen.append(Seen(body, tokens, refused, summary))
            number = len(self.seen)
        if refused:
            error = {"error": {
                "message": (f"This model's maximum context length is {self.limit} tokens. "
                            f"However, your messages resulted in {tokens} tokens. Please "
                            "reduce the length of the messages."),
                "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}
            data = json.dumps(error).encode()
            handler.send_response(400)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        if summary:
            delta: dict[str, Any] = {"content": (
                f"## Goal\nAnswer the user's questions (summary {number}).\n\n"
                "## Constraints & Preferences\n- (none)\n\n## Progress\n### Done\n"
                "- [x] Earlier questions answered\n\n### In Progress\n- [ ] The current "
                "question\n\n### Blocked\n- (none)\n\n## Key Decisions\n- **Read notes**: "
                "each answer cites a note\n\n## Next Steps\n1. Go on\n\n"
                "## Critical Context\n- (none)")}
            finish = "stop"
        elif last.get("role") == "user":
            n = _text(last.get("content")).split()[1] if len(
                _text(last.get("content")).split()) > 1 else "0"
            n = n.rstrip(":")
            delta = {"tool_calls": [{"index": 0, "id": f"call_{number}", "type": "function",
                                     "function": {"name": "read", "arguments": json.dumps(
                                         {"path": f"notes/{n}.txt"})}}]}
            finish = "tool_calls"
        else:
            delta = {"content": f"Answer {number}: " + "lorem ipsum " * (self.answer_chars // 12)}
            finish = "stop"
        completion = math.ceil(len(json.dumps(delta)) / 4)
        chunks = [
            {"id": "c", "object": "chat.completion.chunk", "model": "local",
             "choices": [{"index": 0, "delta": {"role": "assistant", **delta},
                          "finish_reason": None}]},
            {"id": "c", "object": "chat.completion.chunk", "model": "local",
             "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {"id": "c", "object": "chat.completion.chunk", "model": "local", "choices": [],
             "usage": {"prompt_tokens": tokens, "completion_tokens": completion,
                       "total_tokens": tokens + completion}},
        ]
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        data += b"data: [DONE]\n\n"
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def model(self, context_window: int = LIMIT) -> Model:
        return Model(id="local", name="local", api="openai-completions", provider="local",
                     base_url=self.url + "/v1", context_window=context_window, max_tokens=2048,
                     cost=ModelCost(input=3.0, output=15.0))  # dollars per million tokens


@pytest.fixture
def token_server() -> Iterator[TokenServer]:
    """A ``TokenServer`` on 127.0.0.1, shut down and joined (bounded) after the test."""
    state = TokenServer()

    class Handler(StreamingHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            state.handle(self)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # owner: this fixture; stopped by server.shutdown() and joined below
    thread = threading.Thread(target=server.serve_forever, name="token-server",
                              kwargs={"poll_interval": 0.05})
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state
    finally:
        server.shutdown()
        thread.join(WAIT)
        server.server_close()
        assert not thread.is_alive()
