"""Steering from another sender reaches the run at its next poll point, exactly once, in
order (docs/sessions.md): a run of three tool batches, each batch held until two steers sent
from elsewhere have *returned*; each pair must be in the transcript right after its batch.

``MemoryStore``: the sender is another thread (a memory store cannot cross processes).
``SQLiteStore`` and ``PostgresStore``: the sender is another process (``_worker.py sender``).
The run executes here, so the test opens each batch's gate itself. Repeated, because a
steer committed just before the poll point was the one that went missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import Agent, tool
from piagent.messages import ToolResultMessage, UserMessage
from piagent.runs import LocalRunner
from piagent.sessions import MemoryStore, PostgresStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import SLOW_WAIT, WAIT, read_child_line
from ..sessions.pg import drop_schema, postgres_dsn, unique_schema

WORKER = Path(__file__).with_name("_worker.py")
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
REPEATS = 20
BATCHES = 3

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")

Send = Callable[[str, str, str], None]  # (kind, session_id, text), returns once sent


def expected_transcript(batches: int = BATCHES) -> list[str]:
    """The roles and texts of a run where each batch's two steers came at its poll point."""
    out = ["user:go"]
    for n in range(1, batches + 1):
        out += [f"assistant:batch {n}", f"toolResult:gate {n}",
                f"user:b{n}-a", f"user:b{n}-b"]
    return [*out, "assistant:done"]


def summary(messages: list[Any]) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m, UserMessage):
            out.append(f"user:{m.text}")
        elif isinstance(m, ToolResultMessage):
            out.append(f"toolResult:{m.content[0].text}")  # type: ignore[union-attr]
        elif m.role == "assistant":
            calls = m.tool_calls
            out.append(f"assistant:batch {calls[0].arguments['n']}" if calls
                       else f"assistant:{m.text}")
    return out


class ThreeBatches:
    """A ``LocalRunner`` whose agents call ``gate(n)`` in batches 1..3, then answer ``done``."""

    def __init__(self, store: SessionStore) -> None:
        # per batch: set when its tool starts; the test sets the gate to let it return
        self.entered = {n: threading.Event() for n in range(1, BATCHES + 1)}
        self.gates = {n: threading.Event() for n in range(1, BATCHES + 1)}
        entered, gates = self.entered, self.gates

        @tool
        def gate(n: int) -> str:
            """Wait for the test to open batch ``n``."""
            entered[n].set()
            if not gates[n].wait(WAIT):
                raise TimeoutError(f"the test never opened gate {n}")
            return f"gate {n}"

        def answer(context: Any, options: Any) -> Any:
            done = sum(isinstance(m, ToolResultMessage) for m in context.messages)
            if done < BATCHES:
                return assistant_tool_calls(("gate", {"n": done + 1}))
            return assistant_text("done")

        def make_agent(session_id: str) -> Agent:
            scripted = ScriptedStreamFn([answer] * (BATCHES + 1))
            return Agent(model=scripted.model, stream_fn=scripted, tools=[gate],
                         system_prompt="test", steering_mode="all")

        self.store = store
        self.runner = LocalRunner(store, make_agent)

    def run(self, session_id: str, send: Send) -> list[str]:
        run_id = self.runner.start(session_id, "go")
        for n in range(1, BATCHES + 1):
            assert self.entered[n].wait(WAIT), f"batch {n} never started"
            send("steer", session_id, f"b{n}-a")
            send("steer", session_id, f"b{n}-b")
            self.gates[n].set()
        assert self.runner.wait(run_id, WAIT)
        assert self.runner.status(run_id).state == "done"
        return summary(self.store.load(session_id)[1:])


@pytest.fixture(scope="module")
def postgres_target() -> Iterator[tuple[PostgresStore, str]]:
    dsn = postgres_dsn()
    schema = unique_schema()
    store = PostgresStore(dsn, schema=schema, max_connections=8)
    try:
        yield store, f"{dsn}#{schema}"
    finally:
        store.close()
        drop_schema(dsn, schema)


@pytest.fixture(scope="module")
def sqlite_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SQLiteStore, str]]:
    db = str(tmp_path_factory.mktemp("steer") / "runs.db")
    with SQLiteStore(db) as store:
        yield store, db


class SenderProcess:
    """``_worker.py sender`` (or another ``worker`` script's): steers sent from another
    process, one line each."""

    def __init__(self, target: str, worker: Path = WORKER) -> None:
        self.proc = subprocess.Popen([sys.executable, str(worker), "sender", target],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=ENV)
        assert read_child_line(self.proc) == "ready"

    def send(self, kind: str, session_id: str, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{kind} {session_id} {text}\n".encode())
        self.proc.stdin.flush()
        assert read_child_line(self.proc) == "sent"  # its steer() has returned

    def close(self) -> None:
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.proc.stdin.close()  # EOF: the sender ends
        try:
            self.proc.wait(SLOW_WAIT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(SLOW_WAIT)
            err = self.proc.stderr.read().decode(errors="replace")
            self.proc.stdout.close()
            self.proc.stderr.close()
        assert self.proc.returncode == 0, err


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stored(request: pytest.FixtureRequest) -> Iterator[tuple[SessionStore, SenderProcess]]:
    store, target = request.getfixturevalue(f"{request.param}_target")
    sender = SenderProcess(target)
    try:
        yield store, sender
    finally:
        sender.close()


@pytest.mark.parametrize("attempt", range(REPEATS))
def test_steers_from_another_process_reach_their_poll_point(
        stored: tuple[SessionStore, SenderProcess], attempt: int) -> None:
    store, sender = stored
    assert ThreeBatches(store).run(f"s{attempt}", sender.send) == expected_transcript()


@pytest.mark.parametrize("attempt", range(REPEATS))
def test_steers_from_another_thread_reach_their_poll_point(attempt: int) -> None:
    store = MemoryStore()
    harness = ThreeBatches(store)

    def send(kind: str, session_id: str, text: str) -> None:
        sender = threading.Thread(target=getattr(harness.runner, kind), args=(session_id, text))
        sender.start()
        sender.join(WAIT)
        assert not sender.is_alive()

    assert harness.run("s1", send) == expected_transcript()
