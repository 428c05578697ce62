"""What keeping the transcript in a session store costs a run.

Run: ``python benchmarks/sessions_bench.py [--reps N] [--quick]``. An ``Agent`` on
``piagent.testing.ScriptedStreamFn`` (zero model latency) runs R rounds × T instant tools,
without a store and with ``SQLiteStore`` (WAL, ``synchronous=NORMAL``, a file in a temporary
directory) and ``MemoryStore``, alternating repetition by repetition in one process; each
repetition uses a new session, so every run stores the same number of messages. Figures
are medians. *added ms/message* = (store run − no-store run of the same repetition) /
messages stored (each tool call also writes one start mark, counted in the cost, not in the
messages).

Budget: SQLite adds ≤ 0.3 ms per message, and nothing per streamed delta: the second
scenario streams long answers (hundreds of deltas per message); its added cost per message
must be the same as with short answers, and the store receives one append per message.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piagent import Agent, AgentTool, AgentToolResult, TextContent
from piagent.sessions import MemoryStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

BUDGET_MS = 0.3


def _instant(call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
    return AgentToolResult(content=[TextContent("ok")])


TOOL = AgentTool(name="noop", description="Returns at once.",
                 parameters={"type": "object", "properties": {}}, execute=_instant)


def _script(rounds: int, tools: int, words: int) -> list[Any]:
    text = " ".join(["word"] * words)
    turns: list[Any] = [assistant_tool_calls(*[("noop", {})] * tools, text=text)
                        for _ in range(rounds)]
    return [*turns, assistant_text(text)]


def _run(rounds: int, tools: int, words: int, store: SessionStore | None,
         session_id: str) -> tuple[float, float, int, int]:
    """One run: (wall s, CPU s, messages the run added, message_update events)."""
    fn = ScriptedStreamFn(_script(rounds, tools, words))
    kwargs: dict[str, Any] = {}
    if store is not None:
        kwargs = {"store": store, "session_id": session_id}
    agent = Agent(model=fn.model, stream_fn=fn, system_prompt="Be brief.", tools=[TOOL],
                  **kwargs)
    deltas = [0]

    def listener(event: Any, signal: Any) -> None:
        if event.type == "message_update":
            deltas[0] += 1

    agent.subscribe(listener)
    before = len(agent.state.messages)
    wall, cpu = time.perf_counter(), time.process_time()
    agent.prompt("go")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if agent.state.error_message:
        raise RuntimeError(agent.state.error_message)
    if store is not None and len(store.load(session_id)) != len(agent.state.messages):
        raise RuntimeError("the store does not hold the whole transcript")
    return wall, cpu, len(agent.state.messages) - before, deltas[0]


class _CountingStore(SQLiteStore):
    """Counts appends, to show the store is written once per message, never per delta."""

    appends = 0

    def append(self, session_id: str, messages: Any) -> None:
        type(self).appends += 1
        super().append(session_id, messages)


def _scenario(label: str, rounds: int, tools: int, words: int, reps: int,
              stores: dict[str, Callable[[], SessionStore]]) -> dict[str, float]:
    made = {name: make() for name, make in stores.items()}
    _run(rounds, tools, words, None, "warm")
    for name, store in made.items():
        _run(rounds, tools, words, store, f"warm-{name}")
    walls: dict[str, list[float]] = {"none": [], **{name: [] for name in made}}
    cpus: dict[str, list[float]] = {"none": [], **{name: [] for name in made}}
    messages = deltas = 0
    for rep in range(reps):
        wall, cpu, messages, deltas = _run(rounds, tools, words, None, "")
        walls["none"].append(wall)
        cpus["none"].append(cpu)
        for name, store in made.items():
            wall, cpu, _, _ = _run(rounds, tools, words, store, f"rep-{rep}")
            walls[name].append(wall)
            cpus[name].append(cpu)
    print(f"\n{label}: {rounds} rounds x {tools} tools, {messages} messages stored per run, "
          f"{deltas} streamed deltas ({deltas / messages:.0f} per message), {reps} reps")
    print(f"  {'store':<10} {'wall ms':>9} {'CPU ms':>9} {'added ms/msg':>13} "
          f"{'added CPU ms/msg':>17}")
    added: dict[str, float] = {}
    for name in walls:
        wall_ms = statistics.median(walls[name]) * 1e3
        cpu_ms = statistics.median(cpus[name]) * 1e3
        if name == "none":
            print(f"  {name:<10} {wall_ms:9.2f} {cpu_ms:9.2f}")
            continue
        per = statistics.median((s - n) / messages * 1e3
                                for s, n in zip(walls[name], walls["none"], strict=True))
        per_cpu = statistics.median((s - n) / messages * 1e3
                                    for s, n in zip(cpus[name], cpus["none"], strict=True))
        added[name] = per
        print(f"  {name:<10} {wall_ms:9.2f} {cpu_ms:9.2f} {per:13.3f} {per_cpu:17.3f}")
    for store in made.values():
        if isinstance(store, SQLiteStore):
            store.close()
    return added


def main() -> None:
    """Print the numbers and the verdict against the budget."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 repetitions, small runs")
    args = parser.parse_args()
    reps = 3 if args.quick else args.reps
    rounds = 5 if args.quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Callable[[], SessionStore]] = {
            "sqlite": lambda: SQLiteStore(Path(tmp) / "bench.db"),
            "memory": MemoryStore,
        }
        short = _scenario("short answers", rounds, 4, 5, reps, stores)
        counting = {"sqlite": lambda: _CountingStore(Path(tmp) / "count.db")}
        long = _scenario("long streamed answers", rounds, 1, 400, reps, counting)
        runs = 1 + reps  # the warm-up run, then the repetitions
        messages_per_run = 1 + rounds * 2 + 1
        print(f"\n  appends to the store: {_CountingStore.appends} for {runs} runs of "
              f"{messages_per_run} messages ({_CountingStore.appends / runs:.1f} per run)")
    verdict = "within" if short["sqlite"] <= BUDGET_MS else "OVER"
    print(f"\nSQLite: {short['sqlite']:.3f} ms/message with short answers, "
          f"{long['sqlite']:.3f} ms/message with long streamed ones; budget "
          f"{BUDGET_MS} ms: {verdict}")


if __name__ == "__main__":
    main()
