"""A separate process for tests/runs/test_processes.py: starts, steers or aborts a run.

    python _worker.py start DB SESSION LEASE_S SCENARIO   # prints the run id, waits, prints the state
    python _worker.py steer DB SESSION TEXT
    python _worker.py abort DB RUN_ID REASON
    python _worker.py sender DB            # DB: an SQLite path, or postgresql://...#SCHEMA

DB may also be ``django:ALIAS``: a ``DjangoStore`` on that alias of the databases the
environment's ``PIAGENT_TEST_DJANGO_DATABASES`` holds (the parent's ``settings.DATABASES``
as JSON; tests/runs/test_django_processes.py).

``sender`` reads lines ``steer SESSION TEXT`` / ``follow_up SESSION TEXT`` from stdin and
answers ``sent`` once ``runner.steer()`` / ``follow_up()`` has returned; it ends at EOF.

Scenarios: ``steer_abort`` (a tool that waits until a steer arrived, then one that waits for
its abort signal) and ``hang`` (a tool with replay="never" that prints "executing" and hangs).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from piagent import AbortSignal, Agent, AgentBusyError, AgentTool, tool
from piagent.runs import LocalRunner
from piagent.sessions import PostgresStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.runs.conftest import WatchedAgent

BOUND = 60.0  # seconds: the longest any tool here waits


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())  # one write: whole lines, unbuffered


def build_tools(agents: list[WatchedAgent]) -> list[AgentTool]:
    """The worker's tools (the same declarations in every process, so no system update)."""

    @tool
    def wait_for_steer() -> str:
        """Wait until a steering message reached the agent."""
        steered = agents[-1].wait_queued(lambda agent: agent.has_queued_messages(), BOUND)
        return "steered" if steered else "no steer came"

    @tool
    def wait_for_abort(signal: AbortSignal) -> str:
        """Wait for the run's abort signal."""
        signal.wait(BOUND)
        return "aborted" if signal.aborted else "not aborted"

    @tool(replay="never")
    def hang(signal: AbortSignal) -> str:
        """Print 'executing', then wait to be killed."""
        say("executing")
        signal.wait(BOUND)
        return "not killed"

    return [wait_for_steer, wait_for_abort, hang]


def make_factory(scenario: str) -> Callable[[str], Agent]:
    agents: list[WatchedAgent] = []
    tools = build_tools(agents)
    if scenario == "steer_abort":
        responses = [assistant_tool_calls(("wait_for_steer", {})),
                     assistant_tool_calls(("wait_for_abort", {})), assistant_text("never")]
    elif scenario == "hang":
        responses = [assistant_tool_calls(("hang", {}, "call-hang"))]
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    scripted = ScriptedStreamFn(responses)

    def make_agent(session_id: str) -> Agent:
        agent = WatchedAgent(model=scripted.model, stream_fn=scripted, system_prompt="worker",
                             tools=tools)
        agents.append(agent)
        return agent

    return make_agent


def open_store(db: str) -> SessionStore:
    if db.startswith("django:"):
        import json

        import django
        from django.conf import settings

        from tests.contrib import django_settings

        config = {k: v for k, v in vars(django_settings).items() if k.isupper()}
        config["DATABASES"] = json.loads(os.environ["PIAGENT_TEST_DJANGO_DATABASES"])
        settings.configure(**config)
        django.setup()
        from piagent.contrib.django import DjangoStore

        return DjangoStore(db.removeprefix("django:"))
    if db.startswith("postgresql://"):
        dsn, _, schema = db.partition("#")
        return PostgresStore(dsn, schema=schema, max_connections=2)
    return SQLiteStore(db)


def serve_sender(store: SessionStore) -> None:
    runner = LocalRunner(store, lambda sid: Agent())
    say("ready")
    for line in sys.stdin:
        kind, session_id, text = line.rstrip("\n").split(" ", 2)
        if kind == "steer":
            runner.steer(session_id, text)
        else:
            runner.follow_up(session_id, text)
        say("sent")


def main(argv: list[str]) -> None:
    mode, db = argv[0], argv[1]
    store = open_store(db)
    if mode == "sender":
        serve_sender(store)
        getattr(store, "close", lambda: None)()
        return
    if mode == "start":
        session_id, lease_s, scenario = argv[2], float(argv[3]), argv[4]
        runner = LocalRunner(store, make_factory(scenario), lease_s=lease_s)
        try:
            run_id = runner.start(session_id, "go")
        except AgentBusyError as exc:
            say(f"busy: {exc}")
            raise SystemExit(3) from None
        say(run_id)
        runner.wait(run_id, BOUND)
        say(runner.status(run_id).state)
    elif mode == "steer":
        LocalRunner(store, lambda sid: Agent()).steer(argv[2], argv[3])
    elif mode == "abort":
        LocalRunner(store, lambda sid: Agent()).abort(argv[2], argv[3])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    getattr(store, "close", lambda: None)()


if __name__ == "__main__":
    main(sys.argv[1:])
