"""Abort and steer latency.

* abort while the server stalls mid-stream (``openai-completions`` against the local
  server's ``stall:S`` model): ``abort()`` → the ``agent_end`` listener, and → ``wait()``
  returning (the run settled);
* abort while a tool waits on its signal (``ScriptedStreamFn``; the tool blocks in
  ``signal.wait``): the same two figures;
* steer: ``steer()`` during a tool batch (a 50 ms tool) → the steering message's
  ``message_end``, and the batch's last ``tool_execution_end`` → that ``message_end``
  (the loop's own share).

``python -m benchmarks.latency_bench [--quick] [--url URL]`` prints one JSON line
(without ``--url`` the stalled-server figure is skipped).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

from ._common import median, quantile

__all__ = ["run"]

_WAIT_S = 10.0  # every wait here is bounded by this


def _summary(values_s: list[float]) -> dict[str, Any]:
    ms = [v * 1000 for v in values_s]
    return {"median_ms": median(ms), "p90_ms": quantile(ms, 0.9), "max_ms": max(ms),
            "n": len(ms)}


def _abort_case(make_agent: Any, trigger: str, reps: int) -> dict[str, Any]:
    """Start a run, wait for the ``trigger`` event, abort; time agent_end and settle."""
    to_end: list[float] = []
    to_settle: list[float] = []
    for _ in range(reps):
        agent = make_agent()
        triggered = threading.Event()
        ended: list[float] = []

        def listener(event: Any, signal: Any, fired: threading.Event = triggered,
                     out: list[float] = ended) -> None:
            if event.type == trigger:
                fired.set()
            elif event.type == "agent_end":
                out.append(time.perf_counter())

        agent.subscribe(listener)
        run = agent.prompt("Run the benchmark job.", block=False)
        if not triggered.wait(_WAIT_S):
            run.abort()
            run.wait(_WAIT_S)
            msg = f"the run never reached {trigger} ({run.error_message})"
            raise RuntimeError(msg)
        time.sleep(0.02)  # let it settle into the stall / the tool's wait
        start = time.perf_counter()
        agent.abort()
        settled = run.wait(_WAIT_S)
        done = time.perf_counter()
        if not settled or not ended:
            msg = "the aborted run did not end"
            raise RuntimeError(msg)
        last = agent.state.messages[-1]
        if getattr(last, "stop_reason", None) != "aborted":
            msg = f"the run ended {getattr(last, 'stop_reason', None)!r}, not 'aborted'"
            raise RuntimeError(msg)
        to_end.append(ended[0] - start)
        to_settle.append(done - start)
    return {"to_agent_end": _summary(to_end), "to_settled": _summary(to_settle)}


def _abort_stalled_server(url: str, reps: int) -> dict[str, Any]:
    from piagent import Agent, Model

    model = Model(id="stall:10", api="openai-completions", provider="local", base_url=url)
    return _abort_case(lambda: Agent(system_prompt="You are a benchmark.", model=model),
                       "message_update", reps)


def _abort_waiting_tool(reps: int) -> dict[str, Any]:
    from piagent import Agent, AgentTool, AgentToolResult, TextContent
    from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

    def execute(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        signal.wait(_WAIT_S)
        return AgentToolResult(content=[TextContent("stopped")])

    tool = AgentTool(name="wait", description="Waits until aborted.",
                     parameters={"type": "object", "properties": {}}, execute=execute)

    def make() -> Any:
        fn = ScriptedStreamFn([assistant_tool_calls(("wait", {})), assistant_text("never")])
        return Agent(system_prompt="You are a benchmark.", model=fn.model, stream_fn=fn,
                     tools=[tool])

    return _abort_case(make, "tool_execution_start", reps)


def _steer(reps: int) -> dict[str, Any]:
    from piagent import Agent, AgentTool, AgentToolResult, TextContent, UserMessage
    from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

    def execute(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        signal.wait(0.05)
        return AgentToolResult(content=[TextContent("done")])

    tool = AgentTool(name="work", description="Works for 50 ms.",
                     parameters={"type": "object", "properties": {}}, execute=execute)
    from_steer: list[float] = []
    from_batch: list[float] = []
    for _ in range(reps):
        fn = ScriptedStreamFn([assistant_tool_calls(("work", {}), ("work", {})),
                               assistant_text("Noted.")])
        agent = Agent(system_prompt="You are a benchmark.", model=fn.model, stream_fn=fn,
                      tools=[tool])
        steer = UserMessage(content=[TextContent("Also do this.")])
        started = threading.Event()
        marks: dict[str, float] = {}

        def listener(event: Any, signal: Any, fired: threading.Event = started,
                     out: dict[str, float] = marks, message: Any = steer) -> None:
            now = time.perf_counter()
            if event.type == "tool_execution_start":
                fired.set()
            elif event.type == "tool_execution_end":
                out["batch_done"] = now
            elif event.type == "message_end" and event.message is message:
                out["delivered"] = now

        agent.subscribe(listener)
        run = agent.prompt("Run the benchmark job.", block=False)
        if not started.wait(_WAIT_S):
            run.abort()
            run.wait(_WAIT_S)
            msg = "the steer run never started its tools"
            raise RuntimeError(msg)
        t_steer = time.perf_counter()
        agent.steer(steer)
        if not run.wait(_WAIT_S) or "delivered" not in marks:
            msg = f"the steering message was not delivered ({run.error_message})"
            raise RuntimeError(msg)
        from_steer.append(marks["delivered"] - t_steer)
        from_batch.append(marks["delivered"] - marks["batch_done"])
    return {"steer_to_message_end": _summary(from_steer),
            "batch_done_to_message_end": _summary(from_batch), "tool_ms": 50}


def run(quick: bool, url: str | None) -> dict[str, Any]:
    """Measure; returns the section's JSON."""
    reps = 3 if quick else 20
    out: dict[str, Any] = {"reps": reps}
    out["abort_stalled_stream"] = _abort_stalled_server(url, reps) if url else None
    out["abort_waiting_tool"] = _abort_waiting_tool(reps)
    out["steer"] = _steer(reps)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--url")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.quick, args.url)))


if __name__ == "__main__":
    main()
