"""Runs on Celery workers (docs/celery.md, extra ``piagent[celery]``).

``CeleryRunner(app, store, make_agent)`` has ``LocalRunner``'s interface; ``start`` records
a queued run in ``store`` and sends a task (acknowledged late, rejected when its worker is
lost), and the run executes on whichever worker takes it. Build the runner in a module that
both the web processes and the workers import, so the worker has the task and
``make_agent``. Events, steering and aborts travel through the store (PostgreSQL's
LISTEN/NOTIFY wakes the other side); the broker carries only the task.
"""

from __future__ import annotations

from ._runner import CeleryRunner

__all__ = ["CeleryRunner"]
