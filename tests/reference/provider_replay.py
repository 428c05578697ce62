"""A replay server on 127.0.0.1 for the recorded provider responses, stateless by path.

``ReplayServer.base_url(name, mode, api)`` is the ``baseUrl`` a model gets: every request under
``/r/<name>/<mode>/`` is answered with the recording ``tests/providers/recorded/data/<name>``
(its status, content type and body), whatever the rest of the path, however often it is asked
(so a retry, on either side, gets the same answer). ``mode`` is ``whole`` (one write) or
``chunks`` (the body cut into ``CHUNK``-byte writes, so events, lines and UTF-8 sequences are
split), each write one HTTP chunk, flushed at once.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from tests.conftest import StreamingHandler
from tests.reference.conftest import ThreadedServer

DATA = Path(__file__).parent.parent / "providers" / "recorded" / "data"
CHUNK = 7
MODES = ("whole", "chunks")
_API_PATH = {"openai-completions": "/v1", "openai-responses": "/v1", "anthropic-messages": "",
             "google-generative-ai": "/v1beta"}


def recording_names() -> list[str]:
    return sorted(p.name[: -len(".meta.json")] for p in DATA.glob("*.meta.json"))


def load(name: str) -> tuple[dict[str, Any], bytes]:
    meta: dict[str, Any] = json.loads((DATA / f"{name}.meta.json").read_text())
    return meta, (DATA / meta["body"]).read_bytes()


def pieces(body: bytes, mode: str) -> list[bytes]:
    if mode == "whole":
        return [body]
    return [body[i:i + CHUNK] for i in range(0, len(body), CHUNK)]


class ReplayServer(ThreadedServer):
    """Serves the recordings; ``close()`` stops it and joins its threads."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[dict[str, Any], bytes]] = {}
        # guards _cache (handler threads)
        self._lock = threading.Lock()
        super().__init__(self._handler_class(), "ref-provider-replay")

    def base_url(self, name: str, mode: str, api: str) -> str:
        return f"{self.url}/r/{name}/{mode}{_API_PATH[api]}"

    def _recording(self, name: str) -> tuple[dict[str, Any], bytes]:
        with self._lock:
            if name not in self._cache:
                self._cache[name] = load(name)
            return self._cache[name]

    def _handler_class(self) -> type[StreamingHandler]:
        server = self

        class Handler(StreamingHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = unquote(self.path).split("/")
                if len(parts) < 4 or parts[1] != "r" or parts[3] not in MODES:
                    self.send_error(404, f"no recording at {self.path}")
                    return
                meta, body = server._recording(parts[2])
                self.send_response(meta["status"])
                self.send_header("Content-Type", meta["content_type"])
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for piece in pieces(body, parts[3]):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    self.close_connection = True  # the client stopped reading

        return Handler
