"""A scripted wire server on 127.0.0.1 for the wire differentials (test_wire_*.py): every
request under ``/w/<run>/`` is recorded and answered with the run's next reply.

A request is recorded as ``{"method", "path", "query", "headers", "body"}``: the path after
the run's prefix, the parsed query, the headers named in ``KEPT_HEADERS``, the auth headers'
NAMES (never their values) and the ``Authorization`` scheme, and the parsed JSON body.

A reply is ``{"status": int, "body": str, "headers": {...}}`` (an HTTP answer, e.g. an
error), or ``{"frames": [bytes-as-str, ...], "content_type": str, "hang": bool}``: each frame
written as one chunk (SSE text the test encodes in the API's format); with ``hang`` the
answer then waits (bounded) for the client to close the connection (an abort).
"""

from __future__ import annotations

import json
import select
import threading
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.conftest import WAIT, StreamingHandler
from tests.reference.conftest import ThreadedServer

Reply = dict[str, Any]
AUTH_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
KEPT_HEADERS = ("content-type", "x-affinity")


def sse(data: Any, event: str | None = None) -> str:
    """One SSE frame of ``data`` as compact JSON (after ``event:`` when given)."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n"


class WireServer(ThreadedServer):
    """Answers the runs' scripts and records their requests; ``close()`` joins its thread."""

    def __init__(self) -> None:
        # guards _scripts and _requests (handler threads add, the test reads after the runs)
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Reply]] = {}
        self._requests: dict[str, list[dict[str, Any]]] = {}
        super().__init__(self._handler_class(), "ref-wire-server")

    def add_run(self, run: str, script: list[Reply]) -> str:
        """Register a run; returns its base URL (``<url>/w/<run>``)."""
        with self._lock:
            self._scripts[run] = script
            self._requests[run] = []
        return f"{self.url}/w/{run}"

    def requests(self, run: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests[run])

    def _take(self, run: str, record: dict[str, Any]) -> Reply:
        with self._lock:
            script = self._scripts[run]
            n = len(self._requests[run])
            self._requests[run].append(record)
        return script[n] if n < len(script) else {"status": 500, "body": "no reply scripted"}

    def _handler_class(self) -> type[StreamingHandler]:
        server = self

        class Handler(StreamingHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                split = urlsplit(self.path)
                parts = unquote(split.path).split("/")
                if len(parts) < 3 or parts[1] != "w" or parts[2] not in server._scripts:
                    self.send_error(404, f"no run at {self.path}")
                    return
                headers: dict[str, Any] = {k: self.headers[k] for k in KEPT_HEADERS
                                           if k in self.headers}
                headers["auth"] = [k for k in AUTH_HEADERS if k in self.headers]
                auth = self.headers.get("authorization") or ""
                if auth:
                    headers["auth_scheme"] = auth.split(" ", 1)[0]
                record = {"method": "POST", "path": "/" + "/".join(parts[3:]),
                          "query": parse_qs(split.query), "headers": headers,
                          "body": json.loads(raw or b"null")}
                reply = server._take(parts[2], record)
                if "status" in reply:
                    body = reply.get("body", "").encode()
                    self.send_response(reply["status"])
                    for name, value in (reply.get("headers") or {
                            "Content-Type": "application/json"}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", reply.get("content_type", "text/event-stream"))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for frame in reply["frames"]:
                        piece = frame.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    if reply.get("hang"):
                        # the client aborts: wait (bounded) for it to close the connection
                        select.select([self.connection], [], [], WAIT)
                        self.close_connection = True
                        return
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    self.close_connection = True

        return Handler
