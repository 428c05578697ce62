"""``LocalRunner`` on an ``SQLiteStore`` across real processes (docs/sessions.md).

A run starts in one child process; this process streams its events by id; other children
steer and abort it. A child killed with SIGKILL leaves its run to lose its lease (``lost``),
and the next start of the session, here, recovers the transcript with ``agent.resume()``.
"""

from __future__ import annotations

import os
import signal as signals
import subprocess
import sys
from pathlib import Path

import pytest

from piagent import Agent, AssistantMessage, ToolResultMessage
from piagent.runs import LocalRunner
from piagent.sessions import SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import SLOW_WAIT, finish_child as finish, read_child_line
from ._worker import build_tools
from .conftest import steered_and_aborted_elsewhere

WORKER = Path(__file__).with_name("_worker.py")
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and SIGKILL")


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)


def run_worker(*args: str) -> None:
    done = subprocess.run([sys.executable, str(WORKER), *args], capture_output=True, env=ENV,
                          timeout=SLOW_WAIT, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")



def test_stream_steer_and_abort_a_run_in_another_process(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    steered_and_aborted_elsewhere(SQLiteStore(db), db, spawn, run_worker)


def test_a_killed_process_loses_its_run_and_the_next_start_recovers_it(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    proc = spawn("start", db, "s1", "1", "hang")
    try:
        run_id = read_child_line(proc)
        assert read_child_line(proc) == "executing"  # marked started, then executing: kill it
        os.kill(proc.pid, signals.SIGKILL)
        assert proc.wait(SLOW_WAIT) == -signals.SIGKILL
    finally:
        finish(proc)

    scripted = ScriptedStreamFn([assistant_text("recovered"), assistant_text("and answered")])
    store = SQLiteStore(db)
    runner = LocalRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted,
                                                  system_prompt="worker",
                                                  tools=build_tools([])))
    assert runner.status(run_id).state in ("running", "lost")
    assert runner.wait(run_id, SLOW_WAIT), "the run never lost its lease"  # lost is final
    assert runner.status(run_id).state == "lost"
    # a reader of the lost run gets what was stored and stops: no agent_end will come
    stored = [e for e in runner.events(run_id, timeout=SLOW_WAIT)]
    assert None not in stored
    types = [e.type for e in stored if e is not None]
    assert types[0] == "agent_start"
    assert "tool_execution_end" not in types and "agent_end" not in types

    again = runner.start("s1", "are you there?")
    events = [e for e in runner.events(again, timeout=SLOW_WAIT)]
    assert None not in events
    assert runner.wait(again, SLOW_WAIT) and runner.status(again).state == "done"
    assert runner.status(run_id).state == "lost"
    messages = store.load("s1")
    assert [m.role for m in messages] == ["system", "user", "assistant", "toolResult",
                                          "assistant", "user", "assistant"]
    result = messages[3]
    assert isinstance(result, ToolResultMessage) and result.is_error
    assert "stopped" in result.text
    assert isinstance(messages[4], AssistantMessage) and messages[4].text == "recovered"
    assert messages[5].text == "are you there?"  # type: ignore[union-attr]
    assert [e.type for e in events if e.type in ("agent_start", "agent_end")] == [
        "agent_start", "agent_end"]


def test_processes_racing_to_start_one_session_get_one_run(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    SQLiteStore(db).session_ids()  # the file exists before the race
    procs = [spawn("start", db, "s1", "30", "hang") for _ in range(3)]
    try:
        firsts = [read_child_line(p) for p in procs]
        winners = [p for p, line in zip(procs, firsts, strict=True)
                   if not line.startswith("busy:")]
        assert len(winners) == 1, firsts
        assert sum(line.startswith("busy: Session 's1' already has a live run") for line in firsts) == 2
        # the run's tool says "executing" on its own thread, maybe before start() returned
        # and the main thread said the run id: the two lines come in either order
        said = {next(line for line in firsts if not line.startswith("busy:")),
                read_child_line(winners[0])}
        assert "executing" in said and len(said) == 2, said
        runner = LocalRunner(SQLiteStore(db), lambda sid: Agent())
        run_id = (said - {"executing"}).pop()
        assert runner.status(run_id).state == "running"
        runner.abort(run_id, "the test is over")  # the hang tool watches its signal
        assert runner.wait(run_id, SLOW_WAIT)
        assert runner.status(run_id).state == "aborted"
    finally:
        for p in procs:
            finish(p)
    assert [p.returncode for p in procs].count(3) == 2
