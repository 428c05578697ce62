"""Runs addressed by id (docs/sessions.md): start, stream, steer and stop a run from any process.

``LocalRunner(store, make_agent)`` executes each run on threads of the process that starts it
and keeps its state, events and control inbox beside the session store: in memory for a
``MemoryStore``, in the same file for an ``SQLiteStore`` (so every process on the machine can
stream, steer and abort it). ``QueuedRunner(store, make_agent, submit)`` records a run and
hands it to a task queue; whichever process takes it calls ``execute`` (``piagent.celery``
builds on it). ``Runner`` is the protocol all of them keep. ``RunEvent`` is one event with its ordered id, ``RunInfo`` a
run's state and times; an unknown run id raises ``RunNotFoundError``. A run that ends with
tool calls waiting for approval reads ``waiting``; ``pending_approvals``, ``approve`` and
``deny`` decide them by session id from any process (docs/approvals.md).
"""

from __future__ import annotations

from ._base import Runner
from ._queued import QueuedRunner
from ._runner import LocalRunner
from ._types import RunEvent, RunInfo, RunNotFoundError, RunState

__all__ = ["LocalRunner", "QueuedRunner", "RunEvent", "RunInfo", "RunNotFoundError", "RunState",
           "Runner"]
