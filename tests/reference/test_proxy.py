"""piagent.proxy.stream_proxy against pi's streamProxy, both reading one local proxy server.

Each case is a scripted proxy response (SSE events, or an HTTP error); pi's client (node) and
piagent's read it, and the assistant events they produce, their final messages and the
request bodies they sent must be the same.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from piagent import AbortController, Context, Model, UserMessage, message_to_dict
from piagent.events import assistant_event_to_dict
from piagent.proxy import ProxyStreamOptions, stream_proxy

from .conftest import Pi
from .ref_normalise import first_difference, scrub

STALL_S = 1.0
USAGE = {"input": 5, "output": 7, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 12,
         "cost": {"input": 0.001, "output": 0.002, "cacheRead": 0, "cacheWrite": 0,
                  "total": 0.003}}
MODEL = Model(id="m-1", api="openai-completions", provider="openai",
              base_url="https://x.invalid", name="M", context_window=1000, max_tokens=100)
MODEL_JSON = {"id": "m-1", "name": "M", "api": "openai-completions", "provider": "openai",
              "baseUrl": "https://x.invalid", "reasoning": False, "input": ["text"],
              "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
              "contextWindow": 1000, "maxTokens": 100}
CONTEXT = Context([UserMessage(content="Hi", timestamp=1700000000000)])
CALL = {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "a.txt"}}

CASES: dict[str, dict[str, Any]] = {
    "text": {"events": [
        {"type": "start"}, {"type": "text_start", "contentIndex": 0},
        {"type": "text_delta", "contentIndex": 0, "delta": "Hel"},
        {"type": "text_delta", "contentIndex": 0, "delta": "lo"},
        {"type": "text_end", "contentIndex": 0, "contentSignature": "sig"},
        {"type": "done", "reason": "stop", "usage": USAGE}]},
    "thinking_then_text": {"events": [
        {"type": "start"}, {"type": "thinking_start", "contentIndex": 0},
        {"type": "thinking_delta", "contentIndex": 0, "delta": "hmm"},
        {"type": "thinking_end", "contentIndex": 0, "contentSignature": "th-sig"},
        {"type": "text_start", "contentIndex": 1},
        {"type": "text_delta", "contentIndex": 1, "delta": "ok"},
        {"type": "text_end", "contentIndex": 1},
        {"type": "done", "reason": "stop", "usage": USAGE, "providerThinkingLevel": "low"}]},
    "tool_call_end_is_authoritative": {"events": [
        {"type": "start"},
        {"type": "toolcall_start", "contentIndex": 0, "id": "call_1", "toolName": "read"},
        {"type": "toolcall_delta", "contentIndex": 0, "delta": '{"path": "b'},
        {"type": "toolcall_delta", "contentIndex": 0, "delta": '.txt"}'},
        {"type": "toolcall_end", "contentIndex": 0, "toolCall": CALL},
        {"type": "done", "reason": "toolUse", "usage": USAGE}]},
    "tool_call_without_deltas": {"events": [
        {"type": "start"},
        {"type": "toolcall_start", "contentIndex": 0, "id": "call_1", "toolName": "read"},
        {"type": "toolcall_end", "contentIndex": 0, "toolCall": CALL},
        {"type": "done", "reason": "toolUse", "usage": USAGE}]},
    "error_event": {"events": [
        {"type": "start"}, {"type": "text_start", "contentIndex": 0},
        {"type": "text_delta", "contentIndex": 0, "delta": "par"},
        {"type": "error", "reason": "error", "errorMessage": "upstream 500", "usage": USAGE}]},
    "closed_early": {"events": [
        {"type": "start"}, {"type": "text_start", "contentIndex": 0},
        {"type": "text_delta", "contentIndex": 0, "delta": "cut"}]},
    "http_error_json": {"status": 401, "body": {"error": "bad token"}},
    "http_error_plain": {"status": 500, "body": "boom"},
    "abort_mid_stream": {"abortOn": "text_delta", "stall": True, "events": [
        {"type": "start"}, {"type": "text_start", "contentIndex": 0},
        {"type": "text_delta", "contentIndex": 0, "delta": "so"},
        {"type": "text_delta", "contentIndex": 0, "delta": "rry"},
        {"type": "text_end", "contentIndex": 0},
        {"type": "done", "reason": "stop", "usage": USAGE}]},
}

class _Handler(BaseHTTPRequestHandler):
    bodies: dict[str, Any] = {}

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        length = int(self.headers.get("Content-Length") or 0)
        _Handler.bodies[token] = json.loads(self.rfile.read(length) or b"null")
        case = CASES[token.split(":", 1)[1]]
        if "status" in case:
            body = case["body"]
            data = json.dumps(body).encode() if isinstance(body, dict) else body.encode()
            self.send_response(case["status"])
            self.send_header("Content-Type", "application/json" if isinstance(body, dict)
                             else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for index, event in enumerate(case["events"]):
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                if case.get("stall") and index == 2:
                    threading.Event().wait(STALL_S)  # the client aborts meanwhile
        except OSError:
            pass  # the client went away (abort)
        self.close_connection = True


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, name="ref-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def pi_side(pi: Pi, proxy_url: str) -> dict[str, Any]:
    spec = {"model": MODEL_JSON,
            "context": {"messages": [message_to_dict(m) for m in CONTEXT.messages]},
            "cases": [{"name": n, "abortOn": c.get("abortOn")} for n, c in CASES.items()]}
    out: dict[str, Any] = json.loads(pi.run("pi_proxy.mjs", proxy_url, json.dumps(spec)))
    return out


def _ours(name: str, proxy_url: str) -> dict[str, Any]:
    controller = AbortController()
    options = ProxyStreamOptions(proxy_url=proxy_url, auth_token=f"py:{name}",
                                 signal=controller.signal, temperature=0.5, max_tokens=64,
                                 reasoning="low", session_id="s-1", timeout=(5.0, 10.0))
    stream = stream_proxy(MODEL, CONTEXT, options)
    events = []
    for event in stream:
        events.append(assistant_event_to_dict(event, partial=False))
        if event.type == CASES[name].get("abortOn"):
            controller.abort()
    return {"events": events, "result": message_to_dict(stream.result(timeout=10))}


def test_proxy_client_times_the_response(proxy_url: str, pi_side: dict[str, Any]) -> None:
    assert "durationMs" in pi_side["text"]["result"]
    assert "durationMs" in _ours("text", proxy_url)["result"]


@pytest.mark.parametrize("name", list(CASES))
def test_proxy_client_reads_as_pi(name: str, proxy_url: str, pi_side: dict[str, Any]) -> None:
    pi = scrub(pi_side[name])  # the measured durationMs becomes "<ms>" on both sides
    ours = scrub(_ours(name, proxy_url))
    difference = first_difference({"log": pi["events"], "result": pi["result"]},
                                  {"log": ours["events"], "result": ours["result"]})
    assert difference is None, difference


def test_proxy_request_bodies_match(proxy_url: str, pi_side: dict[str, Any]) -> None:
    _ours("text", proxy_url)
    pi, ours = _Handler.bodies["pi:text"], _Handler.bodies["py:text"]
    assert scrub(ours) == scrub(pi), first_difference({"body": scrub(pi)}, {"body": scrub(ours)})
