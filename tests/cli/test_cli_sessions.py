"""``piagent chat --session NAME`` keeps a conversation in the user's sessions file and
picks it up next time; ``piagent sessions`` lists the kept ones. The real command in a
subprocess, against the local OpenAI-compatible server of ``test_cli_oneshot``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from piagent.cli._sessions import sessions_db_path
from piagent.sessions import SQLiteStore

from . import test_cli_oneshot as oneshot
from .test_cli_oneshot import ROOT, TIMEOUT, _Server, _url

server = oneshot.server  # the local OpenAI-compatible server, as a fixture here too


def _piagent(tmp_path: Path, *args: str, stdin: str | None = None,
             **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
                   "PIAGENT_HISTORY": os.devnull, "XDG_DATA_HOME": str(tmp_path / "data"),
                   "HOME": str(tmp_path / "home")}
    environment.pop("PIAGENT_SESSIONS_DB", None)
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "piagent", *args], capture_output=True,
                          text=True, timeout=TIMEOUT, env=environment, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def _texts(body: dict) -> list[tuple[str, str]]:
    out = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        out.append((message["role"], content))
    return out


def test_a_session_is_kept_and_picked_up_again(server: _Server, tmp_path: Path) -> None:
    chat = ("chat", "-m", "local/tiny", "--base-url", _url(server), "--session", "work")
    first = _piagent(tmp_path, *chat, "My name is Linh.")
    assert first.returncode == 0, first.stderr
    db = tmp_path / "data" / "piagent" / "sessions.db"
    assert db.is_file()

    second = _piagent(tmp_path, *chat, stdin="What is my name?\n/quit\n")
    assert second.returncode == 0, second.stderr
    assert f"(session 'work': 2 earlier messages, kept in {db})" in second.stdout
    assert _texts(server.bodies[1])[1:] == [
        ("user", "My name is Linh."), ("assistant", "Hello there."),
        ("user", "What is my name?")]

    with SQLiteStore(db) as store:
        assert [m.role for m in store.load("work")] == [
            "system", "user", "assistant", "user", "assistant"]

    listed = _piagent(tmp_path, "sessions")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["SESSION", "MESSAGES", "LAST", "ACTIVITY"]
    name, count, day, _time = lines[1].split()
    assert (name, count) == ("work", "5")
    assert len(day) == 10 and day[4] == "-"
    assert lines[-1] == f"(1 session in {db})"


def test_reset_clears_the_kept_session(server: _Server, tmp_path: Path) -> None:
    chat = ("chat", "-m", "local/tiny", "--base-url", _url(server), "--session", "s")
    proc = _piagent(tmp_path, *chat, stdin="hello\n/reset\n/quit\n")
    assert proc.returncode == 0, proc.stderr
    assert "(new session 's', kept in" in proc.stdout
    with SQLiteStore(tmp_path / "data" / "piagent" / "sessions.db") as store:
        assert [m.role for m in store.load("s")] == ["system"]


def test_the_sessions_file_can_be_chosen(server: _Server, tmp_path: Path) -> None:
    by_env = tmp_path / "env.db"
    by_flag = tmp_path / "flag.db"
    chat = ("chat", "-m", "local/tiny", "--base-url", _url(server), "--session", "a", "hi")
    assert _piagent(tmp_path, *chat, PIAGENT_SESSIONS_DB=str(by_env)).returncode == 0
    assert _piagent(tmp_path, *chat, "--sessions-db", str(by_flag),
                    PIAGENT_SESSIONS_DB=str(by_env)).returncode == 0
    with SQLiteStore(by_env) as store:
        assert len(store.load("a")) == 3
    with SQLiteStore(by_flag) as store:
        assert len(store.load("a")) == 3
    assert not (tmp_path / "data").exists()
    listed = _piagent(tmp_path, "sessions", "--sessions-db", str(by_flag))
    assert listed.stdout.splitlines()[1].split()[:2] == ["a", "3"]


def test_sessions_with_no_file_creates_nothing(tmp_path: Path) -> None:
    proc = _piagent(tmp_path, "sessions")
    assert proc.returncode == 0, proc.stderr
    db = tmp_path / "data" / "piagent" / "sessions.db"
    assert proc.stdout.startswith(f"no sessions yet in {db}")
    assert not db.exists()


def test_a_bad_session_name_says_what_is_accepted(tmp_path: Path) -> None:
    proc = _piagent(tmp_path, "chat", "-m", "local/tiny", "--base-url", "http://127.0.0.1:9/v1",
                    "--session", "x" * 201, "hi")
    assert proc.returncode == 2
    assert "piagent chat: --session: A session id must be a non-empty str of at most 200" \
        in proc.stderr


def test_default_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PIAGENT_SESSIONS_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert sessions_db_path() == tmp_path / "xdg" / "piagent" / "sessions.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert sessions_db_path() == tmp_path / "home" / ".local" / "share" / "piagent" / "sessions.db"
    monkeypatch.setenv("PIAGENT_SESSIONS_DB", str(tmp_path / "e.db"))
    assert sessions_db_path() == tmp_path / "e.db"
    assert sessions_db_path(str(tmp_path / "f.db")) == tmp_path / "f.db"
