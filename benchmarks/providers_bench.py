"""Provider-layer overhead: ``stream_simple`` vs a hand-written requests + sseclient loop.

Both talk to the same fake OpenAI server (``benchmarks._openai_server``, a child process), one streamed
turn at a time, with a history of 10 and of 100 prior turns. The floor sends pre-built
wire dicts and reads the SSE with sseclient over large ``read1`` chunks; piagent converts
its messages, runs ``transform_messages``, streams on a worker thread and pushes pi's
events. "added ms/turn" is the difference of the medians. Abort latency is the time
from ``abort()`` to the final event while the server stalls mid-stream.

Run: ``python benchmarks/providers_bench.py [--quick]``. Importable pieces:
``floor_turn``, ``piagent_turn``, ``measure_overhead``, ``measure_abort_latency``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import requests
import sseclient

from benchmarks._common import ServerProcess
from piagent.abort import AbortController
from piagent.messages import AssistantMessage, SystemMessage, TextContent, UserMessage
from piagent.models import Model
from piagent.providers import stream_simple
from piagent.stream import Context, StreamOptions

__all__ = ["floor_turn", "main", "measure_abort_latency", "measure_overhead", "piagent_turn"]

SYSTEM = "You are a benchmark model."
_TEXT_MODEL = "text:20"  # the scripted server answers with 20 text deltas


def _history(turns: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """The same conversation as piagent messages and as Chat Completions wire dicts."""
    messages: list[Any] = [SystemMessage(content=SYSTEM, timestamp=0)]
    wire: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for k in range(turns):
        question = f"Question {k}: " + "please summarise the previous answer. " * 3
        answer = f"Answer {k}: " + "this is a fairly ordinary sentence of output. " * 5
        messages.append(UserMessage(content=[TextContent(question)]))
        messages.append(AssistantMessage(content=[TextContent(answer)], api="openai-completions",
                                         provider="openai", model=_TEXT_MODEL))
        wire.append({"role": "user", "content": question})
        wire.append({"role": "assistant", "content": answer})
    messages.append(UserMessage(content=[TextContent("And now?")]))
    wire.append({"role": "user", "content": "And now?"})
    return messages, wire


def floor_turn(session: requests.Session, base_url: str, wire: list[dict[str, Any]]) -> str:
    """One turn, hand-written: POST, parse SSE, accumulate the text."""
    body = {"model": _TEXT_MODEL, "messages": wire, "stream": True,
            "stream_options": {"include_usage": True}}
    response = session.post(base_url + "/chat/completions", data=json.dumps(body).encode(),
                            headers={"Content-Type": "application/json",
                                     "Authorization": "Bearer k"}, stream=True)
    raw = response.raw

    def chunks() -> Any:
        while True:
            chunk = raw.read1(65536, decode_content=True)
            if not chunk:
                return
            yield chunk

    text = []
    for event in sseclient.SSEClient(chunks()).events():  # to the end: the connection is reused
        if event.data == "[DONE]":
            continue
        for choice in json.loads(event.data)["choices"]:
            content = choice["delta"].get("content")
            if content:
                text.append(content)
    response.close()
    return "".join(text)


def piagent_turn(model: Model, context: Context, options: StreamOptions) -> str:
    """One turn through ``stream_simple``, consuming every event."""
    stream = stream_simple(model, context, options)
    for _event in stream:
        pass
    message = stream.result(10)
    if message.stop_reason != "stop":
        raise RuntimeError(f"benchmark turn failed: {message.error_message}")
    return message.text


def measure_overhead(server: ServerProcess, turns: int, repeats: int) -> dict[str, float]:
    """Median ms per turn for the floor and for piagent, interleaved to share noise."""
    messages, wire = _history(turns)
    model = Model(id=_TEXT_MODEL, api="openai-completions", provider="openai",
                  base_url=server.url)
    context = Context(messages)
    options = StreamOptions(api_key="k")
    session = requests.Session()
    floor_ms, ours_ms = [], []
    for i in range(repeats + 5):
        t0 = time.perf_counter()
        floor_turn(session, server.url, wire)
        t1 = time.perf_counter()
        piagent_turn(model, context, options)
        t2 = time.perf_counter()
        if i >= 5:  # warm-up: connections, imports, caches
            floor_ms.append((t1 - t0) * 1000)
            ours_ms.append((t2 - t1) * 1000)
    session.close()
    floor, ours = statistics.median(floor_ms), statistics.median(ours_ms)
    return {"floor_ms": floor, "piagent_ms": ours, "added_ms": ours - floor}


def measure_abort_latency(server: ServerProcess, repeats: int) -> dict[str, float]:
    """ms from ``abort()`` to the final event while the server holds the stream."""
    model = Model(id="stall:30", api="openai-completions", provider="openai",
                  base_url=server.url)
    context = Context([UserMessage(content="hi")])
    latencies = []
    for _ in range(repeats):
        controller = AbortController()
        stream = stream_simple(model, context, StreamOptions(api_key="k",
                                                             signal=controller.signal))
        events = iter(stream)
        for event in events:
            if event.type == "text_delta":
                break  # the server sends one delta, then holds the stream
        t0 = time.perf_counter()
        controller.abort()
        final = None
        for event in events:
            final = event
        latencies.append((time.perf_counter() - t0) * 1000)
        if final is None or final.type != "error" or stream.result(5).stop_reason != "aborted":
            raise RuntimeError("the aborted stream did not end with an aborted error event")
    return {"median_ms": statistics.median(latencies), "max_ms": max(latencies)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    repeats = 30 if args.quick else 200
    with ServerProcess() as server:
        rows = [(turns, measure_overhead(server, turns, repeats)) for turns in (10, 100)]
        abort = measure_abort_latency(server, 5 if args.quick else 30)
    print(f"provider overhead (20 text deltas per turn, {repeats} turns each, medians)")
    print(f"{'history':>10} {'floor ms':>10} {'piagent ms':>11} {'added ms/turn':>14}")
    for turns, row in rows:
        print(f"{turns:>7} tu {row['floor_ms']:>10.3f} {row['piagent_ms']:>11.3f} "
              f"{row['added_ms']:>14.3f}")
    print(f"abort latency: median {abort['median_ms']:.2f} ms, max {abort['max_ms']:.2f} ms "
          "(target <= 50 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
