"""``CeleryRunner``'s lease check, without a broker server (Celery's in-memory transport; here,
beside the runs tests, because it plays a dead executor through the private runs backend).

Each worker process runs one ``piagent-lease-check`` thread from ``worker_ready`` to
``worker_shutdown``; it submits the recovery of a run whose lease ran out (the run then
reads ``running``: held by the recovery on its way). A bad ``lease_check_s`` fails at once.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from piagent import Agent
from piagent.runs._registry import backend_for
from piagent.sessions import SQLiteStore

from ..conftest import WAIT, wait_until

celery = pytest.importorskip("celery", reason="Celery is not installed (pip install 'piagent[celery]')")
from piagent.celery import CeleryRunner  # noqa: E402 - needs celery


class _Worker:
    """What Celery passes as the worker signals' sender (the consumer: it has ``app``)."""

    def __init__(self, app: object) -> None:
        self.app = app


def _app(name: str) -> object:
    return celery.Celery(name, broker="memory://")


def test_a_bad_lease_check_is_refused(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        for bad in (0, -1, "5", True, float("nan")):
            with pytest.raises(ValueError, match="lease_check_s must be None or a number of "
                                                 "seconds > 0"):
                CeleryRunner(_app("bad"), store, lambda sid: Agent(), lease_check_s=bad)  # type: ignore[arg-type]


def test_the_worker_thread_submits_a_lapsed_runs_recovery_and_stops(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        app = _app("lease-check")
        runner = CeleryRunner(app, store, lambda sid: Agent(), lease_s=0.3, lease_check_s=0.05,
                              name="piagent.test-lease-check")
        run_id = runner.start("s1", "hello")  # sent to the in-memory queue
        backend = backend_for(store)
        assert backend.take_run(run_id, "dead-worker", 0.3).kind == "fresh"  # type: ignore[attr-defined]
        backend.set_running(run_id, "dead-worker")  # and it died
        wait_until(lambda: runner.status(run_id).state == "lost", "the dead lease to lapse",
                   wake=lambda seconds: runner.wait(run_id, seconds))
        worker = _Worker(app)
        celery.signals.worker_ready.send(sender=worker)
        try:
            wait_until(lambda: runner.status(run_id).state == "running",
                       "the lease check to submit the recovery",
                       wake=lambda seconds: runner.wait(run_id, seconds), timeout=WAIT)
            assert [t.name for t in threading.enumerate()].count("piagent-lease-check") == 1
        finally:
            celery.signals.worker_shutdown.send(sender=worker)
        assert "piagent-lease-check" not in [t.name for t in threading.enumerate()]
