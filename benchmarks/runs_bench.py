"""Event to reader latency of ``LocalRunner`` runs.

Run: ``python benchmarks/runs_bench.py [--events N] [--reps R] [--quick]``. A run streams a
long scripted answer on ``piagent.testing.ScriptedStreamFn`` with ``chunk_delay`` between
events (so events arrive one by one, as from a model, not in a burst). A listener the agent
has before the runner's own stamps each event with ``time.monotonic()`` (system-wide on
Linux, so comparable between processes); the reader, ``runner.events(run_id)``, stamps it
when it arrives. Latency = arrival − listener stamp, per event, over every event of R runs;
figures are p50 / p90 / max in milliseconds.

Cases: the run and the reader in one process on a ``MemoryStore`` and on an ``SQLiteStore``,
then the run in a child process and the reader here, on the same SQLite file. For
information, also across processes: ``abort()`` here while the child's run waits in a tool
on its signal, to ``agent_end`` read here (the abort crosses the inbox, the events come back).

The steering poll point: each poll point of a run reads the store's inbox once (so a steer
sent from any process before it is taken there); ``inbox read`` is that read on an empty
inbox (the common case), per store, and ``turn`` the wall time per turn of a run of 20 tool
turns (a no-op tool, a scripted model), which holds two steering poll points a turn.

Budgets: one process ≤ 1 ms p90; across processes via SQLite ≤ 100 ms p90 (the abort case
is held to the same figure; the budget is 250 ms for Celery's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piagent import AbortSignal, Agent, tool
from piagent.runs import LocalRunner
from piagent.sessions import MemoryStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

BUDGET_ONE_PROCESS_MS = 1.0
BUDGET_PROCESSES_MS = 100.0
CHUNK_DELAY_S = 0.004


SKIP = 4  # agent_start, turn_start and the prompt's two events: before the reader is live


def _factory(words: int, stamps: list[float], go: threading.Event) -> Callable[[str], Agent]:
    text = " ".join(["word"] * words)

    def answer(context: Any, options: Any) -> Any:
        go.wait(10.0)  # the model "answers" once the reader is reading
        return assistant_text(text)

    def make_agent(session_id: str) -> Agent:
        scripted = ScriptedStreamFn([answer], chunk_delay=CHUNK_DELAY_S)
        agent = Agent(model=scripted.model, stream_fn=scripted, system_prompt="Be brief.")
        agent.subscribe(lambda event, signal: stamps.append(time.monotonic()))
        return agent

    return make_agent


def _read(runner: LocalRunner, run_id: str, live: Callable[[], None]) -> list[float]:
    arrivals = []
    for item in runner.events(run_id, timeout=30.0):
        if item is None:
            raise RuntimeError("the run went idle for 30 s")
        arrivals.append(time.monotonic())
        if len(arrivals) == 1:
            live()
    return arrivals


def _latencies(stamps: list[float], arrivals: list[float]) -> list[float]:
    if len(stamps) != len(arrivals):
        raise RuntimeError(f"{len(stamps)} events stamped, {len(arrivals)} read")
    return [(a - s) * 1000 for s, a in list(zip(stamps, arrivals, strict=True))[SKIP:]]


def one_process(store: SessionStore, words: int, reps: int) -> list[float]:
    out: list[float] = []
    for rep in range(reps + 1):  # the first run warms up
        stamps: list[float] = []
        go = threading.Event()
        runner = LocalRunner(store, _factory(words, stamps, go))
        run_id = runner.start(f"bench-{rep}", "go")
        arrivals = _read(runner, run_id, go.set)
        runner.wait(run_id, 30.0)
        if rep:
            out += _latencies(stamps, arrivals)
    return out


def across_processes(db: str, words: int, reps: int) -> list[float]:
    out: list[float] = []
    runner = LocalRunner(SQLiteStore(db), lambda sid: Agent())
    env = _env()
    for rep in range(reps + 1):
        child = subprocess.Popen([sys.executable, __file__, "--child", db, f"x-{rep}",
                                  str(words)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=env)
        assert child.stdout is not None and child.stdin is not None
        stdin = child.stdin
        run_id = child.stdout.readline().strip()

        def live(stdin: Any = stdin) -> None:
            stdin.write("go\n")
            stdin.flush()

        arrivals = _read(runner, run_id, live)
        stamps = json.loads(child.stdout.readline())
        if child.wait(30) != 0:
            raise RuntimeError("the child failed")
        if rep:
            out += _latencies(stamps, arrivals)
    return out


def child(db: str, session_id: str, words: int) -> None:
    stamps: list[float] = []
    go = threading.Event()
    runner = LocalRunner(SQLiteStore(db), _factory(words, stamps, go))
    run_id = runner.start(session_id, "go")
    print(run_id, flush=True)
    sys.stdin.readline()  # the parent reads the run's events: let the model answer
    go.set()
    runner.wait(run_id, 30.0)
    print(json.dumps(stamps), flush=True)


def _waiting_factory() -> Callable[[str], Agent]:
    @tool
    def wait_for_abort(signal: AbortSignal) -> str:
        """Wait for the run's abort signal."""
        signal.wait(30.0)
        return "stopped"

    def make_agent(session_id: str) -> Agent:
        scripted = ScriptedStreamFn([assistant_tool_calls(("wait_for_abort", {}))])
        return Agent(model=scripted.model, stream_fn=scripted, tools=[wait_for_abort])

    return make_agent


def abort_across_processes(db: str, reps: int) -> list[float]:
    """abort() here -> agent_end read here, while the run waits in a tool in a child."""
    out: list[float] = []
    runner = LocalRunner(SQLiteStore(db), lambda sid: Agent())
    for rep in range(reps + 1):
        child = subprocess.Popen([sys.executable, __file__, "--child-abort", db, f"a-{rep}"],
                                 stdout=subprocess.PIPE, text=True, env=_env())
        assert child.stdout is not None
        run_id = child.stdout.readline().strip()
        began = 0.0
        for item in runner.events(run_id, timeout=30.0):
            if item is None:
                raise RuntimeError("the run went idle for 30 s")
            if item.type == "tool_execution_start":
                began = time.monotonic()
                runner.abort(run_id, "benchmark")
            elif item.type == "agent_end" and rep:
                out.append((time.monotonic() - began) * 1000)
        if child.wait(30) != 0:
            raise RuntimeError("the child failed")
    return out


def child_abort(db: str, session_id: str) -> None:
    runner = LocalRunner(SQLiteStore(db), _waiting_factory())
    # a warm-up run here first: a fresh process's first tool call pays for imports and
    # schema compilation, which an abort would have to wait for
    warm = runner.start(session_id + "-warm", "go")
    for item in runner.events(warm, timeout=30.0):
        if item is not None and item.type == "tool_execution_start":
            runner.abort(warm)
    runner.wait(warm, 30.0)
    run_id = runner.start(session_id, "go")
    print(run_id, flush=True)
    runner.wait(run_id, 30.0)


def _turn_factory(turns: int) -> Callable[[str], Agent]:
    @tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    def answer(context: Any, options: Any) -> Any:
        done = sum(m.role == "toolResult" for m in context.messages)
        return assistant_tool_calls(("noop", {})) if done < turns - 1 else assistant_text("ok")

    def make_agent(session_id: str) -> Agent:
        scripted = ScriptedStreamFn([answer] * turns)
        return Agent(model=scripted.model, stream_fn=scripted, tools=[noop], system_prompt="x")

    return make_agent


def poll_point_cost(name: str, store: SessionStore, reps: int) -> dict[str, Any]:
    """The inbox read a poll point makes (empty inbox), and the wall time per turn."""
    from piagent.runs._registry import backend_for  # the read itself: a private detail

    backend = backend_for(store)
    reads = []
    for _ in range(200 * reps):
        began = time.perf_counter()
        backend.claim_controls("bench-poll", "no-run")
        reads.append((time.perf_counter() - began) * 1000)
    turns = 20
    runner = LocalRunner(store, _turn_factory(turns))
    per_turn = []
    for rep in range(max(reps, 3)):
        began = time.perf_counter()
        run_id = runner.start(f"bench-turns-{rep}-{os.getpid()}", "go")
        runner.wait(run_id, 60.0)
        per_turn.append((time.perf_counter() - began) * 1000 / turns)
    reads.sort()
    row = {"case": f"poll point, {name}", "inbox_read_p50_ms": statistics.median(reads),
           "inbox_read_p90_ms": reads[int(0.9 * (len(reads) - 1))],
           "turn_median_ms": statistics.median(per_turn)}
    print(f"{'poll point, ' + name:<36} inbox read p50 {row['inbox_read_p50_ms']:7.3f} ms  "
          f"p90 {row['inbox_read_p90_ms']:7.3f} ms  turn (median of {len(per_turn)}) "
          f"{row['turn_median_ms']:7.3f} ms")
    return row


def _postgres_store() -> SessionStore | None:
    try:
        from piagent.sessions import PostgresStore

        dsn = os.environ.get("PIAGENT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
        return PostgresStore(dsn, schema=f"piagent_bench_{os.getpid()}", max_connections=4)
    except Exception as exc:  # noqa: BLE001 - a missing server only skips this row
        print(f"poll point, PostgresStore: skipped ({type(exc).__name__}: {exc})")
        return None


def _drop_postgres(store: Any) -> None:
    def drop(cur: Any) -> None:
        cur.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')
    store.run(drop)
    store.close()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}


def _summary(name: str, values: list[float], budget: float) -> dict[str, Any]:
    values = sorted(values)
    p90 = values[int(0.9 * (len(values) - 1))]
    row = {"case": name, "events": len(values), "p50_ms": statistics.median(values),
           "p90_ms": p90, "max_ms": values[-1], "budget_p90_ms": budget,
           "within": p90 <= budget}
    print(f"{name:<36} {len(values):>6} events  p50 {row['p50_ms']:7.3f} ms  "
          f"p90 {p90:7.3f} ms  max {values[-1]:7.3f} ms  (budget p90 {budget:g} ms: "
          f"{'ok' if row['within'] else 'OVER'})")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200, help="words (≈ events) per run")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="50 events, 1 repetition")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-abort", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    if args.child_abort:
        child_abort(args.child_abort[0], args.child_abort[1])
        return
    words, reps = (50, 1) if args.quick else (args.events, args.reps)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "runs.db")
        rows = [
            _summary("one process, MemoryStore", one_process(MemoryStore(), words, reps),
                     BUDGET_ONE_PROCESS_MS),
            _summary("one process, SQLiteStore", one_process(SQLiteStore(db), words, reps),
                     BUDGET_ONE_PROCESS_MS),
            _summary("across processes, SQLiteStore", across_processes(db, words, reps),
                     BUDGET_PROCESSES_MS),
            _summary("abort -> agent_end, across processes", abort_across_processes(
                db, 3 if args.quick else 10), BUDGET_PROCESSES_MS),
            poll_point_cost("MemoryStore", MemoryStore(), reps),
            poll_point_cost("SQLiteStore", SQLiteStore(str(Path(tmp) / "poll.db")), reps),
        ]
        postgres = _postgres_store()
        if postgres is not None:
            try:
                rows.append(poll_point_cost("PostgresStore", postgres, reps))
            finally:
                _drop_postgres(postgres)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
