"""``CeleryRunner`` on a ``SQLAlchemyStore`` on MariaDB, with real worker processes and a
Redis broker (docs/sessions.md, "Runs on a SQLAlchemyStore"): a run started here executes
on a worker and streams here; a worker killed with SIGKILL mid-tool has its run finished by
the other worker (its lease ran out: the workers' lease check submits the recovery) with
the ``replay`` rules. The app is ``tests/celery/app.py`` with ``PIAGENT_TEST_SQLALCHEMY`` set.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from piagent.messages import ToolResultMessage

from ..conftest import SLOW_WAIT, wait_until
from ..contrib.conftest import open_database
from .conftest import Cluster, redis_base, run_change


class SQLAlchemyCluster(Cluster):
    """A ``Cluster`` whose app keeps its store on a SQLAlchemy URL."""

    _WIRING = (*Cluster._WIRING, "PIAGENT_TEST_SQLALCHEMY")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = redis_base()
    db = 1 + (os.getpid() + 7) % 15
    tmp = tmp_path_factory.mktemp("celery-sqlalchemy")
    for database in open_database("mariadb", tmp):
        c = SQLAlchemyCluster(tmp, f"{base}/{db}", "", "", lease=2.0)
        c.env["PIAGENT_TEST_SQLALCHEMY"] = database.url
        app = c.load_app()
        try:
            c.start("w1")
            c.start("w2")
            yield c
        finally:
            c.stop_all()
            c.restore_env()
            app.store.engine.dispose()
            import redis

            redis.Redis.from_url(f"{base}/{db}").delete(c.queue)


def test_a_run_started_here_executes_on_a_worker_and_streams_here(cluster: Cluster) -> None:
    runner = cluster.runner
    run_id = runner.start("echo-1", "hello")
    events = [e for e in runner.events(run_id, timeout=SLOW_WAIT)]
    assert None not in events and events[-1] is not None and events[-1].type == "agent_end"
    assert runner.wait(run_id, SLOW_WAIT) and runner.status(run_id).state == "done"
    assert [getattr(m, "text", "") for m in cluster.app.store.load("echo-1")  # type: ignore[union-attr]
            if m.role == "assistant"] == ["echo hello"]


def test_a_worker_killed_mid_tool_has_its_run_finished_by_the_other(cluster: Cluster) -> None:
    cluster.ensure("w1", "w2")
    runner = cluster.runner
    run_id = runner.start("kill-1", "do both")
    events: list[Any] = []
    reader = threading.Thread(target=lambda: events.extend(
        e for e in runner.events(run_id, timeout=SLOW_WAIT) if e is not None))
    reader.start()
    ran = cluster.dir / "ran-kill-1"

    def both_started() -> bool:
        return ran.exists() and len(ran.read_text().split("\n")) >= 3

    wait_until(both_started, "look and charge to start on a worker",
               wake=run_change(runner, run_id))
    victim = int(ran.read_text().split()[1])
    name = cluster.kill(victim)
    assert runner.wait(run_id, SLOW_WAIT * 3), f"not recovered; logs:\n{cluster.log('w1')}\n" \
                                               f"{cluster.log('w2')}"
    reader.join(SLOW_WAIT)
    assert not reader.is_alive()
    assert runner.status(run_id).state == "done"
    rows = [line.split() for line in ran.read_text().splitlines()]
    assert sorted(tool for tool, _ in rows) == ["charge", "look", "look"]  # safe ran again
    assert {int(pid) for _, pid in rows[2:]} != {victim}  # on the other worker
    results = {m.tool_call_id: m for m in cluster.app.store.load("kill-1")  # type: ignore[union-attr]
               if isinstance(m, ToolResultMessage)}
    assert results["c-look"].text == "looked" and not results["c-look"].is_error
    assert results["c-charge"].is_error and "not run again" in results["c-charge"].text
    assert events[-1].type == "agent_end"
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    cluster.ensure(name)
