"""The loop alone: ``piagent.Agent`` driven by ``ScriptedStreamFn`` at zero latency.

* events per second through one listener;
* cost per turn and per extra tool call with the transcript pre-filled to 10, 1,000 and
  10,000 messages (``Agent(messages=...)``), next to the cost, timed in situ, of the passes
  over the transcript that are allowed to grow: ``convert_to_llm`` (the loop's) and the
  ``ScriptedStreamFn`` call (its request snapshot: the test double's, not the loop's);
  and the same runs with the transcript frozen out of the garbage collector
  (``gc.freeze()``), which shows how much of the rest is the collector walking a big heap.

``python -m benchmarks.loop_bench [--quick]`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from typing import Any

from ._common import median, piagent_tool

__all__ = ["run"]

_TIMEOUT_S = 120.0


def _prefill(n: int) -> list[Any]:
    """``n`` messages of a realistic shape: user, assistant + tool call, result, answer."""
    from piagent import (
        AssistantMessage,
        TextContent,
        ToolCall,
        ToolResultMessage,
        UserMessage,
    )

    out: list[Any] = []
    i = 0
    while len(out) < n:
        kind = len(out) % 4
        if kind == 0:
            out.append(UserMessage(content=[TextContent(f"Question {i}: what is in file {i}?")]))
        elif kind == 1:
            out.append(AssistantMessage(
                content=[ToolCall(f"old_{i}", "instant", {"i": i})], api="scripted",
                provider="scripted", model="scripted", stop_reason="toolUse"))
        elif kind == 2:
            out.append(ToolResultMessage(tool_call_id=f"old_{i}", tool_name="instant",
                                         content=[TextContent(f"contents of file {i} " * 4)]))
        else:
            out.append(AssistantMessage(content=[TextContent(f"File {i} holds a few words.")],
                                        api="scripted", provider="scripted", model="scripted"))
            i += 1
    return out


def _script(rounds: int, tools: int) -> list[Any]:
    from piagent.testing import assistant_text, assistant_tool_calls

    return [assistant_tool_calls(*[("instant", {"i": j}, f"call_{r}_{j}") for j in range(tools)])
            for r in range(rounds)] + [assistant_text("All tools done.")]


class _Timed:
    """Wraps a callable and adds up the CPU seconds spent in it (in situ, cold caches and all)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.seconds = 0.0

    def __call__(self, *args: Any) -> Any:
        start = time.thread_time()
        try:
            return self.fn(*args)
        finally:
            self.seconds += time.thread_time() - start


def _run_once(prefill: list[Any], rounds: int, tools: int,
              timers: dict[str, float] | None = None) -> tuple[float, float, int]:
    """(wall s, cpu s, events) of one prompt; the listener counts events.

    With ``timers``, also adds the seconds spent in ``convert_to_llm`` and in the
    ``ScriptedStreamFn`` call (its request snapshot and response copy) to it.
    """
    from piagent import Agent, default_convert_to_llm
    from piagent.testing import ScriptedStreamFn

    script = ScriptedStreamFn(_script(rounds, tools))
    fn = _Timed(script)
    convert = _Timed(default_convert_to_llm)
    agent = Agent(system_prompt="You are a benchmark.", model=script.model, stream_fn=fn,
                  tools=[piagent_tool("instant")], messages=prefill, convert_to_llm=convert)
    count = [0]

    def listener(event: Any, signal: Any) -> None:
        count[0] += 1

    agent.subscribe(listener)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    run = agent.prompt("Run the benchmark job.", timeout=_TIMEOUT_S)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if run.error_message or script.remaining:
        msg = f"loop run failed: {run.error_message}"
        raise RuntimeError(msg)
    if timers is not None:
        timers["convert"] = timers.get("convert", 0.0) + convert.seconds
        timers["stream_fn"] = timers.get("stream_fn", 0.0) + fn.seconds
    return wall, cpu, count[0]


def _time_pass(fn: Any, reps: int) -> float:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return median(samples)


def run(quick: bool) -> dict[str, Any]:
    """Measure; returns the section's JSON."""
    from piagent import default_convert_to_llm

    sizes = [10, 1000] if quick else [10, 1000, 10000]
    reps = 1 if quick else 9
    rounds = 10 if quick else 20
    wide = 8
    _run_once(_prefill(10), 2, 2)  # warm-up: imports, pools, caches

    # events per second through one listener (10-message transcript)
    samples = [_run_once(_prefill(10), rounds, wide) for _ in range(reps)]
    events = samples[0][2]
    events_per_s = events / median([s[0] for s in samples])

    by_size: list[dict[str, Any]] = []
    for n in sizes:
        prefill = _prefill(n)
        timers: dict[str, float] = {}
        one = [_run_once(prefill, rounds, 1, timers) for _ in range(reps)]
        many = [_run_once(prefill, rounds, wide) for _ in range(reps)]
        turns = rounds + 1
        turn_ms = median([s[0] for s in one]) / turns * 1000
        turn_cpu_ms = median([s[1] for s in one]) / turns * 1000
        tool_ms = max(0.0, (median([s[0] for s in many]) - median([s[0] for s in one]))
                      / (rounds * (wide - 1)) * 1000)
        tool_cpu_ms = max(0.0, (median([s[1] for s in many]) - median([s[1] for s in one]))
                          / (rounds * (wide - 1)) * 1000)
        gc.collect()
        gc.freeze()  # the same runs with the transcript out of the collector's reach
        try:
            frozen = [_run_once(prefill, rounds, 1) for _ in range(reps)]
        finally:
            gc.unfreeze()
        frozen_ms = median([s[1] for s in frozen]) / turns * 1000
        convert_ms = timers["convert"] / (reps * turns) * 1000
        stream_fn_ms = timers["stream_fn"] / (reps * turns) * 1000
        view = prefill + prefill[:40]
        warm_convert_ms = _time_pass(lambda v=view: default_convert_to_llm(v), 21) * 1000
        by_size.append({"messages": n, "turn_ms": turn_ms, "turn_cpu_ms": turn_cpu_ms,
                        "tool_call_ms": tool_ms, "tool_call_cpu_ms": tool_cpu_ms, "convert_to_llm_ms": convert_ms,
                        "convert_to_llm_warm_ms": warm_convert_ms,
                        "scripted_stream_fn_ms": stream_fn_ms, "turn_gc_frozen_ms": frozen_ms})
    base = by_size[0]
    for row in by_size:
        allowed = ((row["convert_to_llm_ms"] - base["convert_to_llm_ms"])
                   + (row["scripted_stream_fn_ms"] - base["scripted_stream_fn_ms"]))
        row["growth_ms"] = row["turn_cpu_ms"] - base["turn_cpu_ms"]
        row["growth_beyond_allowed_ms"] = row["growth_ms"] - allowed
        row["growth_beyond_allowed_gc_frozen_ms"] = (
            row["turn_gc_frozen_ms"] - base["turn_gc_frozen_ms"] - allowed)
    return {"events_per_s": events_per_s, "events_per_run": events,
            "rounds": rounds, "tools_per_round_wide": wide, "reps": reps, "by_size": by_size}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.quick)))


if __name__ == "__main__":
    main()
