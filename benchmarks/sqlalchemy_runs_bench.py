"""What polling costs the runs of a ``SQLAlchemyStore`` (docs/sessions.md), per database.

Run: ``python benchmarks/sqlalchemy_runs_bench.py [--quick] URL...`` with SQLAlchemy URLs,
e.g. ``sqlite:////tmp/b.db``, ``postgresql+psycopg://postgres@127.0.0.1/test``,
``mysql+pymysql://piagent:piagent@127.0.0.1/bench?charset=utf8mb4`` (its tables are made in
that database and the bench's runs purged after it).

The writer and the reader use two store objects on two engines: nothing of the one wakes
the other in-process, so the reader finds each change by its poll, as a reader in another
process does. Figures, in milliseconds (p50 / p90 / max):

* ``poll``: one poll of a waiting reader (``Watch.wait``'s query through the pool);
* ``inbox``: one look at an empty inbox (``claim_controls``, an executing run's poll);
* ``event``: an event's latency, from before the writer's ``append_events`` to the reader's
  ``runner.events`` yielding it (events 20 ms apart);
* ``abort``: from ``runner.abort`` on the reader's engine to the abort signal firing in
  the run's tool on the writer's engine (the inbox poll).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from typing import Any

from sqlalchemy import create_engine

from piagent import AbortSignal, Agent, tool
from piagent.contrib.sqlalchemy import SQLAlchemyRunBackend, SQLAlchemyStore
from piagent.runs import LocalRunner
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

GAP_S = 0.02  # between the writer's events


def _figures(values_ms: list[float]) -> str:
    values = sorted(values_ms)
    p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
    return f"{statistics.median(values):6.2f} / {p90:6.2f} / {values[-1]:6.2f}"


def _timed(fn: Any, count: int) -> list[float]:
    out = []
    for _ in range(count):
        began = time.perf_counter()
        fn()
        out.append((time.perf_counter() - began) * 1000)
    return out


def bench(url: str, count: int) -> dict[str, str]:
    engines = [create_engine(url), create_engine(url)]
    writer_store, reader_store = (SQLAlchemyStore(e) for e in engines)
    writer = SQLAlchemyRunBackend(writer_store)
    reader_runner = LocalRunner(reader_store, lambda sid: Agent())
    results: dict[str, str] = {}

    # the polls, on a live run with a few events
    run_id, session = uuid.uuid4().hex, f"bench-{uuid.uuid4().hex}"
    writer.create_run(run_id, session, "bench", 60.0)
    writer.set_running(run_id, "bench")
    writer.append_events(run_id, 0, ['{"type":"agent_start"}'])
    backend = SQLAlchemyRunBackend(reader_store)
    with backend.watch(run_id) as watch:
        watch.info()
        results["poll"] = _figures(_timed(lambda: watch.wait(0.0), count))
    results["inbox"] = _figures(_timed(lambda: backend.claim_controls(session, run_id), count))

    # event latency across engines
    stamps: dict[int, float] = {}
    arrivals: dict[int, float] = {}

    def write() -> None:
        for seq in range(1, count + 1):
            stamps[seq] = time.monotonic()
            writer.append_events(run_id, seq, [json.dumps({"type": "message_update",
                                                           "n": seq})])
            time.sleep(GAP_S)
        writer.finish(run_id, "bench", "done", None,
                      (count + 1, [json.dumps({"type": "agent_end"})]))

    thread = threading.Thread(target=write)
    thread.start()
    for event in reader_runner.events(run_id, timeout=30.0):
        assert event is not None
        if event.type == "message_update":
            arrivals[event.event["n"]] = time.monotonic()
    thread.join()
    results["event"] = _figures([(arrivals[n] - stamps[n]) * 1000 for n in stamps])

    # abort across engines: the executing run polls its inbox
    fired: list[float] = []
    entered = threading.Event()

    @tool
    def wait_for_abort(signal: AbortSignal) -> str:
        """Wait for the abort."""
        entered.set()
        signal.wait(30.0)
        fired.append(time.monotonic())
        return "aborted"

    def make_agent(sid: str) -> Agent:
        fn = ScriptedStreamFn([assistant_tool_calls(("wait_for_abort", {})),
                               assistant_text("done")])
        return Agent(model=fn.model, stream_fn=fn, tools=[wait_for_abort])

    executor = LocalRunner(writer_store, make_agent)
    delays = []
    for _ in range(max(3, count // 10)):
        entered.clear()
        run = executor.start(f"bench-{uuid.uuid4().hex}", "go")
        assert entered.wait(30.0)
        began = time.monotonic()
        reader_runner.abort(run, "bench")
        assert executor.wait(run, 30.0)
        delays.append((fired[-1] - began) * 1000)
    results["abort"] = _figures(delays)
    reader_runner.purge(0)
    for engine in engines:
        engine.dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count = 20 if args.quick else 200
    print(f"{'database':12} {'figure':6}  p50 / p90 / max (ms)")
    for url in args.urls:
        name = url.split(":", 1)[0].split("+", 1)[0]
        for figure, text in bench(url, count).items():
            print(f"{name:12} {figure:6}  {text}")


if __name__ == "__main__":
    main()
