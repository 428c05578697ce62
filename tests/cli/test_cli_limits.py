"""``piagent chat --max-requests N --max-cost USD``: a model that never stops is stopped."""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from piagent.cli import main

from ..conftest import WAIT


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    requests = 0


class _Forever(BaseHTTPRequestHandler):
    """An OpenAI-compatible model that asks for ``current_time`` every time."""

    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        call = {"index": 0, "id": f"call_{self.server.requests}", "type": "function",
                "function": {"name": "current_time", "arguments": "{}"}}
        for chunk in ({"choices": [{"index": 0, "delta": {"role": "assistant",
                                                           "tool_calls": [call]}}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}):
            self.wfile.write(f"data: {json.dumps({'id': 'c', **chunk})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Forever)
    thread = threading.Thread(target=srv.serve_forever, name="test-forever-server")
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(WAIT)


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_max_requests_ends_a_run_that_never_stops(server: _Server,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    code, out, err = _run("chat", "-m", "local/tiny", "--base-url", url, "--tools",
                          "--max-requests", "3", "What time is it?")
    assert code == 1
    assert server.requests == 3
    assert "The run reached its limit max_requests=3: 3 requests made." in err
    assert err.count("current_time") >= 3 and out == ""  # one-shot: tool lines on stderr


def test_limit_flags_say_what_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["chat", "-m", "local/tiny", "--max-cost", "0", "hi"])
    assert "argument --max-cost: expected an amount of USD above 0, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["chat", "-m", "local/tiny", "--max-requests", "none", "hi"])
    assert "argument --max-requests: expected a whole number above 0" in capsys.readouterr().err
