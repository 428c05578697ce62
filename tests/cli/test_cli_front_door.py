"""What the chat says, at the front door: a server given with ``--base-url`` is named by its
address (not "OpenAI API error"), a resumed session keeps its tools without ``--tools``
(nothing "removed" is written into its history), and text typed during a text-only reply is
told when it is delivered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from piagent import Agent
from piagent.cli._output import server_words
from piagent.sessions import SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT

from .conftest import COMMAND_TIMEOUT, ChatServer, after, chat, serving, when_idle

ROOT = Path(__file__).resolve().parents[2]


def _piagent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
            "PIAGENT_HISTORY": os.devnull, **(env or {})}
    return subprocess.run([sys.executable, "-m", "piagent", *args], capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT, env=full,
                          stdin=subprocess.DEVNULL, cwd=ROOT)


class _NotFound(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"error": {"message": "model 'gpt-4o-mini' not found"}}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def _not_found_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


def test_a_server_given_with_base_url_is_named_by_its_address(tmp_path: Path) -> None:
    env = {"PIAGENT_SESSIONS_DB": str(tmp_path / "sessions.db")}
    with _not_found_server() as url:
        chat_args = ("chat", "-m", "openai/gpt-4o-mini", "--base-url", url, "--session", "w")
        proc = _piagent(*chat_args, "hi", env=env)
        resumed = _piagent(*chat_args, env=env)  # stdin empty: the recap, then the end
    error = (f"The server at {url} answered with an error (404): model 'gpt-4o-mini' not "
             "found. Check the model id and the base URL.")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == f"(new session w)\npiagent chat: the run failed: {error}\n"  # once
    # the stored error, shown in the resumed chat's recap, is said the same way
    assert f"assistant> (error: {error})" in resumed.stdout
    assert "OpenAI" not in proc.stderr + resumed.stdout + resumed.stderr


@pytest.mark.parametrize(("library", "terminal"), [
    ("OpenAI API error (500): boom. The provider had a server error; retry later.",
     "The server at URL answered with an error (500): boom. The server had an error; retry "
     "later."),
    ("OpenAI Responses API error (404): no such model",
     "The server at URL answered with an error (404): no such model"),
    ("Could not connect to OpenAI at 127.0.0.1:9 (connection refused) for URL/chat/completions;"
     " is the server running? Check base_url.",
     "Could not connect to the server at 127.0.0.1:9 (connection refused) for "
     "URL/chat/completions; is the server running? Check --base-url."),
    ("OpenAI request failed (OpenAI API error (503): busy); retrying (1 of 2) in 0.5 s",
     "The request failed (The server at URL answered with an error (503): busy); retrying "
     "(1 of 2) in 0.5 s"),
    ("The OpenAI stream ended without finish_reason", "The stream from the server at URL ended "
     "without finish_reason"),
    ("OpenAI answered with Content-Type 'text/html'", "The server at URL answered with "
     "Content-Type 'text/html'"),
    ("OpenAI sent an event whose data is not valid JSON", "The server at URL sent an event "
     "whose data is not valid JSON"),
])
def test_every_library_text_that_names_the_provider_names_the_server(library: str,
                                                                      terminal: str) -> None:
    assert server_words("OpenAI", "URL")(library) == terminal


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with serving(lambda body: ("ok", None)) as srv:
        yield srv


def test_a_resumed_session_keeps_its_tools_without_the_flag(server: ChatServer,
                                                            tmp_path: Path) -> None:
    env = {"PIAGENT_SESSIONS_DB": str(tmp_path / "sessions.db")}
    chat_args = ("chat", "-m", "local/tiny", "--base-url", server.url, "--session", "w")
    first = _piagent(*chat_args, "--tools", "first", env=env)
    assert first.returncode == 0, first.stderr
    second = _piagent(*chat_args, "second", env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout == "ok\n"
    assert second.stderr == ("(resumed session w: 2 messages)\n(session w keeps its tools: "
                             "read_file, list_folder, calculator, current_time, write_file)\n")
    tools = [tool["function"]["name"] for tool in server.bodies[-1]["tools"]]
    assert tools == ["read_file", "list_folder", "calculator", "current_time", "write_file"]
    with SQLiteStore(tmp_path / "sessions.db") as store:
        roles = [message.role for message in store.load("w")]
    assert roles == ["system", "user", "assistant", "user", "assistant"]  # nothing removed


def test_text_typed_during_a_text_only_reply_is_told_it_comes_after_the_reply() -> None:
    streaming, release = threading.Event(), threading.Event()

    def slow_reply(context: Any, options: Any) -> Any:
        streaming.set()
        assert release.wait(WAIT)
        return assistant_text("a long answer")

    scripted = ScriptedStreamFn([
        slow_reply,
        lambda context, options: assistant_text("Steer seen: " + context.messages[-1].text),
    ])
    agent = Agent(model=scripted.model, stream_fn=scripted)

    def release_then_quit() -> str:
        release.set()
        return "/help"

    code, out = chat(agent, ["explain", after(streaming, "shorter, please"),
                             release_then_quit, when_idle(agent, "/quit")])
    assert code == 0
    assert "(steering message queued: delivered when the model's current reply ends)" in out
    assert "after the current tool batch)" not in out.split("Commands:")[0]
    assert "Steer seen: shorter, please" in out
