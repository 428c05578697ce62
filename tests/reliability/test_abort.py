"""Aborts at random points (seeded), and 32 threads steering into one running agent.

Random aborts: each seed picks where the abort comes from (a listener at a random event, a
tool while it runs, a hook at a random call, another thread racing the loop, a real HTTP
stream at a random delta) and queues a steering message at a random moment. Every run
ends (bounded) with exactly one ``agent_end``, the transcript holds the user's input and
every executed call's result, the steering message is in the transcript or back in its
queue (exactly once, never both), no thread is left, and the agent runs again afterwards.

Steering storm: 32 threads each steer and follow up while the run is active (released
together by a barrier from inside a tool); some rounds also abort at a random point. After
draining the queues with ``continue_()``, every message is in the transcript exactly once.
"""

from __future__ import annotations

import os
import random
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from piagent import (
    AbortSignal,
    Agent,
    AgentEvent,
    AgentToolResult,
    AssistantMessage,
    Context,
    Model,
    StreamOptions,
    TextContent,
    ToolResultMessage,
    UserMessage,
    tool,
)
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT, Recorder, piagent_threads

from .conftest import FIGURES, scaled
from .faultserver import PROVIDER, Fault, FaultServer, Writer, good

SEED_BASE = int(os.environ.get("PIAGENT_RELIABILITY_SEED", "1515"))
SEEDS = [SEED_BASE + i for i in range(scaled(120, 2000))]
SOURCES = ("listener", "tool", "hook", "thread", "http")


def echo_answer(context: Context, options: StreamOptions) -> AssistantMessage:
    return assistant_text("ok")


def script() -> ScriptedStreamFn:
    return ScriptedStreamFn([
        assistant_tool_calls(("work", {"n": 1}, "call_1"), ("work", {"n": 2}, "call_2")),
        assistant_tool_calls(("work", {"n": 3}, "call_3")),
        *[echo_answer] * 8,  # answers for the steering message's turn and the reruns
    ])


class Tools:
    """The ``work`` tool; records which calls ran; may abort the run from inside."""

    def __init__(self, abort_in: str | None = None) -> None:
        self.lock = threading.Lock()  # guards ran (pool threads append)
        self.ran: list[str] = []
        self.abort_in = abort_in
        self.agent: Agent | None = None

        @tool
        def work(n: int, tool_call_id: str, signal: AbortSignal, on_update: Any) -> str:
            """Do some work.

            Args:
                n: How much.
            """
            with self.lock:
                self.ran.append(tool_call_id)
            on_update(AgentToolResult(content=[TextContent("half way")]))
            if tool_call_id == self.abort_in and self.agent is not None:
                self.agent.abort("aborted by a tool")
            return f"worked {n}"

        self.tool = work


# --- an HTTP stream of many deltas, for aborts inside a real provider stream -----------------

DELTAS = tuple(f"w{i} " for i in range(60))


def _many_deltas(w: Writer, api: str, hit: int) -> None:
    w.head()
    w.body(good(api, DELTAS))


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with FaultServer({"deltas": Fault("deltas", _many_deltas, "ok")}) as s:
        yield s


def test_the_random_aborts_cover_every_source() -> None:
    picked = Counter(random.Random(seed).choice(SOURCES) for seed in SEEDS)
    assert set(picked) == set(SOURCES)


@pytest.mark.parametrize("seed", SEEDS)
def test_an_abort_at_a_random_point_ends_the_run_cleanly(seed: int, server: FaultServer) -> None:
    rng = random.Random(seed)
    source = rng.choice(SOURCES)
    steer_at = rng.randrange(1, 40)  # the event number at which a steering message is queued
    tools = Tools(abort_in=rng.choice(["call_1", "call_2", "call_3"]) if source == "tool"
                  else None)
    hook_name = rng.choice(["transform_context", "prepare_request", "finish_turn",
                            "before_tool_call", "get_api_key"])
    hook_at = rng.randrange(3)
    hook_calls = [0]
    holder: dict[str, Agent] = {}

    def aborting_hook(*args: Any) -> Any:
        hook_calls[0] += 1
        if hook_calls[0] - 1 == hook_at:
            holder["agent"].abort("aborted by a hook")
        if hook_name == "transform_context":
            return args[0]
        return None

    hooks: dict[str, Any] = {hook_name: aborting_hook} if source == "hook" else {}
    if source == "http":
        api = rng.choice(list(PROVIDER))
        model = Model(id="m", api=api, provider=PROVIDER[api],
                      base_url=server.base_url("deltas", api))
        agent = Agent(model=model, api_key="k", tools=[tools.tool], **hooks)
    else:
        scripted = script()
        agent = Agent(model=scripted.model, stream_fn=scripted, tools=[tools.tool],
                      tool_execution=rng.choice(["parallel", "sequential"]), **hooks)
    holder["agent"] = tools.agent = agent
    recorder = Recorder(agent)
    abort_at = rng.randrange(5, 60 if source == "http" else 40)
    seen = [0]
    steered = [0]
    reached = threading.Event()

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        seen[0] += 1
        if seen[0] == steer_at:
            steered[0] += 1
            agent.steer("steered")
        if seen[0] == abort_at:
            if source in ("listener", "http"):
                agent.abort("aborted by a listener")
            elif source == "thread":
                reached.set()

    agent.subscribe(listener)
    racer = None
    if source == "thread":
        spins = rng.randrange(2000)

        def race() -> None:
            if reached.wait(WAIT):
                for _ in range(spins):  # a random head start for the loop, no sleeping
                    pass
                agent.abort("aborted by another thread")
        racer = threading.Thread(target=race, name="test-racer")
        racer.start()
    run = agent.prompt("go", block=False)
    assert run.wait(WAIT), f"seed {seed} ({source}): the run did not end"
    if racer is not None:
        reached.set()
        racer.join(WAIT)
        assert run.wait(WAIT)
    FIGURES.add("abort.random_runs")
    FIGURES.add(f"abort.by_{source}")

    types = recorder.types()
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    assert types.count("agent_end") == 1
    messages = agent.state.messages
    assert [m.text for m in messages if isinstance(m, UserMessage) and m.text == "go"] == ["go"]
    results = Counter(m.tool_call_id for m in messages if isinstance(m, ToolResultMessage))
    assert all(n == 1 for n in results.values())
    assert [i for i in tools.ran if i not in results] == [], "an executed call lost its result"
    steered_in_transcript = sum(isinstance(m, UserMessage) and m.text == "steered"
                                for m in messages)
    steered_queued = sum(getattr(m, "text", None) == "steered"
                         for m in agent.peek_queued_messages())
    assert steered_in_transcript + steered_queued == steered[0], "a steering message was lost"
    last = messages[-1]
    assert isinstance(last, AssistantMessage)
    if agent.state.error_message is not None:
        assert last.stop_reason == "aborted"
        assert "aborted by" in agent.state.error_message or \
            agent.state.error_message == "Request was aborted: aborted by a listener"
        FIGURES.add("abort.ended_aborted")
    assert piagent_threads() == []

    # the agent is usable again, and whatever was queued is delivered now
    agent.abort()  # no-op when idle
    again = agent.prompt("again", timeout=WAIT) if not agent.has_queued_messages() else \
        agent.continue_(timeout=WAIT)
    assert again.done
    assert agent.state.messages[-1].role == "assistant"
    total = sum(isinstance(m, UserMessage) and m.text == "steered" for m in agent.state.messages)
    queued = sum(getattr(m, "text", None) == "steered" for m in agent.peek_queued_messages())
    assert total + queued == steered[0]
    assert piagent_threads() == []


# --- 32 threads steering -----------------------------------------------------------------------

THREADS = 32
ROUNDS = scaled(4, 40)


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("mode", ["one-at-a-time", "all"])
def test_32_threads_steer_and_follow_up_into_one_running_agent(mode: str, round_: int) -> None:
    rng = random.Random(SEED_BASE * 7 + round_)
    abort_at = rng.randrange(10, 200) if round_ % 2 else None  # odd rounds abort somewhere
    barrier = threading.Barrier(THREADS + 1, timeout=WAIT)

    @tool
    def gate() -> str:
        """Wait until every steering thread is ready."""
        barrier.wait()
        return "released"

    scripted = ScriptedStreamFn([assistant_tool_calls(("gate", {}, "call_gate")),
                                 *[echo_answer] * 400])
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[gate],
                  steering_mode=mode, follow_up_mode=mode)
    events = [0]

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        events[0] += 1
        if events[0] == abort_at:
            agent.abort("storm abort")

    agent.subscribe(listener)
    errors: list[BaseException] = []

    def sender(i: int) -> None:
        try:
            barrier.wait()
            agent.steer(f"s{i}")
            agent.follow_up(f"f{i}")
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    senders = [threading.Thread(target=sender, args=(i,), name=f"test-sender-{i}")
               for i in range(THREADS)]
    for t in senders:
        t.start()
    run = agent.prompt("go", block=False)
    for t in senders:
        t.join(WAIT)
    assert not any(t.is_alive() for t in senders)
    assert errors == []
    assert run.wait(WAIT)
    for _ in range(4 * THREADS):  # drain: queued messages run as prompts
        if not agent.has_queued_messages():
            break
        agent.continue_(timeout=WAIT)
    assert not agent.has_queued_messages()
    texts = Counter(m.text for m in agent.state.messages if isinstance(m, UserMessage))
    expected = {f"s{i}" for i in range(THREADS)} | {f"f{i}" for i in range(THREADS)} | {"go"}
    assert set(texts) == expected
    assert all(n == 1 for n in texts.values()), [t for t, n in texts.items() if n > 1]
    FIGURES.add("steering.messages_delivered", 2 * THREADS)
    FIGURES.add("steering.rounds")
    assert piagent_threads() == []
