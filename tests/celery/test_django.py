"""``CeleryRunner`` on a ``DjangoStore`` with a real Celery worker and a Redis broker, on
SQLite, PostgreSQL and MariaDB (docs/sessions.md, "Runs on the Django store"): a run started
here executes on the worker, is streamed here by polling the database, steered from here
while its tool waits, and a second run is aborted from here."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest

from ..conftest import SLOW_WAIT, wait_until
from ..contrib.conftest import DJANGO_ALIASES, prepare_django_database
from .conftest import Cluster, redis_base, run_change


class DjangoCluster(Cluster):
    """A ``Cluster`` whose app keeps its runs in a ``DjangoStore`` (``tests/celery/app.py``)."""

    _WIRING = (*Cluster._WIRING, "PIAGENT_TEST_DJANGO_ALIAS", "PIAGENT_TEST_DJANGO_DATABASES")


@pytest.fixture(scope="module", params=sorted(DJANGO_ALIASES))
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            django_databases: list[str]) -> Iterator[Cluster]:

    base = redis_base()
    alias = DJANGO_ALIASES[request.param]
    prepare_django_database(alias)
    django_databases.append(alias)
    from django.conf import settings

    db = 1 + os.getpid() % 15
    c = DjangoCluster(tmp_path_factory.mktemp("celery-django"), f"{base}/{db}", "", "",
                      lease=2.0)
    c.env.update(PIAGENT_TEST_DJANGO_ALIAS=alias,
                 PIAGENT_TEST_DJANGO_DATABASES=json.dumps(settings.DATABASES))
    c.load_app()
    try:
        c.start("w1", concurrency=2)
        yield c
    finally:
        c.stop_all()
        c.restore_env()
        import redis

        redis.Redis.from_url(f"{base}/{db}").delete(c.queue)


def test_a_worker_executes_streams_is_steered_and_aborted(cluster: Cluster) -> None:
    runner = cluster.runner
    session = f"block-{uuid.uuid4().hex[:8]}"
    (cluster.dir / f"expect-steer-{session}").touch()
    run_id = runner.start(session, "go")
    wait_until((cluster.dir / f"entered-{session}").exists, "the block tool to start",
               wake=run_change(runner, run_id))
    runner.steer(session, "steered")
    (cluster.dir / f"gate-{session}").touch()
    events = [e for e in runner.events(run_id, timeout=SLOW_WAIT)]
    assert None not in events
    types = [e.type for e in events if e is not None]
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    assert runner.wait(run_id, SLOW_WAIT) and runner.status(run_id).state == "done"
    assert [m.text for m in cluster.app.store.load(session)  # type: ignore[union-attr]
            if m.role == "user"] == ["go", "steered"]

    (cluster.dir / f"gate-{session}").unlink()
    (cluster.dir / f"entered-{session}").unlink()
    (cluster.dir / f"expect-steer-{session}").unlink()
    second = runner.start(session, "again")
    wait_until((cluster.dir / f"entered-{session}").exists, "the block tool to start again",
               wake=run_change(runner, second))
    runner.abort(second, "stop from the test")
    assert runner.wait(second, SLOW_WAIT) and runner.status(second).state == "aborted"
