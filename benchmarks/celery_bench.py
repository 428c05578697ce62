"""``CeleryRunner`` on real workers: event latency, abort latency, runs per second.

Run: ``python benchmarks/celery_bench.py [--reps R] [--runs M] [--quick]``. Needs Redis and
PostgreSQL on 127.0.0.1 (``PIAGENT_BENCH_REDIS``, default ``redis://127.0.0.1:6379/9``;
``PIAGENT_BENCH_POSTGRES``, default ``postgresql://postgres@127.0.0.1:5432/test``); starts
``celery -A benchmarks._celery_app worker --pool threads -c 4`` processes itself and stops
them at the end. Everything is on loopback.

* event → reader: a worker's tool reports 50 updates 5 ms apart, each stamped with
  ``time.monotonic()`` just before ``on_update``; this process reads the run with
  ``runner.events`` and subtracts the stamp from the arrival time (the path: the worker's
  Agent, its supervisor, an INSERT and NOTIFY in PostgreSQL, this process's listener, a
  SELECT). Budget ≤ 50 ms p90.
* abort → ``agent_end``: a worker's tool waits on its signal; this process calls
  ``runner.abort`` and times until ``agent_end`` arrives here (the abort's way there and the
  events' way back). Budget ≤ 250 ms p90.
* runs per second: M one-turn runs on M sessions started at once, with 1 worker and with 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUDGET_EVENT_MS = 50.0
BUDGET_ABORT_MS = 250.0


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[int(q * (len(values) - 1))]


class Workers:
    """The benchmark's worker processes (started here, stopped by ``stop``)."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env = env
        self.tmp = tmp
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, count: int) -> None:
        for _ in range(count):
            ready = self.tmp / f"ready-{uuid.uuid4().hex[:6]}"
            process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "benchmarks._celery_app", "worker",
                 "--pool", "threads", "-c", "4", "-Q", self.env["PIAGENT_BENCH_QUEUE"],
                 "-n", f"{ready.name}@%h", "--without-gossip", "--without-mingle",
                 "--without-heartbeat", "-l", "error"],
                cwd=ROOT, env=dict(self.env, PIAGENT_BENCH_READY=str(ready)),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.processes.append(process)
            ticker = threading.Event()  # never set: the poll interval
            for _ in range(6000):
                if ready.exists() or process.poll() is not None:
                    break
                ticker.wait(0.01)
            if not ready.exists():
                raise RuntimeError("a worker did not become ready within 60 s")

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
        self.processes.clear()


def event_latency(app: ModuleType, reps: int) -> list[float]:
    out: list[float] = []
    for rep in range(reps + 1):  # the first run warms the worker up
        run_id = app.runner.start(f"tick-{uuid.uuid4().hex[:6]}", "go")
        for item in app.runner.events(run_id, timeout=30.0):
            if item is None:
                raise RuntimeError("the run went idle for 30 s")
            if item.type == "tool_execution_update" and rep:
                out.append((time.monotonic() - item.event["partialResult"]["details"]["t"])
                           * 1000)
        app.runner.wait(run_id, 30.0)
    return out


def abort_latency(app: ModuleType, reps: int) -> list[float]:
    out: list[float] = []
    for rep in range(reps + 1):
        run_id = app.runner.start(f"hold-{uuid.uuid4().hex[:6]}", "go")
        began = 0.0
        for item in app.runner.events(run_id, timeout=30.0):
            if item is None:
                raise RuntimeError("the run went idle for 30 s")
            if item.type == "tool_execution_start":
                began = time.monotonic()
                app.runner.abort(run_id, "bench")
            if item.type == "agent_end" and rep:
                out.append((time.monotonic() - began) * 1000)
        app.runner.wait(run_id, 30.0)
    return out


def runs_per_second(app: ModuleType, runs: int) -> float:
    sessions = [f"rate-{uuid.uuid4().hex[:8]}" for _ in range(runs)]
    began = time.monotonic()
    run_ids = [app.runner.start(s, "hi") for s in sessions]
    with ThreadPoolExecutor(max_workers=8) as pool:
        done = list(pool.map(lambda r: app.runner.wait(r, 120.0), run_ids))
    took = time.monotonic() - began
    if not all(done):
        raise RuntimeError("some runs did not finish within 120 s")
    return runs / took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    reps, runs = (2, 20) if args.quick else (args.reps, args.runs)
    queue = f"piagent-bench-{uuid.uuid4().hex[:8]}"
    schema = f"piagent_bench_{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, PIAGENT_BENCH_QUEUE=queue, PIAGENT_BENCH_SCHEMA=schema,
               PIAGENT_BENCH_REDIS=os.environ.get("PIAGENT_BENCH_REDIS",
                                                  "redis://127.0.0.1:6379/9"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    os.environ.update({k: env[k] for k in ("PIAGENT_BENCH_QUEUE", "PIAGENT_BENCH_SCHEMA",
                                           "PIAGENT_BENCH_REDIS")})
    sys.path.insert(0, str(ROOT))
    import benchmarks._celery_app as app

    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workers = Workers(env, Path(tmp))
        try:
            workers.start(1)
            events = event_latency(app, reps)
            aborts = abort_latency(app, reps)
            one = runs_per_second(app, runs)
            workers.start(1)
            runs_per_second(app, 8)  # warm the second worker
            two = runs_per_second(app, runs)
        finally:
            workers.stop()
            _drop(app, schema)
    p90_event, p90_abort = _p(events, 0.9), _p(aborts, 0.9)
    rows.append(("event worker -> reader", f"p50 {statistics.median(events):.2f} ms  p90 "
                 f"{p90_event:.2f} ms  max {max(events):.2f} ms  n={len(events)}  (budget p90 "
                 f"{BUDGET_EVENT_MS:g} ms: {'ok' if p90_event <= BUDGET_EVENT_MS else 'OVER'})"))
    rows.append(("abort -> agent_end", f"p50 {statistics.median(aborts):.2f} ms  p90 "
                 f"{p90_abort:.2f} ms  max {max(aborts):.2f} ms  n={len(aborts)}  (budget p90 "
                 f"{BUDGET_ABORT_MS:g} ms: {'ok' if p90_abort <= BUDGET_ABORT_MS else 'OVER'})"))
    rows.append(("runs/s, 1 worker (-c 4)", f"{one:.1f}  ({runs} runs)"))
    rows.append(("runs/s, 2 workers (-c 4)", f"{two:.1f}  ({runs} runs)"))
    for name, text in rows:
        print(f"{name:<28} {text}")
    return 0


def _drop(app: Any, schema: str) -> None:
    def drop(cur: Any) -> None:
        cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    try:
        app.store.run(drop)
    finally:
        app.store.close()


if __name__ == "__main__":
    sys.exit(main())
