"""A separate process for tests/contrib/test_sqlalchemy_runs.py: a ``LocalRunner`` on a
``SQLAlchemyStore`` that starts, steers or aborts a run (the tools and scenarios of
``tests/runs/_worker.py``).

    python _sqlalchemy_runs_worker.py start URL SESSION LEASE_S SCENARIO  # the run id, then its state
    python _sqlalchemy_runs_worker.py steer URL SESSION TEXT
    python _sqlalchemy_runs_worker.py abort URL RUN_ID REASON
    python _sqlalchemy_runs_worker.py sender URL   # steers read from stdin (_worker.py's sender)
"""

from __future__ import annotations

import sys

from sqlalchemy import create_engine

from piagent import Agent, AgentBusyError
from piagent.contrib.sqlalchemy import SQLAlchemyStore
from piagent.runs import LocalRunner
from tests.runs._worker import BOUND, make_factory, say, serve_sender


def main(argv: list[str]) -> None:
    mode, url = argv[0], argv[1]
    engine = create_engine(url)
    store = SQLAlchemyStore(engine)
    if mode == "sender":
        serve_sender(store)
    elif mode == "start":
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
    engine.dispose()


if __name__ == "__main__":
    main(sys.argv[1:])
