"""A waiting run across real processes (docs/approvals.md): a run started by one process
stops at a call needing approval; that process is killed with SIGKILL; another process
decides through its own ``LocalRunner`` and the run goes on there, on SQLite and PostgreSQL.
When that deciding process is killed too, while the approved call runs, the session's next
start here gives the call the unknown-outcome result: every call ends with exactly one.
"""

from __future__ import annotations

import os
import signal as signals
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from piagent import Agent, ToolResultMessage
from piagent.runs import LocalRunner
from piagent.sessions import PostgresStore, SQLiteStore

from ..conftest import SLOW_WAIT, finish_child as finish, read_child_line
from ..sessions.pg import drop_schema, postgres_dsn, unique_schema

WORKER = Path(__file__).with_name("_approval_worker.py")
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and SIGKILL")


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    dsn = postgres_dsn()
    schema = unique_schema()
    yield f"{dsn}#{schema}"
    drop_schema(dsn, schema)


def open_store(db: str) -> SQLiteStore | PostgresStore:
    if db.startswith("postgresql://"):
        dsn, _, schema = db.partition("#")
        return PostgresStore(dsn, schema=schema, max_connections=2)
    return SQLiteStore(db)


def spawn(ran: Path, *args: str, **extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "APPROVAL_RAN": str(ran), **extra,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)



def ran(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    return [(name, int(pid)) for name, pid in
            (line.split() for line in path.read_text().splitlines())]


@pytest.mark.parametrize("verdict", ["approve", "deny"])
def test_a_waiting_run_survives_sigkill_and_a_decision_elsewhere_resumes_it(
        db: str, tmp_path: Path, verdict: str) -> None:
    record = tmp_path / "ran.txt"
    starter = spawn(record, "start", db, "s1")
    try:
        run_id = read_child_line(starter)
        assert read_child_line(starter) == "waiting"
        os.kill(starter.pid, signals.SIGKILL)
        assert starter.wait(SLOW_WAIT) == -signals.SIGKILL
    finally:
        finish(starter)
    assert ran(record) == [("look", starter.pid)]  # only the call needing no approval ran

    store = open_store(db)
    try:
        runner = LocalRunner(store, lambda sid: Agent())
        assert runner.status(run_id).state == "waiting"  # nothing was lost with the process
        [pending] = runner.pending_approvals("s1")
        assert (pending.tool_call_id, pending.tool_name, pending.decision) == (
            "c-delete", "delete", None)

        decider = spawn(record, "decide", db, "s1", "c-delete", verdict)
        out, err = finish(decider)
        lines = out.splitlines()
        assert decider.returncode == 0, err
        assert len(lines) == 2 and lines[1] == "done", (out, err)
        next_id = lines[0]
        assert next_id != run_id and runner.status(next_id).state == "done"
        assert runner.pending_approvals("s1") == []

        expected = [("look", starter.pid)]
        if verdict == "approve":
            expected.append(("delete", decider.pid))  # run by the deciding process
        assert ran(record) == expected
        messages = store.load("s1")
        results = [m for m in messages if isinstance(m, ToolResultMessage)]
        # every call has exactly one result, in source order
        assert [m.tool_call_id for m in results] == ["c-delete", "c-look"]
        if verdict == "approve":
            assert [m.text for m in results] == ["deleted report", "looked"]
        else:
            assert results[0].is_error and f"deny from pid {decider.pid}" in results[0].text
        final = messages[-1]
        assert final.role == "assistant"
        assert final.text.startswith("results: delete=")  # type: ignore[union-attr]
    finally:
        store.close()


def test_a_decider_killed_while_the_approved_call_runs_leaves_one_unknown_outcome(
        db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ._approval_worker import make_agent

    record = tmp_path / "ran.txt"
    starter = spawn(record, "start", db, "s1")
    try:
        read_child_line(starter)
        assert read_child_line(starter) == "waiting"
    finally:
        starter.kill()
        finish(starter)
    decider = spawn(record, "decide", db, "s1", "c-delete", "approve", APPROVAL_HANG="1",
                    APPROVAL_LEASE="1")
    try:
        lines = {read_child_line(decider), read_child_line(decider)}
        assert "executing" in lines, lines
        [next_id] = lines - {"executing"}
        os.kill(decider.pid, signals.SIGKILL)
        assert decider.wait(SLOW_WAIT) == -signals.SIGKILL
    finally:
        finish(decider)

    store = open_store(db)
    try:
        monkeypatch.setenv("APPROVAL_RAN", str(record))  # where this process's tools write
        runner = LocalRunner(store, make_agent, lease_s=1.0)
        assert runner.wait(next_id, SLOW_WAIT) and runner.status(next_id).state == "lost"
        again = runner.start("s1", "are you there?")
        assert runner.wait(again, SLOW_WAIT) and runner.status(again).state == "done"
        assert [name for name, _ in ran(record)] == ["look", "delete"]  # never run twice
        results = [m for m in store.load("s1") if isinstance(m, ToolResultMessage)]
        assert [m.tool_call_id for m in results] == ["c-delete", "c-look"]
        assert results[0].is_error and "stopped" in results[0].text
        assert results[1].text == "looked"
        assert runner.pending_approvals("s1") == []
    finally:
        store.close()
