"""A scripted SSE server on 127.0.0.1 for provider tests (shared by every adapter's tests).

The ``sse_server`` fixture lives in ``conftest.py`` (``no_piagent_threads`` and ``WAIT``, the
bound of every wait, in ``tests/conftest.py``); import the script helpers with
``from .sse_script import CUT, Reply, Stall, sse, sse_events``.

Usage::

    def test_text(sse_server):
        sse_server.add(Reply(body=[sse({"choices": [...]}), b"data: [DONE]\\n\\n"]))
        model = Model(id="m", api="openai-completions", provider="openai",
                      base_url=sse_server.url + "/v1")
        message = stream_simple(model, context, StreamOptions(api_key="k")).result(5)
        assert sse_server.requests[0].json["model"] == "m"

``Reply(status=200, headers=None, body=[...], chunked=True, content_type=...)`` is one
scripted HTTP response, served in the order added (a request with nothing left scripted
gets a 500 that says so). ``body`` items are written in order:

* ``bytes`` / ``str``: written and flushed as they are (one HTTP chunk each when chunked),
  so splitting an item mid-line or mid-UTF-8 tests reassembly;
* ``Stall()``: sets ``stall.reached`` and waits (bounded) for ``stall.release`` — the test
  waits on ``reached``, acts (aborts), then the fixture releases everything at teardown;
* ``CUT``: closes the connection at once (no terminating chunk: the body is cut short).

``completions_body(text)``: a Chat Completions stream that splits each astral character of
``text`` between two chunks (issue 43 part 4).

``chunked=False`` gives a close-delimited body (``Connection: close``, no length).
``sse(obj, event=None)`` formats one event; ``sse_events(*objs)`` several. ``requests``
records every request (``.path``, ``.headers``, ``.body``, ``.json``). ``reached(n)`` is
an Event set once ``n`` requests have arrived. The suite's autouse fixture removes proxy variables
so requests' ``trust_env`` never routes 127.0.0.1 through a proxy, and
``no_piagent_threads`` asserts that every ``piagent-*`` worker thread has ended.
"""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.conftest import WAIT, StreamingHandler, utf16_units


@dataclass
class Stall:
    """Hold the response here until released (or the fixture tears down)."""

    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


CUT = object()


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] | None = None
    body: list[Any] = field(default_factory=list)
    chunked: bool = True
    content_type: str = "text/event-stream"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: tuple[str, int] = ("", 0)  # the client's address: equal peers = a reused connection

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def sse(obj: Any, event: str | None = None) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


def sse_events(*objs: Any) -> list[bytes]:
    return [sse(o) for o in objs]


class ScriptedServer:
    """Serves scripted ``Reply`` objects; see the module docstring."""

    def __init__(self) -> None:
        # guards _replies, requests, _sockets, _stalls and _counters (handler threads + test)
        self._lock = threading.Lock()
        self._replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self._sockets: set[socket.socket] = set()
        self._stalls: list[Stall] = []
        self._counters: dict[int, threading.Event] = {}
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = False  # server_close() joins handler threads
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        # a short poll interval keeps shutdown() (which waits for one poll) fast
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        name="test-sse-server", daemon=True)
        self._thread.start()

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)
            for reply in replies:
                self._stalls.extend(b for b in reply.body if isinstance(b, Stall))

    def reached(self, n: int) -> threading.Event:
        with self._lock:
            event = self._counters.setdefault(n, threading.Event())
            if len(self.requests) >= n:
                event.set()
        return event

    def close(self) -> None:
        with self._lock:
            for stall in self._stalls:
                stall.release.set()
            sockets = list(self._sockets)
        for sock in sockets:  # wake handlers waiting for another keep-alive request
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(WAIT)

    def _record(self, rec: Recorded) -> Reply | None:
        with self._lock:
            self.requests.append(rec)
            for n, event in self._counters.items():
                if len(self.requests) >= n:
                    event.set()
            return self._replies.pop(0) if self._replies else None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(StreamingHandler):
            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server._sockets.add(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._sockets.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)  # read it all, or the client sees a reset
                reply = server._record(Recorded(self.command, self.path, dict(self.headers),
                                                body, tuple(self.client_address)))
                if reply is None:
                    reply = Reply(status=500, content_type="application/json", chunked=False,
                                  body=[b'{"error":{"message":"no scripted reply left"}}'])
                try:
                    self._send(reply)
                except OSError:
                    self.close_connection = True  # the client went away (an abort)

            do_GET = do_POST  # a credentials endpoint (a container role): same script

            def _send(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                for key, value in (reply.headers or {}).items():
                    self.send_header(key, value)
                if reply.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.flush()
                for item in reply.body:
                    if item is CUT:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if isinstance(item, Stall):
                        item.reached.set()
                        item.release.wait(WAIT * 2)
                        continue
                    data = item.encode() if isinstance(item, str) else item
                    if reply.chunked:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    else:
                        self.wfile.write(data)
                    self.wfile.flush()
                if reply.chunked:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()

        return Handler


def _completions_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"  # ascii: a lone half escaped


def _completions_call(index: int, fragment: str, call_id: str | None = None) -> bytes:
    call: dict[str, Any] = {"index": index, "function": {"arguments": fragment}}
    if call_id is not None:
        call.update(id=call_id, type="function")
        call["function"]["name"] = "echo"
    return _completions_chunk({"tool_calls": [call]})


def completions_body(text: str) -> list[bytes]:
    """A Chat Completions stream that splits every astral character of ``text`` in halves:
    thinking, text and two calls of ``echo`` with arguments ``{"a": text}``, one UTF-16
    code unit (or one character of the escaped JSON) per chunk, so every prefix is a
    partial value. Each chunk's JSON escapes its lone half (``"\\ud83d"``)."""
    units = utf16_units(text)
    body = [_completions_chunk({"reasoning_content": u}) for u in units]
    body += [_completions_chunk({"content": u}) for u in units]
    body.append(_completions_call(0, "", "call_1"))  # arguments with "\\ud83d\\ude00" in them
    body += [_completions_call(0, c) for c in json.dumps({"a": text})]
    body.append(_completions_call(1, "", "call_2"))  # arguments with the character itself
    raw = json.dumps({"a": text}, ensure_ascii=False)
    body += [_completions_call(1, u) for u in utf16_units(raw)]
    body += [_completions_chunk({}, "tool_calls"), b"data: [DONE]\n\n"]
    return body
