"""Many agents: N agents in N threads against the local server, each R rounds of one tool.

All start together (a barrier); the figure is the total wall time, how many finished
cleanly, and ``threading.active_count()`` before and after (after the N caller threads
are joined; the provider's per-request worker threads may take a moment to exit, so the
count is polled for up to 2 s and the time it took is reported).

``python -m benchmarks.many_agents --url URL [--agents N] [--rounds R]`` prints one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

from ._common import PROMPT, SYSTEM, median, peak_rss_mb, piagent_tool

__all__ = ["run"]

_TIMEOUT_S = 120.0


def run(url: str, agents: int, rounds: int) -> dict[str, Any]:
    """Measure; returns the section's JSON."""
    from piagent import Agent, Model

    model = Model(id=f"script:{rounds}:1:instant", api="openai-completions",
                  provider="local", base_url=url)
    tool = piagent_tool("instant")
    # one warm-up run (imports, the connection pool's first session)
    warm = Agent(system_prompt=SYSTEM, model=model, tools=[tool]).prompt(PROMPT,
                                                                         timeout=_TIMEOUT_S)
    if warm.error_message:
        msg = f"warm-up run failed: {warm.error_message}"
        raise RuntimeError(msg)
    time.sleep(0.2)
    before = threading.active_count()
    barrier = threading.Barrier(agents + 1, timeout=_TIMEOUT_S)
    results: list[tuple[str | None, float]] = [("not run", 0.0)] * agents

    def work(index: int) -> None:
        agent = Agent(system_prompt=SYSTEM, model=model, tools=[tool])
        barrier.wait()
        start = time.perf_counter()
        try:
            run = agent.prompt(PROMPT, timeout=_TIMEOUT_S)
            error = run.error_message
            turns = sum(1 for m in run.messages if getattr(m, "role", None) == "assistant")
            if error is None and turns != rounds + 1:
                error = f"{turns} turns, expected {rounds + 1}"
        except Exception as exc:  # recorded and reported, never hidden
            error = f"{type(exc).__name__}: {exc}"
        results[index] = (error, time.perf_counter() - start)

    threads = [threading.Thread(target=work, args=(i,), name=f"bench-agent-{i}")
               for i in range(agents)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    peak_threads = threading.active_count()
    for thread in threads:
        thread.join(_TIMEOUT_S)
    total = time.perf_counter() - start
    settle_start = time.perf_counter()
    after = threading.active_count()
    while after > before and time.perf_counter() - settle_start < 2.0:
        time.sleep(0.01)
        after = threading.active_count()
    settle = time.perf_counter() - settle_start
    errors = [e for e, _ in results if e is not None]
    leftover = [t.name for t in threading.enumerate()
                if t.name.startswith("piagent") and t.is_alive()]
    return {
        "agents": agents, "rounds": rounds, "finished": agents - len(errors),
        "errors": errors[:5], "total_s": total,
        "per_agent_median_s": median([d for _, d in results]),
        "requests_per_s": agents * (rounds + 1) / total,
        "threads_before": before, "threads_after": after, "threads_at_start": peak_threads,
        "thread_settle_ms": settle * 1000, "leftover_piagent_threads": leftover[:10],
        "peak_rss_mb": peak_rss_mb(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.url, args.agents, args.rounds)))


if __name__ == "__main__":
    main()
