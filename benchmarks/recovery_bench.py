"""Recovery time of a run whose process died (budget: within lease + 10 s, benchmarks/README.md).

Run: ``python benchmarks/recovery_bench.py [--lease S ...] [--reps R] [--quick]``. A child
process starts a ``LocalRunner`` run on an ``SQLiteStore`` file; the run's tool
(``replay="safe"``) prints a line and blocks. This process kills the child with SIGKILL
while the tool runs, then calls ``runner.start(session, ...)`` until the session's lease has
run out (``AgentBusyError`` before that). That start recovers the transcript by the replay
rules (the safe tool runs again, here at once) and the run ends with ``agent_end``.

Figures per lease: kill → recovered run's ``agent_end`` (the recovery time), and that time
less the lease (what recovery itself adds). Budget: recovery ≤ lease + 10 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from piagent import Agent, AgentBusyError, tool
from piagent.runs import LocalRunner
from piagent.sessions import SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text

BUDGET_OVER_LEASE_S = 10.0
POLL_S = 0.01  # how often this process tries start() while the dead run's lease holds

CHILD = r"""
import os, sys, threading
from piagent import Agent, tool
from piagent.runs import LocalRunner
from piagent.sessions import SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

@tool(replay="safe")
def fetch() -> str:
    '''Fetch something (blocks until the process is killed).'''
    os.write(1, b"executing\n")
    threading.Event().wait(120.0)
    return "never"

def make_agent(session_id):
    fn = ScriptedStreamFn([assistant_tool_calls(("fetch", {})), assistant_text("done")])
    return Agent(model=fn.model, stream_fn=fn, tools=[fetch])

runner = LocalRunner(SQLiteStore(sys.argv[1]), make_agent, lease_s=float(sys.argv[2]))
runner.start("s", "go")
threading.Event().wait(120.0)
"""


def make_agent(session_id: str) -> Agent:
    @tool(replay="safe")
    def fetch() -> str:
        """Fetch something (at once, in the recovering process)."""
        return "fetched"

    fn = ScriptedStreamFn([assistant_text("recovered"), assistant_text("carried on")])
    return Agent(model=fn.model, stream_fn=fn, tools=[fetch])


def once(folder: Path, lease_s: float, rep: int) -> float:
    """Seconds from SIGKILL to the recovered run's end."""
    db = folder / f"recovery-{lease_s}-{rep}.db"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(lease_s)],
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the tool is running
        if line.strip() != b"executing":
            raise RuntimeError(f"child said {line!r}, expected 'executing'")
        os.kill(child.pid, signal.SIGKILL)
        killed = time.monotonic()
    finally:
        child.kill()
        child.wait(10.0)
        if child.stdout is not None:
            child.stdout.close()
    with SQLiteStore(db) as store:
        runner = LocalRunner(store, make_agent, lease_s=lease_s)
        ticker = threading.Event()  # never set: a bounded pause between attempts
        deadline = killed + lease_s + BUDGET_OVER_LEASE_S + 30.0
        while True:
            try:
                run_id = runner.start("s", "carry on")
                break
            except AgentBusyError:
                if time.monotonic() > deadline:
                    raise
                ticker.wait(POLL_S)
        if not runner.wait(run_id, timeout=30.0):
            raise RuntimeError("the recovered run did not end within 30 s")
        ended = time.monotonic()
        state = runner.status(run_id).state
        results = [m for m in store.load("s") if m.role == "toolResult"]
        if state != "done" or len(results) != 1 or results[0].is_error:
            raise RuntimeError(f"recovery went wrong: state {state}, results {results}")
    return ended - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lease", type=float, nargs="*", default=[1.0, 3.0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one lease of 0.5 s, 2 reps")
    args = parser.parse_args()
    leases, reps = ([0.5], 2) if args.quick else (args.lease, args.reps)
    print("recovery of a SIGKILLed run (LocalRunner, SQLiteStore), seconds")
    print(f"{'lease':>6} {'median':>8} {'max':>8} {'median - lease':>15} {'budget':>7}")
    worst_over = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for lease_s in leases:
            times = [once(Path(tmp), lease_s, rep) for rep in range(reps)]
            over = max(times) - lease_s
            worst_over = max(worst_over, over)
            print(f"{lease_s:6.1f} {statistics.median(times):8.3f} {max(times):8.3f} "
                  f"{statistics.median(times) - lease_s:15.3f} "
                  f"{'ok' if over <= BUDGET_OVER_LEASE_S else 'OVER':>7}")
    print(f"worst recovery beyond the lease: {worst_over:.3f} s "
          f"(budget {BUDGET_OVER_LEASE_S:.0f} s)")


if __name__ == "__main__":
    main()
