"""``piagent chat`` and tool calls that wait for approval (docs/approvals.md): the REPL asks
``Run <tool>(<args>)? [y/N]`` for each waiting call and the answer decides it (``y``
approves, anything else, Enter too, denies); the one-shot form asks on the terminal, and
without one denies each call saying why; ``--tools`` brings ``write_file``, which asks."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from piagent import Agent, ToolResultMessage, tool
from piagent.cli import EventPrinter
from piagent.cli._approve import (
    DENIED_REASON,
    NO_TERMINAL_REASON,
    call_text,
    make_write_file_tool,
    settle,
)
from piagent.cli._chat import _one_shot
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from .conftest import COMMAND_TIMEOUT, chat, when_idle

ROOT = Path(__file__).resolve().parents[2]


def _agent(tmp_path: Path, *calls: tuple[str, dict[str, Any], str]) -> Agent:
    """An agent whose model first asks for ``calls``, then sums the results up."""

    def summary(context: Any, options: Any) -> Any:
        results = [m for m in context.messages if isinstance(m, ToolResultMessage)]
        return assistant_text(" | ".join(m.text for m in results))

    @tool
    def clock() -> str:
        """The time."""
        return "noon"

    scripted = ScriptedStreamFn([assistant_tool_calls(*calls), summary])
    return Agent(model=scripted.model, stream_fn=scripted,
                 tools=[make_write_file_tool(tmp_path), clock])


WRITE = ("write_file", {"path": "a.txt", "content": "hi"}, "c1")


def test_the_chat_asks_and_y_runs_the_call(tmp_path: Path) -> None:
    agent = _agent(tmp_path, WRITE)
    code, out = chat(agent, ["please write it", when_idle(agent, "y"), when_idle(agent, "")])
    assert code == 0
    assert 'Run write_file(path="a.txt", content="hi")? [y/N] ' in out
    assert (tmp_path / "a.txt").read_text() == "hi"
    assert "Wrote 2 bytes to a.txt." in out
    assert agent.pending_approvals() == []
    assert agent.state.messages[-1].text == "Wrote 2 bytes to a.txt."  # type: ignore[union-attr]


def test_any_other_answer_denies_and_each_waiting_call_is_asked_in_turn(
        tmp_path: Path) -> None:
    agent = _agent(tmp_path, WRITE, ("clock", {}, "c2"),
                   ("write_file", {"path": "b.txt", "content": "yo"}, "c3"))
    code, out = chat(agent, ["write two", when_idle(agent, "no"), when_idle(agent, "yes"),
                             when_idle(agent, "")])
    assert code == 0
    first = out.index('Run write_file(path="a.txt", content="hi")? [y/N] ')
    second = out.index('Run write_file(path="b.txt", content="yo")? [y/N] ')
    assert first < second
    assert not (tmp_path / "a.txt").exists() and (tmp_path / "b.txt").read_text() == "yo"
    results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert [m.tool_call_id for m in results] == ["c1", "c2", "c3"]
    assert results[0].is_error and DENIED_REASON in results[0].text
    assert [m.text for m in results[1:]] == ["noon", "Wrote 2 bytes to b.txt."]


def test_enter_alone_denies(tmp_path: Path) -> None:
    agent = _agent(tmp_path, WRITE)
    code, out = chat(agent, ["write", when_idle(agent, ""), when_idle(agent, "/quit")])
    assert code == 0
    assert not (tmp_path / "a.txt").exists()
    assert f"Tool call denied by the user: {DENIED_REASON}" in out


def test_one_shot_asks_on_the_terminal_or_denies_without_one(tmp_path: Path) -> None:
    asked: list[str] = []

    def ask(text: str) -> str:
        asked.append(text)
        return "y"

    agent = _agent(tmp_path, WRITE)
    err = io.StringIO()
    assert _one_shot(agent, "write", EventPrinter(io.StringIO()), err, ask=ask) == 0
    assert asked == ['Run write_file(path="a.txt", content="hi")? [y/N] ']
    assert (tmp_path / "a.txt").read_text() == "hi"

    agent = _agent(tmp_path, ("write_file", {"path": "b.txt", "content": "x"}, "c1"))
    run = settle(agent, agent.prompt("write"), None)
    assert not run.waiting and run.error_message is None
    assert not (tmp_path / "b.txt").exists()
    assert run.text == f"Tool call denied by the user: {NO_TERMINAL_REASON}"


def test_call_text_cuts_long_values() -> None:
    assert call_text("f", {"a": 1, "b": "x" * 500}) == \
        'f(a=1, b="' + "x" * 389 + "...)"
    assert call_text("f", {"a": 1, "b": "x" * 5}) == 'f(a=1, b="xxxxx")'
    assert call_text("g", {}) == "g()"


def test_write_file_stays_in_its_folder(tmp_path: Path) -> None:
    write = make_write_file_tool(tmp_path)
    assert write.needs_approval is True
    with pytest.raises(ValueError, match="outside the folder"):
        write.execute("c", {"path": "../x.txt", "content": "no"}, None, None)


# --- the real command, one-shot, no terminal --------------------------------------------


class _ToolServer(ThreadingHTTPServer):
    """An OpenAI-compatible server: the first request gets a ``write_file`` call, the
    next ones the text ``finished`` (with ``repeat``: each request whose last message is the
    user's gets the call, always with the id ``call_w``)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ToolHandler)
        self.bodies: list[dict[str, Any]] = []
        self.repeat = False  # True: every user message gets a write_file call (id call_w)


class _ToolHandler(BaseHTTPRequestHandler):
    server: _ToolServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        asks = body["messages"][-1]["role"] == "user" if self.server.repeat \
            else len(self.server.bodies) == 1
        if asks:  # the same call id every time, as servers that number per response do
            n = sum(m["role"] == "user" for m in body["messages"])
            name = "out.txt" if n == 1 else f"out{n}.txt"
            arguments = json.dumps({"path": name, "content": "hello"})
            delta: dict[str, Any] = {"role": "assistant", "tool_calls": [{
                "index": 0, "id": "call_w", "type": "function",
                "function": {"name": "write_file", "arguments": arguments}}]}
            finish = "tool_calls"
        else:
            delta, finish = {"role": "assistant", "content": "finished"}, "stop"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in ({"choices": [{"index": 0, "delta": delta}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}):
            chunk.update(id="c1", object="chat.completion.chunk", model=body["model"])
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@pytest.fixture
def tool_server() -> Iterator[_ToolServer]:
    import threading

    from tests.conftest import WAIT

    server = _ToolServer()
    # owner: this fixture; stopped by shutdown() and joined below
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="test-tool-server")
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


def _piagent(server: _ToolServer, folder: Path, *args: str,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
           "PIAGENT_HISTORY": os.devnull}
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return subprocess.run([sys.executable, "-m", "piagent", "chat", "-m", "local/tiny",
                           "--base-url", url, "--tools", *args], capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT, env=env, cwd=folder,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)


def test_one_shot_without_a_terminal_denies_write_file(tool_server: _ToolServer,
                                                       tmp_path: Path) -> None:
    proc = _piagent(tool_server, tmp_path, "write", "a", "file")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "finished\n"
    assert not (tmp_path / "out.txt").exists()
    tools = [t["function"]["name"] for t in tool_server.bodies[0]["tools"]]
    assert "write_file" in tools
    sent = json.dumps(tool_server.bodies[1]["messages"][-1])
    assert "Tool call denied by the user" in sent and "no terminal to ask on" in sent


def test_a_session_left_waiting_asks_again_when_resumed(tool_server: _ToolServer,
                                                         tmp_path: Path) -> None:
    db = str(tmp_path / "sessions.db")
    first = _piagent(tool_server, tmp_path, "--session", "w", "--sessions-db", db,
                     stdin="write a file\n")  # input ends at the question: the call waits
    assert first.returncode == 0, first.stderr
    assert 'Run write_file(path="out.txt", content="hello")? [y/N] ' in first.stdout
    assert len(tool_server.bodies) == 1 and not (tmp_path / "out.txt").exists()

    second = _piagent(tool_server, tmp_path, "--session", "w", "--sessions-db", db,
                      stdin="y\n")  # a new process: the waiting call is asked about first
    assert second.returncode == 0, second.stderr
    assert "(the last run waits for your approval)" in second.stdout
    assert 'Run write_file(path="out.txt", content="hello")? [y/N] ' in second.stdout
    assert (tmp_path / "out.txt").read_text() == "hello"
    assert "assistant> finished" in second.stdout
    assert len(tool_server.bodies) == 2


def test_a_command_at_the_question_asks_again(tmp_path: Path) -> None:
    agent = _agent(tmp_path, WRITE)
    code, out = chat(agent, ["write", when_idle(agent, "/help"), when_idle(agent, "y"),
                             when_idle(agent, "/quit")])
    assert code == 0
    question = 'Run write_file(path="a.txt", content="hi")? [y/N] '
    assert out.count(question) == 2  # asked, /help answered, asked again
    assert (tmp_path / "a.txt").read_text() == "hi"


def test_terminal_ask_writes_the_question_to_stderr_and_reads_stdin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from piagent.cli._approve import terminal_ask

    err = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    ask = terminal_ask(err)
    assert ask("Run f()? [y/N] ") == "y"
    assert ask("Run g()? [y/N] ") == ""  # end of input: no
    assert err.getvalue() == "Run f()? [y/N] Run g()? [y/N] "


def test_a_repeated_call_id_is_asked_about_and_run_each_time(tool_server: _ToolServer,
                                                             tmp_path: Path) -> None:
    tool_server.repeat = True
    db = str(tmp_path / "sessions.db")
    proc = _piagent(tool_server, tmp_path, "--session", "w", "--sessions-db", db,
                    stdin="write a file\ny\nwrite another\ny\n")
    assert proc.returncode == 0, proc.stderr
    assert 'Run write_file(path="out.txt", content="hello")? [y/N] ' in proc.stdout
    assert 'Run write_file(path="out2.txt", content="hello")? [y/N] ' in proc.stdout
    assert (tmp_path / "out.txt").read_text() == "hello"
    assert (tmp_path / "out2.txt").read_text() == "hello"
    # the answers decided the calls: no "y" reached the model as a user message
    users = [m["content"] if isinstance(m["content"], str) else
             "".join(part.get("text", "") for part in m["content"])
             for m in tool_server.bodies[-1]["messages"] if m["role"] == "user"]
    assert users == ["write a file", "write another"]
    assert len(tool_server.bodies) == 4


def test_two_waiting_calls_of_one_reply_with_one_id_are_asked_about_each(
        tmp_path: Path) -> None:
    # a model may give two calls of one reply the same id: each answer decides its own call
    agent = _agent(tmp_path, ("write_file", {"path": "a.txt", "content": "hi"}, "c1"),
                   ("write_file", {"path": "b.txt", "content": "yo"}, "c1"))
    code, out = chat(agent, ["write two", when_idle(agent, "no"), when_idle(agent, "y"),
                             when_idle(agent, "")])
    assert code == 0
    assert out.index('Run write_file(path="a.txt", content="hi")? [y/N] ') < \
        out.index('Run write_file(path="b.txt", content="yo")? [y/N] ')
    assert not (tmp_path / "a.txt").exists() and (tmp_path / "b.txt").read_text() == "yo"
    results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.is_error) for m in results] == [("c1", True), ("c1", False)]
