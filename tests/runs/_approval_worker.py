"""A separate process for tests/runs/test_approval_processes.py.

    python _approval_worker.py start DB SESSION      # prints the run id, then "waiting" once the
                                                     # run waits, then blocks until killed
    python _approval_worker.py decide DB SESSION CALL_ID approve|deny
                                                     # prints the run id that goes on (or
                                                     # "none"), then its final state

DB is an SQLite path, or ``postgresql://...#SCHEMA``. The model asks for ``delete`` (needs
approval) and ``look`` in one batch for "go" (else it echoes), then sums the results up; each tool run appends
``<tool> <pid>`` to the file ``$APPROVAL_RAN``. With ``$APPROVAL_HANG`` set, ``delete``
prints "executing" and hangs (until the test kills the process); ``$APPROVAL_LEASE`` is
the runner's lease (seconds, default 30).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from piagent import AbortSignal, Agent, tool
from piagent.messages import AssistantMessage, ToolResultMessage, UserMessage
from piagent.runs import LocalRunner
from piagent.sessions import PostgresStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

BOUND = 60.0  # seconds: the longest this process waits for anything


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())  # one write: whole lines, unbuffered


def _ran(name: str) -> None:
    with open(os.environ["APPROVAL_RAN"], "a") as out:
        out.write(f"{name} {os.getpid()}\n")


def answer(context: Any, options: Any) -> AssistantMessage:
    last = context.messages[-1]
    if isinstance(last, UserMessage) and last.text != "go":
        return assistant_text(f"echo {last.text}")
    if isinstance(last, UserMessage):
        return assistant_tool_calls(("delete", {"name": "report"}, "c-delete"),
                                    ("look", {}, "c-look"))
    results = [m for m in context.messages if isinstance(m, ToolResultMessage)]
    return assistant_text("results: " + "; ".join(f"{m.tool_name}={m.text}" for m in results))


def make_agent(session_id: str) -> Agent:
    @tool(needs_approval=True)
    def delete(name: str, signal: AbortSignal) -> str:
        """Delete a thing."""
        _ran("delete")
        if os.environ.get("APPROVAL_HANG"):
            say("executing")
            signal.wait(BOUND)
        return f"deleted {name}"

    @tool
    def look() -> str:
        """Look around."""
        _ran("look")
        return "looked"

    scripted = ScriptedStreamFn([answer] * 5)
    return Agent(model=scripted.model, stream_fn=scripted, tools=[delete, look],
                 system_prompt="worker")


def open_store(db: str) -> SQLiteStore | PostgresStore:
    if db.startswith("postgresql://"):
        dsn, _, schema = db.partition("#")
        return PostgresStore(dsn, schema=schema, max_connections=2)
    return SQLiteStore(db)


def main(argv: list[str]) -> None:
    mode, db, session_id = argv[0], argv[1], argv[2]
    store = open_store(db)
    runner = LocalRunner(store, make_agent,
                         lease_s=float(os.environ.get("APPROVAL_LEASE") or 30.0))
    if mode == "start":
        run_id = runner.start(session_id, "go")
        say(run_id)
        runner.wait(run_id, BOUND)
        say(runner.status(run_id).state)
        sys.stdin.read()  # blocks until the test kills this process
    elif mode == "decide":
        call_id, verdict = argv[3], argv[4]
        decide = runner.approve if verdict == "approve" else runner.deny
        next_id = decide(session_id, call_id, reason=f"{verdict} from pid {os.getpid()}")
        say(next_id or "none")
        if next_id is not None:
            runner.wait(next_id, BOUND)
            say(runner.status(next_id).state)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
