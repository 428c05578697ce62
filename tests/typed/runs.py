"""Runs by id as a web view's code would use them (checked by mypy --strict)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from piagent import Agent
from piagent.runs import LocalRunner, RunEvent, RunInfo, RunNotFoundError, RunState
from piagent.sessions import SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text


def make_agent(session_id: str) -> Agent:
    fn = ScriptedStreamFn([assistant_text("hi")])
    return Agent(model=fn.model, stream_fn=fn, system_prompt=f"You help {session_id}.")


def sse_lines(runner: LocalRunner, run_id: str, last_event_id: str | None) -> Iterator[str]:
    for item in runner.events(run_id, after=last_event_id, timeout=15.0):
        if item is None:
            yield ": keep-alive\n\n"
            continue
        event: dict[str, Any] = item.event
        yield f"id: {item.id}\ndata: {event['type']}\n\n"


def state_of(runner: LocalRunner, run_id: str) -> RunState | None:
    try:
        info: RunInfo = runner.status(run_id)
    except RunNotFoundError:
        return None
    return info.state


def first(runner: LocalRunner, run_id: str) -> RunEvent | None:
    return next(iter(runner.events(run_id)), None)


runner = LocalRunner(SQLiteStore("chat.db"), make_agent, lease_s=30.0)
ok: bool = runner.wait("some-id", timeout=1.0)
runner.steer("user-42", "shorter, please")
runner.follow_up("user-42", "and then?")
runner.abort("some-id", reason="the user left")
