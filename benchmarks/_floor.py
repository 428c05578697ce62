"""The floor: the smallest honest hand-written agent loop on requests + sseclient-py.

POST the transcript, parse the SSE chunks (text and tool-call deltas), run the tools
(concurrently, on a pool made once per run), append the results, repeat. No events, no
hooks, no validation, no abort: whatever piagent costs above this is its overhead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests
import sseclient

__all__ = ["FloorResult", "run_floor"]

ToolFn = Callable[[dict[str, Any]], str]


@dataclass
class FloorResult:
    """One run: the transcript, and ``perf_counter`` at the end of each round."""

    messages: list[dict[str, Any]]
    round_ends: list[float] = field(default_factory=list)
    started: float = 0.0


def run_floor(session: requests.Session, base_url: str, model: str, system: str, prompt: str,
              tool_specs: list[dict[str, Any]], tools: dict[str, ToolFn],
              max_rounds: int, timeout_s: float = 60.0) -> FloorResult:
    """Run the job; bounded by ``max_rounds`` requests and ``timeout_s`` seconds."""
    url = base_url.rstrip("/") + "/chat/completions"
    messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                      {"role": "user", "content": prompt}]
    result = FloorResult(messages, started=time.perf_counter())
    deadline = time.monotonic() + timeout_s
    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in range(max_rounds):
            if time.monotonic() > deadline:
                msg = "the floor run took longer than its time bound"
                raise TimeoutError(msg)
            body = {"model": model, "messages": messages, "tools": tool_specs, "stream": True}
            text: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            with session.post(url, json=body, stream=True, timeout=timeout_s) as response:
                response.raise_for_status()
                source = response.iter_content(chunk_size=None)
                for event in sseclient.SSEClient(source).events():
                    if event.data == "[DONE]":
                        continue  # read on to the end, so the connection is reused
                    chunk = json.loads(event.data)
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            text.append(delta["content"])
                        for call in delta.get("tool_calls") or ():
                            slot = calls.setdefault(call["index"],
                                                    {"id": "", "name": "", "args": []})
                            function = call.get("function") or {}
                            if call.get("id"):
                                slot["id"] = call["id"]
                            if function.get("name"):
                                slot["name"] = function["name"]
                            slot["args"].append(function.get("arguments") or "")
            assistant: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
            ordered = [calls[i] for i in sorted(calls)]
            if ordered:
                assistant["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": "".join(c["args"])}}
                    for c in ordered]
            messages.append(assistant)
            if not ordered:
                result.round_ends.append(time.perf_counter())
                return result
            futures = [pool.submit(tools[c["name"]], json.loads("".join(c["args"]) or "{}"))
                       for c in ordered]
            for call, future in zip(ordered, futures, strict=True):
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": future.result(timeout_s)})
            result.round_ends.append(time.perf_counter())
    msg = f"the model still asked for tools after {max_rounds} rounds"
    raise RuntimeError(msg)
