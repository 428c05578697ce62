"""One per-turn-overhead scenario, in its own process: the floor and piagent, interleaved.

``python -m benchmarks._turns --url URL --rounds K --tools T --kind instant|sleep100
--reps N --impls floor,piagent [--alternate] [--executor run|owned]`` runs one warm-up of
each implementation, then ``N`` measured repetitions alternating floor / piagent (so drift
on a noisy machine hits both alike; ``--alternate`` also swaps which one goes first every
repetition, so neither always runs on a cache the other warmed), and prints one JSON line:
per implementation the wall and CPU seconds of each repetition and the duration of each
round, plus the process's peak RSS. ``--executor owned``: piagent runs its tools on one
caller-owned ``ThreadPoolExecutor`` made once per process (``Agent(tool_executor=...)``)
instead of its default run-scoped pool.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ._common import (
    PROMPT,
    SYSTEM,
    floor_tools,
    peak_rss_mb,
    piagent_tool,
    tool_specs,
)

__all__ = ["main"]

_TIMEOUT_S = 120.0


def _durations(started: float, ends: list[float]) -> list[float]:
    out, last = [], started
    for end in ends:
        out.append(end - last)
        last = end
    return out


class _FloorRunner:
    def __init__(self, url: str, model: str, kind: str, rounds: int) -> None:
        import requests

        from ._floor import run_floor

        self._run_floor = run_floor
        self.session = requests.Session()
        self.url, self.model, self.kind, self.rounds = url, model, kind, rounds
        self.specs = tool_specs(kind)
        self.tools = floor_tools(kind)

    def run(self) -> list[float]:
        result = self._run_floor(self.session, self.url, self.model, SYSTEM, PROMPT, self.specs,
                                 self.tools, max_rounds=self.rounds + 1, timeout_s=_TIMEOUT_S)
        if len(result.round_ends) != self.rounds + 1:
            msg = f"floor ran {len(result.round_ends)} rounds, expected {self.rounds + 1}"
            raise RuntimeError(msg)
        return _durations(result.started, result.round_ends)


class _PiagentRunner:
    def __init__(self, url: str, model: str, kind: str, rounds: int, tools: int,
                 executor: Any = None) -> None:
        from piagent import Model

        self.model = Model(id=model, api="openai-completions", provider="local", base_url=url)
        self.tool = piagent_tool(kind)
        self.rounds, self.tools = rounds, tools
        self.executor = executor

    def run(self) -> list[float]:
        from piagent import Agent, AssistantMessage, TextContent

        if self.executor is None:
            agent = Agent(system_prompt=SYSTEM, model=self.model, tools=[self.tool])
        else:
            agent = Agent(system_prompt=SYSTEM, model=self.model, tools=[self.tool],
                          tool_executor=self.executor)
        ends: list[float] = []
        append = ends.append
        now = time.perf_counter

        def listener(event: Any, signal: Any) -> None:
            if event.type == "turn_end":
                append(now())

        agent.subscribe(listener)
        started = time.perf_counter()
        run = agent.prompt(PROMPT, timeout=_TIMEOUT_S)
        if run.error_message:
            msg = f"piagent run failed: {run.error_message}"
            raise RuntimeError(msg)
        last = agent.state.messages[-1]
        results = sum(1 for m in run.messages if getattr(m, "role", None) == "toolResult")
        if (not isinstance(last, AssistantMessage) or len(ends) != self.rounds + 1
                or results != self.rounds * self.tools
                or not any(isinstance(b, TextContent) and b.text == "All tools done."
                           for b in last.content)):
            msg = f"piagent run did not finish the job ({len(ends)} turns, {results} results)"
            raise RuntimeError(msg)
        return _durations(started, ends)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--tools", type=int, required=True)
    parser.add_argument("--kind", default="instant")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--impls", default="floor,piagent")
    parser.add_argument("--alternate", action="store_true",
                        help="swap which implementation runs first every repetition")
    parser.add_argument("--executor", choices=("run", "owned"), default="run",
                        help="piagent's tool pool: run-scoped (default) or caller-owned")
    args = parser.parse_args(argv)
    model = f"script:{args.rounds}:{args.tools}:{args.kind}"
    runners: dict[str, Any] = {}
    executor: ThreadPoolExecutor | None = None
    if args.executor == "owned":
        # the caller-owned pool of a server running many agents: made once, outlives runs
        executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="bench-tools")
    for impl in args.impls.split(","):
        if impl == "floor":
            runners[impl] = _FloorRunner(args.url, model, args.kind, args.rounds)
        elif impl == "piagent":
            runners[impl] = _PiagentRunner(args.url, model, args.kind, args.rounds, args.tools,
                                           executor)
        else:
            parser.error(f"unknown implementation {impl!r}")
    rss_ready = peak_rss_mb()
    out: dict[str, Any] = {name: {"wall": [], "cpu": [], "rounds": []} for name in runners}
    for _ in range(args.warmup):
        for runner in runners.values():
            runner.run()
    order = list(runners.items())
    for rep in range(args.reps):
        for name, runner in (order[::-1] if args.alternate and rep % 2 else order):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            durations = runner.run()
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            out[name]["wall"].append(wall)
            out[name]["cpu"].append(cpu)
            out[name]["rounds"].append(durations)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["peak_rss_mb"] = peak_rss_mb()
    out["rss_before_runs_mb"] = rss_ready
    out["turns"] = args.rounds + 1
    out["process_cpu_s"] = usage.ru_utime + usage.ru_stime
    if executor is not None:
        executor.shutdown(wait=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
