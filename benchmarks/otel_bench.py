"""What ``piagent.otel.instrument()`` adds to a turn: 20 rounds × 4 instant tools, scripted
model, paired in one process (off, then on, swapping which goes first each repetition).

``python -m benchmarks.otel_bench [--reps N]``: prints, per setting, the median added
microseconds per turn over the untraced run: the API's no-op provider, and the SDK's
``TracerProvider`` with no exporter (spans made, then dropped). Off is the default and
costs one global read per run (the paired 20×4 figure covers it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from piagent import Agent, otel, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

ROUNDS, TOOLS = 20, 4


@tool
def instant(n: int) -> str:
    """Return at once.

    Args:
        n: a number.
    """
    return str(n)


def _one_run() -> float:
    script: list[Any] = [assistant_tool_calls(*[("instant", {"n": i}) for i in range(TOOLS)])
                         for _ in range(ROUNDS)]
    stream = ScriptedStreamFn([*script, assistant_text("done")])
    agent = Agent(model=stream.model, stream_fn=stream, tools=[instant])
    started = time.perf_counter()
    agent.prompt("go")
    return (time.perf_counter() - started) / (ROUNDS + 1)


def _paired(provider: Any, reps: int) -> float:
    added: list[float] = []
    for rep in range(reps):
        order = (False, True) if rep % 2 == 0 else (True, False)
        times = {}
        for on in order:
            if on:
                otel.instrument(provider)
            try:
                times[on] = _one_run()
            finally:
                otel.uninstrument()
        added.append(times[True] - times[False])
    return statistics.median(added) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    _one_run()  # warm-up
    for label, provider in (("API no-op provider", trace.NoOpTracerProvider()),
                            ("SDK provider, no exporter", TracerProvider())):
        print(f"{label}: +{_paired(provider, args.reps):.0f} µs per turn "
              f"(median of {args.reps} pairs, {ROUNDS}x{TOOLS})")


if __name__ == "__main__":
    main()
