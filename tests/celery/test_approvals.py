"""Tool calls that wait for approval on real Celery workers (docs/approvals.md): a run stops
at a call needing approval on a worker and reads ``waiting``; the worker that ran it is
killed with SIGKILL; another process (a web request, say) approves through its
``CeleryRunner``, and the run that goes on is submitted to the queue and executed by the
other worker: the approved call runs there, once, and the run ends ``done``.
"""

from __future__ import annotations

import subprocess
import sys

from piagent.messages import ToolResultMessage

from ..conftest import SLOW_WAIT
from .conftest import ROOT, Cluster


def _approve_elsewhere(cluster: Cluster, session_id: str, call_id: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tests.celery._client", "approve", session_id,
                           call_id], cwd=ROOT, env=cluster.env, capture_output=True, text=True,
                          timeout=SLOW_WAIT * 2, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _ran(cluster: Cluster, session_id: str) -> list[tuple[str, int]]:
    path = cluster.dir / f"ran-{session_id}"
    return [(name, int(pid)) for name, pid in (line.split() for line in
                                               path.read_text().splitlines())]


def test_a_waiting_run_outlives_its_worker_and_goes_on_on_another(cluster: Cluster) -> None:
    cluster.ensure("w1", "w2")
    runner = cluster.runner
    run_id = runner.start("approve-1", "go")
    assert runner.wait(run_id, SLOW_WAIT * 2), cluster.log("w1") + cluster.log("w2")
    assert runner.status(run_id).state == "waiting"
    types = [e.type for e in runner.events(run_id, timeout=SLOW_WAIT) if e is not None]
    assert "tool_approval_request" in types and types[-1] == "agent_end"
    [(tool, first_pid)] = _ran(cluster, "approve-1")
    assert tool == "look"  # the call needing approval has not run
    [pending] = runner.pending_approvals("approve-1")
    assert (pending.tool_call_id, pending.decision) == ("c-delete", None)

    killed = cluster.kill(first_pid)  # the worker that ran it: nothing of the run is lost
    survivor = next(p.pid for n, p in cluster.workers.items() if n != killed)

    next_id = _approve_elsewhere(cluster, "approve-1", "c-delete")
    assert next_id not in ("none", run_id)
    assert runner.wait(next_id, SLOW_WAIT * 2), cluster.log("w1") + cluster.log("w2")
    assert runner.status(next_id).state == "done"
    assert _ran(cluster, "approve-1") == [("look", first_pid), ("delete", survivor)]
    assert runner.pending_approvals("approve-1") == []
    messages = cluster.app.store.load("approve-1")  # type: ignore[union-attr]
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.text) for m in results] == [("c-delete", "deleted report"),
                                                          ("c-look", "looked")]
    assert messages[-1].text == "results: delete=deleted report; look=looked"  # type: ignore[union-attr]


def test_a_repeated_call_id_waits_again_on_the_workers(cluster: Cluster) -> None:
    # each prompt of an approve-* session asks for c-delete: the second is a new call
    cluster.ensure("w1", "w2")
    runner = cluster.runner
    for round_ in (1, 2):
        run_id = runner.start("approve-again", f"go {round_}")
        assert runner.wait(run_id, SLOW_WAIT * 2), cluster.log("w1") + cluster.log("w2")
        assert runner.status(run_id).state == "waiting"
        [pending] = runner.pending_approvals("approve-again")
        assert (pending.tool_call_id, pending.decision) == ("c-delete", None)
        next_id = runner.approve("approve-again", pending.call_key, digest=pending.digest)
        assert next_id is not None
        assert runner.wait(next_id, SLOW_WAIT * 2), cluster.log("w1") + cluster.log("w2")
        assert runner.status(next_id).state == "done"
        assert runner.pending_approvals("approve-again") == []
    assert [name for name, _ in _ran(cluster, "approve-again")] == [
        "look", "delete", "look", "delete"]
    messages = cluster.app.store.load("approve-again")  # type: ignore[union-attr]
    assert [m.text for m in messages if isinstance(m, ToolResultMessage)] == [
        "deleted report", "looked"] * 2
