"""A fake OpenAI-compatible streaming server for the provider benchmark (stdlib, 127.0.0.1).

``FakeOpenAIServer(deltas=20)`` answers ``POST /v1/chat/completions`` with a Chat
Completions SSE stream of ``deltas`` text chunks, a usage chunk and ``[DONE]``, each
event its own HTTP chunk. With model ``"stall"`` it sends one delta and then holds the
response until ``release()`` (or the client goes away), for abort-latency measurements.
Use it as a context manager; ``.base_url`` is ``http://127.0.0.1:<port>/v1``.

For measurements run it in its own process (``ServerProcess``, or
``python -m benchmarks._server``, which prints ``PORT <n>`` and exits when stdin closes), so
its threads do not compete with the client for the GIL.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeOpenAIServer", "ServerProcess", "main"]


def _event(model: str, delta: dict[str, Any] | None, finish: str | None = None,
           usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                            "created": 0, "model": model,
                            "choices": [] if delta is None else
                            [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class FakeOpenAIServer:
    """See the module docstring. Thread safety: ``release`` may be called from any thread."""

    def __init__(self, deltas: int = 20) -> None:
        self._events = [_event("bench", {"role": "assistant", "content": ""})]
        self._events += [_event("bench", {"content": f"word{i} "}) for i in range(deltas)]
        self._events.append(_event("bench", {}, "stop"))
        self._events.append(_event("bench", None, usage={"prompt_tokens": 100,
                                                          "completion_tokens": deltas,
                                                          "total_tokens": 100 + deltas}))
        self._events.append(b"data: [DONE]\n\n")
        self.stalled = threading.Event()  # set when a stall response has sent its delta
        self._release = threading.Event()  # ends every hold
        self._sockets_lock = threading.Lock()  # guards _sockets (handler threads + close)
        self._sockets: set[socket.socket] = set()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name="bench-openai-server", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """End the current hold (the stall response finishes)."""
        self._release.set()

    def rearm(self) -> None:
        """Prepare the next stall."""
        self.stalled.clear()
        self._release.clear()

    def close(self) -> None:
        self._release.set()
        with self._sockets_lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def setup(self) -> None:
                super().setup()
                # like real servers: no Nagle delay between the small event writes
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with server._sockets_lock:
                    server._sockets.add(self.connection)

            def finish(self) -> None:
                with server._sockets_lock:
                    server._sockets.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def handle(self) -> None:
                try:
                    super().handle()
                except ConnectionError:
                    pass  # a client that aborted mid-stream resets the connection

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                events = server._events
                try:
                    if body.get("model") == "stall":
                        self._chunk(events[0])
                        self._chunk(events[1])
                        server.stalled.set()
                        server._release.wait(30)
                        events = events[2:]
                    for event in events:
                        self._chunk(event)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    self.close_connection = True  # the client aborted

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        return Handler


class ServerProcess:
    """``FakeOpenAIServer`` in a child process; ``.base_url`` once started."""

    def __init__(self, deltas: int = 20) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._server", "--deltas", str(deltas)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            self.close()
            raise RuntimeError(f"the benchmark server did not start: {line!r}")
        self.base_url = f"http://127.0.0.1:{line[1]}/v1"

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="fake OpenAI streaming server")
    parser.add_argument("--deltas", type=int, default=20)
    args = parser.parse_args(argv)
    with FakeOpenAIServer(args.deltas) as server:
        print("PORT", server.base_url.split(":")[2].split("/")[0], flush=True)
        sys.stdin.read()  # returns when the parent closes stdin (or exits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
