"""``CeleryRunner``: a ``QueuedRunner`` whose ``submit`` sends a Celery task.

The task (``name``, by default ``piagent.run``) is registered on the app when the runner is
built, with ``acks_late=True`` and ``reject_on_worker_lost=True``: a worker that dies
mid-run (kill -9) leaves its message unacknowledged, the broker delivers it again (Redis:
after its ``visibility_timeout``), and the worker that takes it waits for the dead worker's
lease to run out and recovers the transcript by the ``replay`` rules (``QueuedRunner``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..agent import Agent
from ..runs import QueuedRunner
from ..sessions import SessionStore

__all__ = ["CeleryRunner"]

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
    ``queue_timeout`` and ``redelivery_grace`` are ``QueuedRunner``'s. Build it at import
    time of a module the worker imports too (the app's module, or one in its ``include``).
    """

    def __init__(self, app: Any, store: SessionStore, make_agent: Callable[[str], Agent], *,
                 lease_s: float = 30.0, queue: str | None = None, name: str = "piagent.run",
                 queue_timeout: float = 600.0, redelivery_grace: float = 60.0) -> None:
        celery = _import_celery()
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

    def __repr__(self) -> str:
        return f"CeleryRunner({self.store!r}, task={self.name!r}, lease_s={self.lease_s:g})"

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
