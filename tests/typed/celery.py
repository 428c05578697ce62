"""CeleryRunner as a project's tasks module and views would use it (checked by mypy --strict)."""

from __future__ import annotations

from collections.abc import Iterator

from celery import Celery  # type: ignore[import-untyped]

from piagent import Agent
from piagent.celery import CeleryRunner
from piagent.runs import LocalRunner, QueuedRunner, RunInfo, Runner
from piagent.sessions import PostgresStore, SQLiteStore

app = Celery("chat", broker="redis://127.0.0.1:6379/0")
store = PostgresStore("postgresql://postgres@127.0.0.1:5432/postgres", schema="chat")


def make_agent(session_id: str) -> Agent:
    return Agent(system_prompt=f"You help {session_id}.")


celery_runner = CeleryRunner(app, store, make_agent, lease_s=30.0, queue="piagent",
                             queue_timeout=600.0, redelivery_grace=60.0)
queued: QueuedRunner = celery_runner


def sse(runner: Runner, run_id: str, last_event_id: str | None) -> Iterator[bytes]:
    for item in runner.events(run_id, after=last_event_id, timeout=15.0):
        yield b": keep-alive\n\n" if item is None else f"id: {item.id}\n\n".encode()


runners: list[Runner] = [celery_runner, LocalRunner(SQLiteStore("chat.db"), make_agent)]
info: RunInfo = celery_runner.status("some-id")
run_id: str = celery_runner.start("user-1", "hello")
state = celery_runner.execute(run_id, {"v": 1, "session_id": "user-1", "input": []})
