"""Runs on a ``DjangoStore`` across real processes, on SQLite, PostgreSQL and MariaDB
(docs/sessions.md, "Runs on the Django store").

A run starts in a child process (Django configured with this process's databases); this
process streams its events by id, polling the database; other children steer and abort it.
A child killed with SIGKILL mid-tool leaves its run to lose its lease, and
``manage.py piagent_recover_runs`` (``call_command``, with a runner built here) resumes it
with the ``replay`` rules: the run's stream goes on with ``run_resumed``.
"""

from __future__ import annotations

import io
import json
import os
import signal as signals
import subprocess
import sys
from pathlib import Path

import pytest

from piagent import Agent, ToolResultMessage
from piagent.runs import LocalRunner
from piagent.sessions import SessionStore
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import SLOW_WAIT, finish_child as finish, read_child_line, wait_until
from ._worker import build_tools
from .conftest import DJANGO, steered_and_aborted_elsewhere, store_fixture

WORKER = Path(__file__).with_name("_worker.py")
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and SIGKILL")

store = store_fixture(*DJANGO)


def _env() -> dict[str, str]:
    from django.conf import settings

    return {**os.environ, "PIAGENT_TEST_DJANGO_DATABASES": json.dumps(settings.DATABASES),
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env())


def run_worker(*args: str) -> None:
    done = subprocess.run([sys.executable, str(WORKER), *args], capture_output=True,
                          env=_env(), timeout=SLOW_WAIT, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_stream_steer_and_abort_a_run_in_another_process(store: SessionStore) -> None:
    db = f"django:{store.using}"  # type: ignore[attr-defined]
    steered_and_aborted_elsewhere(store, db, spawn, run_worker)


def test_a_killed_process_s_run_is_resumed_by_the_recover_command(store: SessionStore) -> None:
    from django.core.management import call_command

    db = f"django:{store.using}"  # type: ignore[attr-defined]
    proc = spawn("start", db, "s1", "1", "hang")
    scripted = ScriptedStreamFn([assistant_text("recovered")])
    runner = LocalRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted,
                                                  system_prompt="worker",
                                                  tools=build_tools([])), lease_s=10)
    try:
        run_id = read_child_line(proc)
        assert read_child_line(proc) == "executing"  # marked started, then executing
        # the run records "running" a moment after its tool may start: then kill it
        wait_until(lambda: runner.status(run_id).state == "running", "the run to run",
                   wake=lambda seconds: runner.wait(run_id, seconds))
        os.kill(proc.pid, signals.SIGKILL)
        assert proc.wait(SLOW_WAIT) == -signals.SIGKILL
    finally:
        finish(proc)

    assert runner.wait(run_id, SLOW_WAIT), "the run never lost its lease"
    assert runner.status(run_id).state == "lost"
    out = io.StringIO()
    call_command("piagent_recover_runs", runner=runner, timeout=SLOW_WAIT, stdout=out)
    assert out.getvalue().splitlines() == [f"{run_id}: done", "Resumed 1 run."]
    messages = store.load("s1")
    assert [m.role for m in messages] == ["system", "user", "assistant", "toolResult",
                                          "assistant"]
    result = messages[3]
    assert isinstance(result, ToolResultMessage) and result.is_error  # replay="never"
    types = [e.type for e in runner.events(run_id, timeout=SLOW_WAIT) if e is not None]
    assert types.count("agent_start") == 1 and "run_resumed" in types
    assert types[-1] == "agent_end"
    # nothing left to recover
    out = io.StringIO()
    call_command("piagent_recover_runs", runner=runner, stdout=out)
    assert out.getvalue().splitlines() == ["Resumed 0 runs."]
