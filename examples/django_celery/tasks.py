"""The Celery app, the store and the runner: imported by the web process *and* the worker.

Start a worker from this folder with ``celery -A tasks worker --pool threads -c 8 -l info``.
Both sides build the same ``CeleryRunner`` here, at import time: the web process uses it to
start, stream, steer and stop runs; the worker gets the task it registers and the
``make_agent`` it calls. Configuration comes from the environment:

* ``PIAGENT_POSTGRES``: the PostgreSQL DSN (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
* ``PIAGENT_SCHEMA``: the schema for transcripts and runs (default ``piagent_chat``)
* ``PIAGENT_REDIS``: the Celery broker (default ``redis://127.0.0.1:6379/0``)
* ``PIAGENT_QUEUE``: the queue the runs go to (default ``piagent``)
* ``PIAGENT_MODEL``: ``provider/model-id`` for a real model (default: the offline script)
* ``PIAGENT_STEP_S``: seconds per step of the demo's counting tool (default 0.5)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from celery import Celery  # type: ignore[import-untyped]

from piagent.agent import Agent
from piagent.celery import CeleryRunner
from piagent.sessions import PostgresStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "flask_chat"))
import chat_agent  # noqa: E402 - the demo agent the chat examples share

QUEUE = os.environ.get("PIAGENT_QUEUE", "piagent")

app = Celery("piagent_chat", broker=os.environ.get("PIAGENT_REDIS", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,  # a worker takes one run per free thread, no more
    broker_connection_retry_on_startup=True,
    # a run longer than this is delivered again (and waited for, not run twice): keep it
    # above your longest run. A killed worker's run is recovered by the lease, not by this:
    # within PIAGENT_LEASE_S + 5 s, by another worker's lease check (docs/celery.md)
    broker_transport_options={"visibility_timeout": float(
        os.environ.get("PIAGENT_VISIBILITY_S", "3600"))},
)

store = PostgresStore(os.environ.get("PIAGENT_POSTGRES",
                                     "postgresql://postgres@127.0.0.1:5432/postgres"),
                      schema=os.environ.get("PIAGENT_SCHEMA", "piagent_chat"),
                      max_connections=10)


def make_agent(session_id: str) -> Agent:
    """One user's Agent, built where the run executes (tools, model, hooks; no store)."""
    return chat_agent.make_agent(os.environ.get("PIAGENT_MODEL") or None,
                                 step_s=float(os.environ.get("PIAGENT_STEP_S", "0.5")))


runner = CeleryRunner(app, store, make_agent, queue=QUEUE,
                      lease_s=float(os.environ.get("PIAGENT_LEASE_S", "30")))
