"""A scripted wire server on 127.0.0.1 for the side-by-side tests of one API each
(``test_wire_*.py``): it answers each run's requests from the run's script, byte for byte,
and records them.

Every request under ``/w/<run>/`` belongs to one run: the run's n-th request gets the n-th
reply of its script, and is recorded as ``{"path", "headers", "body"}`` (the JSON body; the
headers ``KEPT_HEADERS`` and the NAMES of the auth and signing headers, never their values).

A reply: ``{"status": 200, "content_type": ..., "chunks": [bytes, ...], "hang": bool}``: the
chunks are written one by one (each flushed); with ``hang`` the answer then waits (bounded)
until the client closes the connection (an abort). A reply with another status answers
``body`` (bytes) whole, with the reply's ``headers``.
"""

from __future__ import annotations

import json
import select
import threading
from typing import Any
from urllib.parse import unquote

from tests.conftest import WAIT, StreamingHandler
from tests.reference.conftest import ThreadedServer

Reply = dict[str, Any]
KEPT_HEADERS = ("content-type", "accept")
NAMED_HEADERS = ("authorization", "x-goog-api-key", "api-key", "x-amz-date",
                 "x-amz-security-token", "x-amz-content-sha256")


class WireServer(ThreadedServer):
    """Answers the runs' scripts and records their requests; ``close()`` joins its thread."""

    def __init__(self) -> None:
        # guards _scripts and _requests (handler threads add, the test reads after the runs)
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Reply]] = {}
        self._requests: dict[str, list[dict[str, Any]]] = {}
        super().__init__(self._handler_class(), "ref-wire-server")

    def add_run(self, run: str, script: list[Reply]) -> str:
        """Register a run; returns the base URL its model gets."""
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
        if n < len(script):
            return script[n]
        return {"status": 500, "body": f"no reply {n} scripted".encode()}

    def _handler_class(self) -> type[StreamingHandler]:
        server = self

        class Handler(StreamingHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = unquote(self.path).split("/")
                if len(parts) < 3 or parts[1] != "w" or parts[2] not in server._scripts:
                    self.send_error(404, f"no run at {self.path}")
                    return
                lower = {k.lower(): v for k, v in self.headers.items()}
                headers: dict[str, Any] = {k: lower[k] for k in KEPT_HEADERS if k in lower}
                headers["named"] = sorted(k for k in NAMED_HEADERS if k in lower)
                if "authorization" in lower:  # the scheme and, for SigV4, the signed names
                    headers["auth_scheme"] = _auth_shape(lower["authorization"])
                record = {"path": "/" + "/".join(parts[3:]), "headers": headers,
                          "body": json.loads(raw or b"null")}
                reply = server._take(parts[2], record)
                status = reply.get("status", 200)
                if status != 200:
                    body = reply.get("body", b"")
                    self.send_response(status)
                    self.send_header("Content-Type", reply.get("content_type",
                                                               "application/json"))
                    self.send_header("Content-Length", str(len(body)))
                    for name, value in reply.get("headers", {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", reply.get("content_type", "text/event-stream"))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for piece in reply.get("chunks", []):
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


def _auth_shape(value: str) -> str:
    """``Bearer`` or the SigV4 scheme with its signed header names (values dropped)."""
    scheme, _, rest = value.partition(" ")
    if scheme != "AWS4-HMAC-SHA256":
        return scheme
    fields = dict(part.strip().split("=", 1) for part in rest.split(",") if "=" in part)
    return f"{scheme} SignedHeaders={fields.get('SignedHeaders', '')}"
