"""``CeleryRunner``: a ``QueuedRunner`` whose ``submit`` sends a Celery task.

The task (``name``, by default ``piagent.run``) is registered on the app when the runner is
built, with ``acks_late=True`` and ``reject_on_worker_lost=True``.

A worker that dies mid-run (kill -9) stops renewing its run's lease. Each worker process
(from ``worker_ready`` to ``worker_shutdown``) runs one thread, ``piagent-lease-check``,
that calls ``recover_lost()`` every ``lease_check_s``: the first worker to see the lapsed
lease submits the run's recovery, and the worker that takes it resumes the transcript by the
``replay`` rules (``QueuedRunner``). So a killed worker's run goes on within about
``lease_s + lease_check_s`` (plus a task's trip through the broker), whatever the broker's
``visibility_timeout``; the broker's own redelivery of the unacknowledged message, later,
finds the run held or final and does nothing.

A run that ends with tool calls waiting for approval reads ``waiting``; ``approve()`` /
``deny()`` from any process (a web request) record the decision in the store, and the one
that completes the batch submits the run that goes on as a new task (docs/approvals.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..agent import Agent
from ..runs import QueuedRunner
from ..sessions import SessionStore

__all__ = ["CeleryRunner"]

logger = logging.getLogger("piagent.celery")

# the runner each task name belongs to in this process, so a task finds its runner;
# guarded by _REGISTRY_LOCK (any thread building a runner)
_REGISTRY: dict[tuple[int, str], CeleryRunner] = {}
_REGISTRY_LOCK = threading.Lock()


def _import_celery() -> Any:
    try:
        import celery  # type: ignore[import-untyped]
    except ImportError as exc:
        msg = "CeleryRunner needs Celery: pip install 'piagent[celery]'"
        raise ImportError(msg) from exc
    return celery


class CeleryRunner(QueuedRunner):
    """Runs addressed by id (docs/sessions.md) that execute on Celery workers (docs/celery.md).

    ``app`` is your ``celery.Celery``; ``store`` a ``PostgresStore`` (or, on one machine,
    an ``SQLiteStore``) that web processes and workers share; ``make_agent(session_id)``
    builds the Agent on the worker. ``queue`` routes the task (``None``: the app's
    default); ``name`` is the task's name (one runner per name and app). ``lease_s``,
    ``queue_timeout`` and ``redelivery_grace`` are ``QueuedRunner``'s; ``lease_check_s`` is
    how often each worker looks for runs whose lease ran out and submits their recovery
    (``None``: never; then only the broker's redelivery, or your own ``recover_lost()``
    calls, recover a killed worker's run). Build it at import
    time of a module the worker imports too (the app's module, or one in its ``include``).
    """

    def __init__(self, app: Any, store: SessionStore, make_agent: Callable[[str], Agent], *,
                 lease_s: float = 30.0, queue: str | None = None, name: str = "piagent.run",
                 queue_timeout: float = 600.0, redelivery_grace: float = 60.0,
                 lease_check_s: float | None = 5.0) -> None:
        celery = _import_celery()
        if lease_check_s is not None and (
                isinstance(lease_check_s, bool) or not isinstance(lease_check_s, (int, float))
                or not lease_check_s > 0):
            msg = f"lease_check_s must be None or a number of seconds > 0, got {lease_check_s!r}."
            raise ValueError(msg)
        check = None if lease_check_s is None else float(lease_check_s)
        if not isinstance(app, celery.Celery):
            msg = f"app must be a celery.Celery application, got {type(app).__name__}."
            raise TypeError(msg)
        if queue is not None and (not isinstance(queue, str) or not queue):
            msg = f"queue must be None or a non-empty queue name, got {queue!r}."
            raise ValueError(msg)
        if not isinstance(name, str) or not name:
            msg = f"name must be a non-empty task name, got {name!r}."
            raise ValueError(msg)
        super().__init__(store, make_agent, self._submit_task, lease_s=lease_s,
                         queue_timeout=queue_timeout, redelivery_grace=redelivery_grace)
        self.app = app
        self.queue = queue
        self.name = name
        with _REGISTRY_LOCK:
            _REGISTRY[(id(app), name)] = self
        self.task = app.task(name=name, bind=True, acks_late=True, reject_on_worker_lost=True,
                             ignore_result=True, serializer="json")(_execute_task)
        self.lease_check_s = check
        # the worker's lease check: its thread and the event that stops it. Set and cleared
        # by the worker_ready / worker_shutdown handlers (the worker's main thread).
        self._check_stop = threading.Event()
        self._check_thread: threading.Thread | None = None
        if check is not None:
            signals = celery.signals
            signals.worker_ready.connect(self._on_worker_ready, weak=False)
            signals.worker_shutdown.connect(self._on_worker_shutdown, weak=False)

    def __repr__(self) -> str:
        return f"CeleryRunner({self.store!r}, task={self.name!r}, lease_s={self.lease_s:g})"

    def _on_worker_ready(self, sender: Any = None, **kwargs: Any) -> None:
        if getattr(sender, "app", self.app) is not self.app or self._check_thread is not None:
            return  # another app's worker, or started already
        self._check_stop.clear()
        self._check_thread = threading.Thread(target=self._check_leases, daemon=True,
                                              name="piagent-lease-check")
        self._check_thread.start()

    def _on_worker_shutdown(self, sender: Any = None, **kwargs: Any) -> None:
        thread, self._check_thread = self._check_thread, None
        if thread is not None:
            self._check_stop.set()
            thread.join(10.0)

    def _check_leases(self) -> None:
        """The worker's lease check: ``recover_lost()`` every ``lease_check_s``."""
        assert self.lease_check_s is not None
        while not self._check_stop.wait(self.lease_check_s):
            try:
                self.recover_lost()
            except Exception:  # the store is away: the next check tries again
                logger.exception("the lease check failed; trying again in %g s",
                                 self.lease_check_s)

    def _submit_task(self, run_id: str, payload: dict[str, Any]) -> None:
        options: dict[str, Any] = {} if self.queue is None else {"queue": self.queue}
        self.task.apply_async(args=(run_id, payload), **options)


def _execute_task(task: Any, run_id: str, payload: dict[str, Any]) -> str | None:
    """The Celery task: find this task's runner in this process and execute the run."""
    with _REGISTRY_LOCK:
        runner = _REGISTRY.get((id(task.app), task.name))
    if runner is None:
        msg = (f"no CeleryRunner named {task.name!r} was built in this worker; build it in "
               "a module the worker imports (the Celery app's module, or one in its include)")
        raise RuntimeError(msg)
    return runner.execute(run_id, payload)
