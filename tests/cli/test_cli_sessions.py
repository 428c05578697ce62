"""``piagent chat --session NAME`` and ``piagent sessions``: the real command (``main()``, and
``python -m piagent`` in subprocesses where one process follows another) against a local
OpenAI-compatible server. A conversation is kept in SQLite, resumed by a
second process (the model sees both runs), listed, deleted; a transcript a crashed process
left mid-batch is finished; bad names and the database's location."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent.cli import main
from piagent.messages import (
    AssistantMessage,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from piagent.sessions import SQLiteStore

from .conftest import COMMAND_TIMEOUT, ChatServer, serving

ROOT = Path(__file__).resolve().parents[2]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or ())


def _answer(body: dict[str, Any]) -> tuple[str, None]:
    """"reply N to: TEXT" (N: user messages the request holds, TEXT: the last one), or "the
    tool said: RESULT" when the request ends in a tool result."""
    messages = body["messages"]
    users = [m for m in messages if m["role"] == "user"]
    if messages[-1]["role"] == "tool":
        return f"the tool said: {_text(messages[-1]['content'])}", None
    return f"reply {len(users)} to: {_text(users[-1]['content'])}", None


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with serving(_answer) as srv:
        yield srv


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


def _piagent(*args: str, db: Path | None, stdin: str | None = None,
             env: dict[str, str] | None = None, process: bool = False
             ) -> subprocess.CompletedProcess[str]:
    """``piagent ARGS`` with ``stdin`` piped in: through ``main()`` in this process, or
    with ``process`` as ``python -m piagent`` in a subprocess."""
    full = {"NO_COLOR": "1", "PIAGENT_HISTORY": os.devnull, **(env or {})}
    if process:
        child = {**os.environ, "PYTHONPATH": str(ROOT), **full}
        child.pop("PIAGENT_SESSIONS_DB", None)
        if db is not None:
            child["PIAGENT_SESSIONS_DB"] = str(db)
        return subprocess.run([sys.executable, "-m", "piagent", *args], capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT, env=child, input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL,
                              cwd=ROOT)
    saved_env, saved_stdin = dict(os.environ), sys.stdin
    os.environ.update(full)
    os.environ.pop("PIAGENT_SESSIONS_DB", None)
    if db is not None:
        os.environ["PIAGENT_SESSIONS_DB"] = str(db)
    out, err = io.StringIO(), io.StringIO()
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        sys.stdin = saved_stdin
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _chat(srv: ChatServer, *args: str, db: Path | None, stdin: str | None = None,
          env: dict[str, str] | None = None, process: bool = False
          ) -> subprocess.CompletedProcess[str]:
    url = srv.url
    return _piagent("chat", "-m", "local/tiny", "--base-url", url, *args, db=db, stdin=stdin,
                    env=env, process=process)


def _roles_and_texts(path: Path, name: str) -> list[tuple[str, str]]:
    with SQLiteStore(path) as store:
        messages = store.load(name)
    shown = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            text = "".join(b.text for b in m.content if isinstance(b, TextContent))
        elif isinstance(m, (UserMessage, SystemMessage)):
            text = m.text
        else:
            text = m.role
        shown.append((m.role, text))
    return shown


def test_a_session_is_kept_and_resumed_by_the_next_process(server: ChatServer, db: Path) -> None:
    first = _chat(server, "--session", "work", db=db, stdin="hello\nhow are you\n",
                  process=True)
    assert first.returncode == 0, first.stderr
    assert "(new session work)" in first.stdout
    assert "assistant> reply 2 to: how are you" in first.stdout

    second = _chat(server, "--session", "work", db=db, stdin="and now?\n/quit\n",
                   process=True)
    assert second.returncode == 0, second.stderr
    out = second.stdout
    assert "(resumed session work: 4 messages)" in out
    # the last exchange is shown before the prompt
    assert "you> how are you\nassistant> reply 2 to: how are you\n" in out
    # the model saw the first process's messages: this is its third user message
    assert "assistant> reply 3 to: and now?" in out
    sent = [(m["role"], _text(m["content"])) for m in server.bodies[-1]["messages"]]
    assert sent == [("system", "You are a helpful assistant."), ("user", "hello"),
                    ("assistant", "reply 1 to: hello"), ("user", "how are you"),
                    ("assistant", "reply 2 to: how are you"), ("user", "and now?")]
    # the file holds both runs' messages, in order, and only once
    assert _roles_and_texts(db, "work") == [
        ("system", "You are a helpful assistant."), ("user", "hello"),
        ("assistant", "reply 1 to: hello"), ("user", "how are you"),
        ("assistant", "reply 2 to: how are you"), ("user", "and now?"),
        ("assistant", "reply 3 to: and now?")]


def test_sessions_are_separate_and_a_chat_without_session_keeps_nothing(
        server: ChatServer, db: Path) -> None:
    assert _chat(server, "--session", "a", db=db, stdin="for a\n").returncode == 0
    assert _chat(server, "--session", "b", db=db, stdin="for b\n").returncode == 0
    plain = _chat(server, db=db, stdin="not kept\n")
    assert plain.returncode == 0, plain.stderr
    assert "session" not in plain.stdout.replace("session:", "")
    assert _roles_and_texts(db, "a")[1:] == [("user", "for a"), ("assistant", "reply 1 to: for a")]
    assert _roles_and_texts(db, "b")[1:] == [("user", "for b"), ("assistant", "reply 1 to: for b")]
    with SQLiteStore(db) as store:
        assert store.session_ids() == ["a", "b"]


def test_one_shot_question_uses_the_session_and_keeps_stdout_for_the_answer(
        server: ChatServer, db: Path) -> None:
    first = _chat(server, "--session", "q", "first", "question", db=db)
    assert first.returncode == 0, first.stderr
    assert "(new session q)" in first.stderr
    assert "session q" not in first.stdout
    second = _chat(server, "--session", "q", "second", db=db)
    assert second.returncode == 0, second.stderr
    assert "(resumed session q: 2 messages)" in second.stderr
    assert second.stdout == "reply 2 to: second\n"
    assert [role for role, _ in _roles_and_texts(db, "q")] == [
        "system", "user", "assistant", "user", "assistant"]


def test_sessions_lists_and_deletes(server: ChatServer, db: Path) -> None:
    empty = _piagent("sessions", db=db)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == f"no sessions in {db}\n"
    assert not db.exists()  # listing does not create the file

    assert _chat(server, "--session", "work", db=db, stdin="plan the week\nthanks\n"
                 ).returncode == 0
    assert _chat(server, "--session", "x", db=db, stdin="hi\n").returncode == 0
    listing = _piagent("sessions", db=db)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0] == f"2 sessions in {db}"
    assert lines[1].startswith("work  4 messages  20") and lines[1].endswith("'plan the week'")
    assert lines[2].startswith("x     2 messages  20") and lines[2].endswith("'hi'")

    deleted = _piagent("sessions", "--delete", "work", db=db)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"deleted session work from {db}\n"
    with SQLiteStore(db) as store:
        assert store.session_ids() == ["x"]
    again = _piagent("sessions", "--delete", "work", db=db)
    assert again.returncode == 1
    assert again.stderr == f"piagent sessions: no session 'work' in {db}\n"
    assert _piagent("sessions", "--delete", "x", db=db).returncode == 0
    assert _piagent("sessions", db=db).stdout == f"no sessions in {db}\n"


def test_reset_clears_the_stored_session(server: ChatServer, db: Path) -> None:
    proc = _chat(server, "--session", "r", db=db, stdin="remember this\n/help\n/reset\nfresh\n")
    assert proc.returncode == 0, proc.stderr
    assert "with --session it clears the stored session too" in proc.stdout
    assert "(conversation cleared; session r cleared too)" in proc.stdout
    assert "assistant> reply 1 to: fresh" in proc.stdout
    assert _roles_and_texts(db, "r") == [("system", "You are a helpful assistant."),
                                         ("user", "fresh"), ("assistant", "reply 1 to: fresh")]
    again = _chat(server, "--session", "r", db=db, stdin="")
    assert "(resumed session r: 2 messages)" in again.stdout


@pytest.mark.parametrize(("name", "error"), [
    ("", "piagent chat: --session NAME: the name is empty; give 1 to 200 characters, "
         "for example --session work.\n"),
    ("n" * 201, "piagent chat: --session NAME: the name has 201 characters; the most is 200.\n"),
])
def test_a_bad_session_name_is_a_usage_error(db: Path, name: str, error: str) -> None:
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", "http://127.0.0.1:9/v1",
                    "--session", name, db=db, stdin="hi\n")
    assert proc.returncode == 2
    assert proc.stderr == error
    assert proc.stdout == ""
    assert not db.exists()
    proc = _piagent("sessions", "--delete", name, db=db)
    assert proc.returncode == 2
    assert proc.stderr.startswith("piagent sessions: --delete NAME: the name ")


def test_the_flag_beats_the_environment_and_the_default_is_the_data_folder(
        server: ChatServer, tmp_path: Path) -> None:
    env_db, flag_db, data = tmp_path / "env.db", tmp_path / "flag.db", tmp_path / "data"
    proc = _chat(server, "--session", "s", "--sessions-db", str(flag_db), db=env_db,
                 stdin="to the flag\n")
    assert proc.returncode == 0, proc.stderr
    assert flag_db.exists() and not env_db.exists()
    assert _chat(server, "--session", "s", db=env_db, stdin="to the env\n").returncode == 0
    assert _roles_and_texts(env_db, "s")[1] == ("user", "to the env")
    assert _roles_and_texts(flag_db, "s")[1] == ("user", "to the flag")
    listing = _piagent("sessions", "--sessions-db", str(flag_db), db=env_db)
    assert listing.stdout.splitlines()[0] == f"1 session in {flag_db}"

    # neither: sessions.db in $XDG_DATA_HOME/piagent, its folder created
    xdg = {"XDG_DATA_HOME": str(data), "HOME": str(tmp_path)}
    proc = _chat(server, "--session", "d", db=None, env=xdg, stdin="to the default\n")
    assert proc.returncode == 0, proc.stderr
    default = data / "piagent" / "sessions.db"
    if sys.platform.startswith("linux"):
        assert _roles_and_texts(default, "d")[1] == ("user", "to the default")
        assert _piagent("sessions", db=None, env=xdg).stdout.startswith(
            f"1 session in {default}\n")


def test_a_named_database_in_a_missing_folder_or_not_sqlite_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "s.db"
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", "http://127.0.0.1:9/v1",
                    "--session", "s", db=missing, stdin="hi\n")
    assert proc.returncode == 2
    assert proc.stderr == (f"piagent chat: the sessions database {missing} (from "
                           f"--sessions-db or $PIAGENT_SESSIONS_DB): the folder "
                           f"{missing.parent} does not exist.\n")
    junk = tmp_path / "junk.db"
    junk.write_text("not a database at all, just text" * 100)
    proc = _piagent("sessions", db=junk)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"piagent sessions: cannot use the sessions database {junk} ")
    assert "Traceback" not in proc.stderr


def test_a_batch_a_crashed_process_left_is_finished_on_resume(server: ChatServer, db: Path) -> None:
    """The transcript ends in a tool call without a result (the process died while it ran,
    before marking it started): the next chat runs it, then the model answers."""
    with SQLiteStore(db) as store:
        store.append("crash", [
            SystemMessage("You are a helpful assistant.", timestamp=0),
            UserMessage("what is 6 * 7?"),
            AssistantMessage(content=[ToolCall("call_1", "calculator", {"expression": "6 * 7"})],
                             stop_reason="toolUse", api="openai-completions",
                             provider="local", model="tiny"),
        ])
    proc = _chat(server, "--session", "crash", "--tools", db=db, stdin="thanks\n",
                 process=True)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "(resumed session crash: 2 messages)" in out
    assert "(the last run stopped before 1 tool call finished (calculator); finishing them now)" \
        in out
    assert "assistant> the tool said: 42" in out
    assert out.index("the tool said: 42") < out.index("reply 2 to: thanks")
    with SQLiteStore(db) as store:
        messages = store.load("crash")
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("call_1", False)]
    assert [m.role for m in messages if m.role != "system"] == [
        "user", "assistant", "toolResult", "assistant", "user", "assistant"]


def test_an_explicit_system_prompt_does_not_change_a_resumed_session(
        server: ChatServer, db: Path) -> None:
    assert _chat(server, "--session", "s", "--system", "Be brief.", db=db, stdin="hi\n"
                 ).returncode == 0
    proc = _chat(server, "--session", "s", "--system", "Be verbose.", db=db, stdin="again\n")
    assert "(--system is ignored: session s keeps the system prompt it started with)" \
        in proc.stdout
    assert server.bodies[-1]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_an_unreadable_session_is_named_not_a_traceback(server: ChatServer, db: Path) -> None:
    import sqlite3

    assert _chat(server, "--session", "bad", db=db, stdin="hi\n").returncode == 0
    assert _chat(server, "--session", "good", db=db, stdin="hi\n").returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE piagent_records SET data = '{\"role\": \"nosuch\"}' "
                     "WHERE session_id = 'bad' AND seq = 1")
    conn.close()
    proc = _chat(server, "--session", "bad", db=db, stdin="hi\n")
    assert proc.returncode == 1
    assert proc.stderr.startswith("piagent chat: --session bad: Session 'bad': record 1 "
                                  "cannot be decoded: ")
    assert proc.stderr.endswith(f"(in {db}; 'piagent sessions --delete bad' removes the "
                                "session).\n")
    assert "Traceback" not in proc.stderr
    lines = _piagent("sessions", db=db).stdout.splitlines()
    assert lines[1].startswith("bad   unreadable  20") and "record 1 cannot be decoded" in lines[1]
    assert lines[2].startswith("good  2 messages  20")


def test_an_interactive_chat_resumes_on_a_terminal(server: ChatServer, db: Path) -> None:
    pexpect = pytest.importorskip("pexpect", reason="pexpect runs the chat on a pty")
    url = server.url
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
           "PIAGENT_HISTORY": os.devnull, "PIAGENT_SESSIONS_DB": str(db), "TERM": "dumb"}
    argv = ["-m", "piagent", "chat", "-m", "local/tiny", "--base-url", url, "--session", "tty"]
    for typed, expected in [("first", "(new session tty)"),
                            ("second", "(resumed session tty: 2 messages)")]:
        child = pexpect.spawn(sys.executable, argv, env=env, encoding="utf-8", timeout=COMMAND_TIMEOUT,
                              cwd=str(ROOT))
        try:
            child.expect_exact(expected)
            child.expect_exact("you> ")
            child.sendline(typed)
            child.expect_exact(f"to: {typed}")
            child.expect_exact("you> ")
            child.sendline("/quit")
            child.expect(pexpect.EOF)
        finally:
            child.close()
        assert child.exitstatus == 0
    assert [text for role, text in _roles_and_texts(db, "tty") if role == "user"] == [
        "first", "second"]


def test_the_user_data_folder_on_each_platform(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    from piagent.cli._sessions import sessions_db_path, user_data_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    monkeypatch.delenv("PIAGENT_SESSIONS_DB", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", "/xdg/data")
    assert user_data_dir() == Path("/xdg/data/piagent")
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # invalid by the XDG spec: ignored
    assert user_data_dir() == tmp_path / ".local" / "share" / "piagent"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert user_data_dir() == tmp_path / ".local" / "share" / "piagent"
    assert sessions_db_path(None) == (tmp_path / ".local/share/piagent/sessions.db", True)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert user_data_dir() == tmp_path / "Library" / "Application Support" / "piagent"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("APPDATA", str(tmp_path / "Roaming"))
    assert user_data_dir() == tmp_path / "Roaming" / "piagent"
    monkeypatch.setenv("PIAGENT_SESSIONS_DB", "~/s.db")
    assert sessions_db_path(None) == (tmp_path / "s.db", False)
    assert sessions_db_path(str(tmp_path / "f.db")) == (tmp_path / "f.db", False)


def test_reset_says_so_when_the_store_refuses_and_the_chat_goes_on() -> None:
    from collections.abc import Sequence

    from piagent import Agent
    from piagent.messages import AgentMessage
    from piagent.sessions import MemoryStore
    from piagent.testing import ScriptedStreamFn, assistant_text

    from .conftest import chat, when_idle

    class ReadOnlyAfterStart(MemoryStore):
        """Refuses ``replace`` once ``locked`` (a database that went read-only, say)."""

        locked = False

        def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
            if self.locked:
                msg = "attempt to write a readonly database"
                raise OSError(msg)
            super().replace(session_id, messages)

    store = ReadOnlyAfterStart()
    scripted = ScriptedStreamFn([assistant_text("one"), assistant_text("two")])
    agent = Agent(system_prompt="Hi.", model=scripted.model, stream_fn=scripted, store=store,
                  session_id="ro")
    store.locked = True

    code, out = chat(agent, ["first", when_idle(agent, "/reset"), "second",
                             when_idle(agent, "/quit")])
    assert code == 0
    assert ("could not clear session ro: OSError: attempt to write a readonly database "
            "(the conversation goes on unchanged)") in out
    assert "assistant> two" in out
    assert [m.role for m in store.load("ro")] == ["system", "user", "assistant", "user",
                                                  "assistant"]
