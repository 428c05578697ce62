"""Micro-benchmarks for tool-argument validation and streaming JSON parsing.

Run: ``python benchmarks/tools_bench.py``. Prints microseconds per call.
The budget: validating the arguments of a small tool costs a few µs (the compiled
schema is cached; ``jsonschema.validate()`` per call would cost ~1 ms).
"""

from __future__ import annotations

import json
import time
import timeit
from collections.abc import Callable
from typing import Any

import jsonschema

from piagent.stream._partial_json import parse_streaming_json
from piagent.tools import tool, validate_tool_arguments
from piagent.tools._schema import compile_schema


def read_file(path: str, offset: int = 0, limit: int = 2000) -> str:
    """Read a file.

    Args:
        path: Path of the file.
        offset: First line to read.
        limit: How many lines.
    """
    return path


def edit(path: str, edits: list[dict[str, str]], dry_run: bool = False) -> str:
    """Apply edits to a file."""
    return path


def bench(label: str, fn: Callable[[], Any], number: int) -> float:
    """Run ``fn`` ``number`` times (best of 5) and print µs per call."""
    best = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
    print(f"{label:<58} {best:9.2f} µs")
    return best


def main() -> None:
    """Print the numbers."""
    small = tool(read_file)
    nested = tool(edit)
    small_args = {"path": "/tmp/a.txt", "limit": 50}
    coerced_args = {"path": "/tmp/a.txt", "limit": "50"}
    nested_args = {
        "path": "a.py",
        "edits": [{"old": "x", "new": "y"}, {"old": "1", "new": "2"}],
    }
    validator = compile_schema(small.parameters).validator
    assert validator is not None

    bench(
        "validate_tool_arguments, small schema",
        lambda: validate_tool_arguments(small, small_args),
        50_000,
    )
    bench(
        "validate_tool_arguments, small schema, '50' -> 50",
        lambda: validate_tool_arguments(small, coerced_args),
        50_000,
    )
    bench(
        "validate_tool_arguments, nested array of objects",
        lambda: validate_tool_arguments(nested, nested_args),
        50_000,
    )
    bench(
        "  for comparison: compiled jsonschema is_valid",
        lambda: validator.is_valid(small_args),
        20_000,
    )
    bench(
        "  for comparison: jsonschema.validate() per call",
        lambda: jsonschema.validate(small_args, small.parameters),
        500,
    )
    bad = {"limit": "x"}

    def invalid() -> None:
        try:
            validate_tool_arguments(small, bad)
        except ValueError:
            pass

    bench("validate_tool_arguments, invalid (error text built)", invalid, 5_000)

    doc = json.dumps(
        {"path": "/src/piagent/tools.py", "content": "def f(x):\n    return x * 2\n" * 20}
    )
    bench(
        f"parse_streaming_json, complete ({len(doc)} chars)",
        lambda: parse_streaming_json(doc),
        20_000,
    )
    half = doc[: len(doc) // 2]
    bench(
        f"parse_streaming_json, half a document ({len(half)} chars)",
        lambda: parse_streaming_json(half),
        20_000,
    )
    step = 8

    def all_prefixes() -> None:
        for end in range(0, len(doc) + 1, step):
            parse_streaming_json(doc[:end])

    n = len(range(0, len(doc) + 1, step))
    per = bench(f"parse_streaming_json, all {n} prefixes (one stream)", all_prefixes, 20)
    print(f"{'  = per delta':<58} {per / n:9.2f} µs")
    long_argument_stream()


def long_argument_stream(size: int = 100_000, delta: int = 10) -> float:
    """A ~100 KB argument (a file's content) streamed in 10-character deltas, parsed after
    each delta as the providers' builder does: the total time of the whole stream."""
    line = 'def f(x):\n    return "x" * 2  # \\ tab\there\n'
    content = (line * (size // len(line) + 1))[:size]
    doc = json.dumps({"path": "/src/big.py", "content": content})
    buffer = ""
    start = time.perf_counter()
    for i in range(0, len(doc), delta):
        buffer += doc[i:i + delta]
        parse_streaming_json(buffer)
    total = time.perf_counter() - start
    calls = len(range(0, len(doc), delta))
    print(f"{f'parse_streaming_json, {len(doc) // 1000} KB in {delta}-char deltas':<58} "
          f"{total:9.2f} s  ({calls} calls, {total / calls * 1e6:.0f} µs each)")
    return total


if __name__ == "__main__":
    main()
