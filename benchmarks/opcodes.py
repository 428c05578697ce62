"""Python bytecode instructions executed per turn: the floor against piagent, counted.

``python -m benchmarks.opcodes [--rounds R] [--tools T] [--runs N] [--top K]``

Wall time on a shared machine moves by more than the differences this looks for; the
number of bytecode instructions the interpreter executes does not (it varies by a few
tenths of a percent between runs, with thread timing). Each implementation runs the job
twice to warm up, then ``N`` times with every thread traced (``sys.settrace`` with
``f_trace_opcodes``); the figure is instructions per turn, all threads, and the ``K``
functions that execute the most. The tracer makes the runs slow, not the counts wrong.

On this machine a bytecode instruction of these loops costs about 9 ns on average (the
interpreter loop's share of ``perf`` samples divided by the count), so 1,000 instructions a
turn are roughly 9 µs a turn; memory effects (the collector, cache misses) come on top and
are not counted here (``valgrind --tool=callgrind --cache-sim=yes`` counts those).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
from types import FrameType
from typing import Any

from ._common import ServerProcess, _child_env

__all__ = ["count", "main"]

Key = tuple[str, int, str]


def count(runner: Any, runs: int) -> tuple[int, collections.Counter[Key]]:
    """Run ``runner.run()`` twice untraced, then ``runs`` times traced; returns the total
    instructions and the count per function (file, first line, qualified name)."""
    for _ in range(2):
        runner.run()
    counts: collections.Counter[Key] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[(code.co_filename, code.co_firstlineno, code.co_qualname)] += 1
        return tracer

    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        for _ in range(runs):
            runner.run()
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]  # None turns it off
    return sum(counts.values()), counts


def _short(key: Key) -> str:
    path, line, name = key
    parts = path.replace("\\", "/").split("/")
    where = "/".join(parts[parts.index("piagent"):]) if "piagent" in parts else "/".join(
        parts[-2:])
    return f"{where}:{line} {name}"


def main(argv: list[str] | None = None) -> None:
    from ._turns import _FloorRunner, _PiagentRunner

    parser = argparse.ArgumentParser(prog="python -m benchmarks.opcodes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tools", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="traced runs of each")
    parser.add_argument("--top", type=int, default=25, help="functions listed per side")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.tools < 1 or args.runs < 1 or args.top < 0:
        parser.error("--rounds, --tools and --runs must be at least 1, --top at least 0")
    turns = args.rounds + 1
    # the environment benchmarks.paired gives its processes (no proxy; NO_PROXY set): the
    # floor's requests reads it on every request
    os.environ.clear()
    os.environ.update(_child_env())
    with ServerProcess(max_seconds=600) as server:
        model = f"script:{args.rounds}:{args.tools}:instant"
        runners = {"floor": _FloorRunner(server.url, model, "instant", args.rounds),
                   "piagent": _PiagentRunner(server.url, model, "instant", args.rounds,
                                             args.tools)}
        totals: dict[str, float] = {}
        for name, runner in runners.items():
            total, counts = count(runner, args.runs)
            totals[name] = total / args.runs / turns
            print(f"{name}: {totals[name]:,.0f} instructions per turn "
                  f"({args.rounds} rounds x {args.tools} tools, {args.runs} runs)")
            for key, n in counts.most_common(args.top):
                print(f"  {n / args.runs / turns:8,.0f}  {_short(key)}")
    print(f"piagent - floor: {totals['piagent'] - totals['floor']:+,.0f} per turn "
          f"({totals['piagent'] / totals['floor']:.3f}x)")


if __name__ == "__main__":
    main()
