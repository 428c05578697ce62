"""Real Celery workers for the tests: a Redis broker, PostgreSQL, worker subprocesses.

``PIAGENT_TEST_REDIS`` (default ``redis://127.0.0.1:6379``) names the Redis server; each test
module gets a db number from its pid and a queue of its own, so parallel runs do not meet.
PostgreSQL comes from ``tests/sessions/pg.py`` (a private schema). Either missing: the tests
skip saying why (``PIAGENT_REQUIRE_ALL=1`` turns that into a failure).

``Cluster`` starts ``celery -A tests.celery.app worker --pool threads`` subprocesses, waits
(bounded) for each one's ready file, kills one with SIGKILL on request and stops every worker
it started at teardown (SIGTERM, then SIGKILL, each by its pid).
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ..conftest import SLOW_WAIT, wait_until
from ..sessions.pg import drop_schema, postgres_dsn, unique_schema

ROOT = Path(__file__).resolve().parents[2]
WORKER_START_S = 60.0  # a worker's import and broker connection, on a loaded machine


def redis_base() -> str:
    url = os.environ.get("PIAGENT_TEST_REDIS", "redis://127.0.0.1:6379").rstrip("/")
    try:
        import redis
    except ImportError:
        pytest.skip("redis-py is not installed (pip install 'piagent[celery]')")
    pytest.importorskip("celery", reason="Celery is not installed (pip install 'piagent[celery]')")
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {url} (PIAGENT_TEST_REDIS) is unreachable: {exc}")
    return url


def exit_of(process: subprocess.Popen[bytes]) -> Callable[[float], object]:
    """A ``wake`` for ``wait_until``: returns when ``process`` exits, or after the seconds given."""

    def wake(seconds: float) -> None:
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            pass

    return wake


def run_change(runner: Any, run_id: str) -> Callable[[float], object]:
    """A ``wake`` for ``wait_until``: returns when the run ends, or after the seconds given."""
    return lambda seconds: runner.wait(run_id, seconds)


class Cluster:
    """The broker, the store and the workers of one test module."""

    def __init__(self, tmp: Path, redis_url: str, dsn: str, schema: str, lease: float) -> None:
        self.dir = tmp
        self.queue = f"piagent-test-{uuid.uuid4().hex[:8]}"
        self.env = dict(os.environ, PIAGENT_TEST_REDIS=redis_url, PIAGENT_TEST_POSTGRES=dsn,
                        PIAGENT_TEST_SCHEMA=schema, PIAGENT_TEST_QUEUE=self.queue,
                        PIAGENT_TEST_DIR=str(tmp), PIAGENT_TEST_LEASE=str(lease),
                        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.app: ModuleType | None = None

    _WIRING = ("PIAGENT_TEST_REDIS", "PIAGENT_TEST_POSTGRES", "PIAGENT_TEST_SCHEMA",
               "PIAGENT_TEST_QUEUE", "PIAGENT_TEST_DIR", "PIAGENT_TEST_LEASE")

    def load_app(self) -> ModuleType:
        """Import ``tests.celery.app`` here, wired like the workers (``restore_env`` undoes
        the wiring of this process's environment)."""
        self._saved = {key: os.environ.get(key) for key in self._WIRING}
        for key in self._WIRING:
            os.environ[key] = self.env[key]
        sys.modules.pop("tests.celery.app", None)
        self.app = importlib.import_module("tests.celery.app")
        return self.app

    def restore_env(self) -> None:
        """This process's environment as before ``load_app`` (the next module's cluster
        reads ``PIAGENT_TEST_REDIS`` without this one's db number)."""
        for key, value in getattr(self, "_saved", {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    @property
    def runner(self) -> Any:
        assert self.app is not None
        return self.app.runner

    def start(self, name: str, concurrency: int = 4,
              **env: str) -> subprocess.Popen[bytes]:
        """Start worker ``name`` (``env`` overrides its environment) and wait until ready."""
        ready = self.dir / f"ready-{name}"
        queue = env.get("PIAGENT_TEST_QUEUE", self.queue)
        ready.unlink(missing_ok=True)
        log = (self.dir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.celery.app", "worker", "--pool",
             "threads", "-c", str(concurrency), "-Q", queue, "-n", f"{name}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"],
            cwd=ROOT, env=dict(self.env, PIAGENT_TEST_WORKER=name, **env), stdout=log,
            stderr=subprocess.STDOUT)
        log.close()
        self.workers[name] = process
        wait_until(lambda: ready.exists() or process.poll() is not None,
                   f"worker {name} to be ready", wake=exit_of(process), timeout=WORKER_START_S)
        if process.poll() is not None:
            raise AssertionError(f"worker {name} exited ({process.returncode}):\n"
                                 f"{self.log(name)}")
        return process

    def ensure(self, *names: str) -> None:
        for name in names:
            process = self.workers.get(name)
            if process is None or process.poll() is not None:
                self.start(name)

    def log(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self, name: str) -> None:
        """Stop worker ``name`` (SIGTERM, then SIGKILL)."""
        process = self.workers.pop(name)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(SLOW_WAIT)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait(SLOW_WAIT)

    def kill(self, pid: int) -> str:
        """SIGKILL the worker whose pid this is; its name."""
        for name, process in self.workers.items():
            if process.pid == pid:
                process.send_signal(signal.SIGKILL)
                process.wait(SLOW_WAIT)
                return name
        raise AssertionError(f"pid {pid} is not a worker of this cluster")

    def stop_all(self) -> None:
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.workers.values():
            try:
                process.wait(SLOW_WAIT)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait(SLOW_WAIT)
        self.workers.clear()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = redis_base()
    dsn = postgres_dsn()
    schema = unique_schema()
    db = 1 + os.getpid() % 15
    tmp = tmp_path_factory.mktemp("celery")
    c = Cluster(tmp, f"{base}/{db}", dsn, schema, lease=2.0)
    app = c.load_app()
    try:
        c.start("w1")
        c.start("w2")
        yield c
    finally:
        c.stop_all()
        c.restore_env()
        app.store.close()
        drop_schema(dsn, schema)
        import redis

        client = redis.Redis.from_url(f"{base}/{db}")
        client.delete(c.queue)
