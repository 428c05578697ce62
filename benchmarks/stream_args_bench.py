"""Streamed tool arguments: is the cost linear in their length?

A tool call whose arguments (a file's content, about 500 KB and 1 MB of JSON) stream in
10-character fragments through ``stream_simple`` (``openai-completions``) from the scripted
server (``benchmarks._openai_server``, model ``args:N:10``, its own process); every event
is consumed, as the agent loop does. The figure is T(1 MB) / T(500 KB), medians of 5 of
the client's CPU time (``time.process_time``: the server's CPU is not counted): 2 for a
linear cost, 4 for a quadratic one. The target is ≤ 2.4.

Run: ``python -m benchmarks.stream_args_bench [--reps 5] [--piece 10]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ServerProcess
from benchmarks._openai_server import big_arguments
from piagent.messages import ToolCall, UserMessage
from piagent.models import Model
from piagent.providers import stream_simple
from piagent.stream import Context, StreamOptions

__all__ = ["main", "measure", "stream_once"]

SIZES = (500_000, 1_000_000)
TARGET = 2.4


def stream_once(url: str, size: int, piece: int) -> float:
    """Client CPU seconds for one streamed call of ``size`` characters of arguments."""
    model = Model(id=f"args:{size}:{piece}", api="openai-completions", provider="openai",
                  base_url=url)
    context = Context([UserMessage(content="Write the file.")])
    started = time.process_time()
    stream = stream_simple(model, context, StreamOptions(api_key="k"))
    deltas = sum(1 for event in stream if event.type == "toolcall_delta")
    message = stream.result(60.0)
    spent = time.process_time() - started
    call = message.content[0]
    expected = json.loads(big_arguments(size))
    if not isinstance(call, ToolCall) or call.arguments != expected or deltas < size // piece:
        msg = f"the streamed call came back wrong ({deltas} deltas)"
        raise RuntimeError(msg)
    return spent


def measure(reps: int = 5, piece: int = 10) -> dict[str, float]:
    """Medians per size (seconds) and their ratio; sizes alternate, repetition by repetition."""
    server = ServerProcess()
    try:
        stream_once(server.url, 10_000, piece)  # warm up: imports, the connection
        times: dict[int, list[float]] = {size: [] for size in SIZES}
        for _ in range(reps):
            for size in SIZES:
                times[size].append(stream_once(server.url, size, piece))
    finally:
        server.close()
    small, large = (statistics.median(times[size]) for size in SIZES)
    return {"t_500kb_s": small, "t_1mb_s": large, "ratio": large / small}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--piece", type=int, default=10)
    args = parser.parse_args(argv)
    result = measure(args.reps, args.piece)
    print(f"T(500 KB) {result['t_500kb_s']:.3f} s  T(1 MB) {result['t_1mb_s']:.3f} s  "
          f"ratio {result['ratio']:.2f} (target <= {TARGET})")


if __name__ == "__main__":
    main()
