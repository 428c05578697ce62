"""A scripted OpenAI-compatible streaming server for the benchmarks (stdlib only, 127.0.0.1).

``POST /v1/chat/completions`` answers with a Chat Completions SSE stream. The script is
chosen by the request's ``model`` field, and the server is stateless (it counts the
assistant messages already in the request), so any number of clients can share it:

* ``script:K:T:NAME`` — while fewer than ``K`` assistant messages are in the request,
  answer with ``T`` parallel calls of the tool ``NAME`` (arguments ``{"i": j}``, streamed
  in two fragments each, as OpenAI does); then a short final text.
* ``text:N`` — a plain text answer streamed as ``N`` deltas (the providers' benchmark).
* ``args:N:D`` — one tool call ``write`` whose arguments ``{"path": ..., "content": ...}``
  are about ``N`` characters of JSON (a source file: escapes, quotes, newlines), streamed in
  ``D``-character fragments; the events go out in 64 KB HTTP chunks, so the server's cost
  stays small beside the client's (the streamed-arguments benchmark).
* ``stall:S`` — send the role chunk and one text delta, then hold the response for up to
  ``S`` seconds (a model that stops mid-stream), then finish the text. A client that
  disconnects (an abort) ends the hold at the next write.

``GET /stats`` returns ``{"requests": n, "connections": m}`` (TCP connections accepted),
so a client that does not reuse its connection shows up.

Each SSE event is written and flushed as its own HTTP chunk (a realistic stream, not one
burst). Run it as a process: ``python -m benchmarks._openai_server [--max-seconds N]``
prints ``PORT <n>`` once listening and exits after ``N`` seconds at most (default 1800),
or at once when its stdin closes, so it never outlives the harness.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["BenchServer", "args_events", "big_arguments", "main", "response_events",
           "text_events"]

_STALL_MAX_S = 30.0  # every hold is bounded


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _usage(model: str, prompt_tokens: int) -> dict[str, Any]:
    return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 8,
                      "total_tokens": prompt_tokens + 8}}


def response_events(model: str, round_index: int, rounds: int, tools: int,
                    tool_name: str) -> list[dict[str, Any]]:
    """The chunks of one scripted response (without the final ``[DONE]``)."""
    events: list[dict[str, Any]] = [_chunk(model, {"role": "assistant", "content": None})]
    if round_index < rounds:
        for j in range(tools):
            call_id = f"call_{round_index}_{j}"
            events.append(_chunk(model, {"tool_calls": [{
                "index": j, "id": call_id, "type": "function",
                "function": {"name": tool_name, "arguments": ""}}]}))
            events.append(_chunk(model, {"tool_calls": [{
                "index": j, "function": {"arguments": '{"i": '}}]}))
            events.append(_chunk(model, {"tool_calls": [{
                "index": j, "function": {"arguments": f"{j}}}"}}]}))
        events.append(_chunk(model, {}, "tool_calls"))
    else:
        for piece in ("All ", "tools ", "done."):
            events.append(_chunk(model, {"content": piece}))
        events.append(_chunk(model, {}, "stop"))
    events.append(_usage(model, 10 * (round_index + 1)))
    return events


def text_events(model: str, deltas: int) -> list[dict[str, Any]]:
    """A text answer in ``deltas`` pieces, then the stop chunk and usage."""
    events = [_chunk(model, {"role": "assistant", "content": None})]
    events += [_chunk(model, {"content": f"word{k} "}) for k in range(deltas)]
    events += [_chunk(model, {}, "stop"), _usage(model, 10)]
    return events


def big_arguments(size: int) -> str:
    """The argument JSON of ``args:N``: about ``size`` characters, a file's content."""
    line = 'def f(x):\n\t"""Doc."""\n    return {"k": x}  # ok\n'
    content = line * max(1, size // len(json.dumps(line)[1:-1]))
    return json.dumps({"path": "big.py", "content": content})


def args_events(model: str, size: int, piece: int) -> list[dict[str, Any]]:
    """One tool call whose arguments (``big_arguments(size)``) stream in ``piece``-character
    fragments, then the stop chunk and usage."""
    text = big_arguments(size)
    events = [_chunk(model, {"role": "assistant", "content": None}),
              _chunk(model, {"tool_calls": [{"index": 0, "id": "call_big", "type": "function",
                                             "function": {"name": "write", "arguments": ""}}]})]
    events += [_chunk(model, {"tool_calls": [{"index": 0, "function": {
        "arguments": text[k:k + piece]}}]}) for k in range(0, len(text), piece)]
    events += [_chunk(model, {}, "tool_calls"), _usage(model, 10)]
    return events


def _sse(obj: Any) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class _QuietServer(ThreadingHTTPServer):
    """Allows 2,000 clients to connect at once (a backlog that does not overflow, so no
    client waits for a SYN retransmit); a client that resets is not an error."""

    request_queue_size = 4096
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        super().handle_error(request, client_address)


class BenchServer:
    """The server on a background thread (in-process use); ``url`` ends in ``/v1``."""

    def __init__(self, port: int = 0) -> None:
        self._stop = threading.Event()
        handler = _handler_class(self._stop)
        self._httpd = _QuietServer(("127.0.0.1", port), handler)
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name="bench-openai-server", daemon=True)

    def start(self) -> BenchServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)


class _Counters:
    """Requests and TCP connections served (``GET /stats``), to see connection reuse."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards requests and connections (handler threads)
        self.requests = 0
        self.connections = 0


def _handler_class(stop: threading.Event) -> type[BaseHTTPRequestHandler]:
    counters = _Counters()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def setup(self) -> None:
            super().setup()
            # as real servers do: no Nagle delay on the small SSE writes
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with counters.lock:
                counters.connections += 1

        def do_GET(self) -> None:
            if self.path != "/stats":
                self._error(404, f"no such endpoint {self.path}")
                return
            with counters.lock:
                stats = {"requests": counters.requests, "connections": counters.connections}
            body = json.dumps(stats).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            with counters.lock:
                counters.requests += 1
            try:
                request = json.loads(raw)
                model = str(request.get("model", ""))
                messages = request.get("messages") or []
            except ValueError:
                self._error(400, "request body is not JSON")
                return
            if not self.path.endswith("/chat/completions"):
                self._error(404, f"no such endpoint {self.path}")
                return
            parts = model.split(":")
            try:
                if parts[0] == "script" and len(parts) == 4:
                    done = sum(1 for m in messages if m.get("role") == "assistant")
                    events = response_events(model, done, int(parts[1]), int(parts[2]),
                                             parts[3])
                    self._stream(events, None)
                elif parts[0] == "text" and len(parts) == 2:
                    self._stream(text_events(model, int(parts[1])), None)
                elif parts[0] == "args" and len(parts) == 3:
                    self._stream(args_events(model, int(parts[1]), int(parts[2])), None,
                                 batch=65536)
                elif parts[0] == "stall" and len(parts) == 2:
                    events = response_events(model, 0, 0, 0, "")
                    self._stream(events, min(float(parts[1]), _STALL_MAX_S))
                else:
                    self._error(400, f"unknown benchmark model {model!r}")
            except OSError:
                self.close_connection = True  # the client went away (an abort)

        def _error(self, status: int, text: str) -> None:
            body = json.dumps({"error": {"message": text}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream(self, events: list[dict[str, Any]], stall_s: float | None,
                    batch: int = 0) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            write = self.wfile.write
            payloads = [_sse(e) for e in events] + [_sse("[DONE]")]
            if batch:  # many events per HTTP chunk
                joined = b"".join(payloads)
                payloads = [joined[k:k + batch] for k in range(0, len(joined), batch)]
            last = len(payloads) - 1
            for index, data in enumerate(payloads):
                end = b"0\r\n\r\n" if index == last else b""  # [DONE] and the end together
                write(b"%x\r\n%s\r\n%s" % (len(data), data, end))
                if stall_s is not None and index == 1:
                    deadline = time.monotonic() + stall_s
                    # hold, but notice a client that went away (abort) within ~20 ms
                    while not stop.is_set() and time.monotonic() < deadline:
                        if stop.wait(0.02):
                            break
                        write(b"3\r\n:\n\n\r\n")  # an SSE comment: raises once the peer closed

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve until ``--max-seconds`` pass or stdin closes."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    args = parser.parse_args(argv)
    server = BenchServer(args.port).start()
    print(f"PORT {server.port}", flush=True)
    done = threading.Event()

    def watch_stdin() -> None:
        try:
            sys.stdin.read()
        finally:
            done.set()

    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    done.wait(args.max_seconds)
    server.close()


if __name__ == "__main__":
    main()
