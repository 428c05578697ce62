"""A bounded soak: many runs in one process, measuring threads, descriptors and memory.

Short mode: 300 runs; full mode: 5,000. Nine runs in ten are a scripted three-turn run
with parallel tools (a new ``Agent`` each time, so the transcript does not grow); every
tenth is a real HTTP run against a random fault of ``faultserver.FAULTS`` (stalls left out:
``test_faults`` covers them). After a warm-up, resident memory is sampled (``/proc/self/
statm``, after a full GC) and its growth per 1,000 runs is the least-squares slope of the
samples. Resident memory also moves with the allocator (HTTP runs with large bodies raise
its high-water mark in steps), so a last phase of runs under ``tracemalloc`` measures the
Python heap itself: objects kept alive from run to run. The soak fails on any hang, any
``piagent-*`` thread left, any growth of the thread count or of open descriptors beyond a
handful, resident memory growing faster than 4 MiB per 1,000 runs, or the traced heap
growing faster than 128 KiB per 1,000 runs (256 in short mode; a kept Agent or transcript per run
would be far more).
"""

from __future__ import annotations

import gc
import logging
import random
import threading
import tracemalloc
from collections.abc import Iterator

import pytest

from piagent import Agent, Model, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT, piagent_threads

from .conftest import FIGURES, FULL, open_fds, rss_bytes, scaled
from .faultserver import APIS, FAULTS, PROVIDER, FaultServer

RUNS = scaled(300, 5000)
WARM_UP = scaled(100, 500)
SAMPLES = 10
HTTP_FAULTS = sorted(name for name, f in FAULTS.items()
                     if "aborted" not in {f.outcome(api) for api in APIS}
                     and name != "ok-huge-event")
MAX_GROWTH_PER_1000 = 4 * 1024 * 1024
MAX_TRACED_GROWTH_PER_1000 = scaled(256, 128) * 1024  # short mode: less warm-up
TRACED_RUNS = scaled(300, 1500)
TRACED_WARM_UP = 200
TRACED_FAULTS = ["ok", "500", "cut-mid-stream", "invalid-json", "content-type-html",
                 "ok-bytewise"]


@tool
def echo(text: str) -> str:
    """Echo the text back (one tool for every run, as an application defines it once).

    Args:
        text: What to echo.
    """
    return "echo " + text


TOOL = echo


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with FaultServer(keep_requests=16) as s:
        yield s


def scripted_run() -> bool:
    scripted = ScriptedStreamFn([
        assistant_tool_calls(("echo", {"text": "a"}), ("echo", {"text": "b"})),
        assistant_tool_calls(("echo", {"text": "c"})),
        assistant_text("done"),
    ])
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[TOOL])
    run = agent.prompt("go", block=False)
    ended = run.wait(WAIT)
    assert agent.state.error_message is None
    return ended


def http_run(server: FaultServer, rng: random.Random,
             faults: list[str] | None = None) -> bool:
    fault, api = rng.choice(faults or HTTP_FAULTS), rng.choice(APIS)
    model = Model(id="m", api=api, provider=PROVIDER[api], base_url=server.base_url(fault, api))
    agent = Agent(model=model, api_key="k", max_retry_delay_ms=FAULTS[fault].cap_ms)
    run = agent.prompt("go", block=False)
    ended = run.wait(WAIT)
    expect = FAULTS[fault].outcome(api)
    assert (agent.state.error_message is None) == (expect == "ok"), (fault, api)
    return ended


def one(i: int, server: FaultServer, rng: random.Random,
        faults: list[str] | None = None) -> None:
    ended = http_run(server, rng, faults) if i % 10 == 9 else scripted_run()
    if not ended:
        FIGURES.add("soak.hangs")
    assert ended, f"run {i} did not end"
    assert piagent_threads() == []


def slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of (run, bytes): bytes per run."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var


@pytest.fixture
def quiet_piagent_logs() -> Iterator[None]:
    """The HTTP faults log retries and failures; pytest keeps every captured record of a
    test in memory, which would count as growth. Only records at CRITICAL are kept here."""
    logger = logging.getLogger("piagent")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@pytest.mark.timeout(scaled(60, 900))
def test_a_bounded_soak_leaks_no_threads_descriptors_or_memory(
        server: FaultServer, quiet_piagent_logs: None) -> None:
    rng = random.Random(15)
    for i in range(WARM_UP):
        one(i, server, rng)
    gc.collect()
    # a thread an earlier test left may end meanwhile: the soak's own leftovers are new ones
    before = set(threading.enumerate())
    threads0, fds0, rss0 = len(before), open_fds(), rss_bytes()
    points = [(WARM_UP, rss0)]
    every = (RUNS - WARM_UP) // SAMPLES
    for i in range(WARM_UP, RUNS):
        one(i, server, rng)
        if (i + 1 - WARM_UP) % every == 0:
            gc.collect()
            points.append((i + 1, rss_bytes()))
    gc.collect()
    new_threads = [t.name for t in threading.enumerate() if t not in before]
    threads1, fds1, rss1 = threading.active_count(), open_fds(), rss_bytes()
    measured = RUNS - WARM_UP
    per_1000 = slope(points) * 1000
    FIGURES.set("soak.runs", RUNS)
    FIGURES.set("soak.http_runs", RUNS // 10)
    FIGURES.set("soak.thread_growth", threads1 - threads0)
    FIGURES.set("soak.fd_growth", fds1 - fds0)
    FIGURES.set("soak.rss_start_mib", round(rss0 / 2**20, 1))
    FIGURES.set("soak.rss_end_mib", round(rss1 / 2**20, 1))
    FIGURES.set("soak.rss_growth_kib_per_1000_runs", round(per_1000 / 1024, 1))
    FIGURES.set("soak.rss_net_kib_per_1000_runs",
                round((rss1 - rss0) / 1024 / (measured / 1000), 1))
    traced_per_1000 = traced_growth(server, rng) * 1000
    FIGURES.set("soak.traced_runs", TRACED_RUNS)
    FIGURES.set("soak.traced_heap_growth_kib_per_1000_runs", round(traced_per_1000 / 1024, 1))
    assert new_threads == [], f"threads left by the soak: {new_threads}"
    assert fds1 - fds0 <= 5, f"open descriptors grew by {fds1 - fds0}"
    # short mode measures too few runs for a tight bound; the full soak is the figure
    limit = MAX_GROWTH_PER_1000 if FULL else 4 * MAX_GROWTH_PER_1000
    assert per_1000 < limit, f"memory grows {per_1000 / 2**20:.2f} MiB per 1,000 runs"
    assert traced_per_1000 < MAX_TRACED_GROWTH_PER_1000, \
        f"the Python heap grows {traced_per_1000 / 1024:.1f} KiB per 1,000 runs"


def traced_growth(server: FaultServer, rng: random.Random) -> float:
    """Bytes of Python heap kept per run, over ``TRACED_RUNS`` runs under tracemalloc.

    Fewer distinct URLs here (``TRACED_FAULTS`` × 4 APIs): caches keyed by URL (urllib's,
    the standard library's header parsing) are bounded but fill slowly with hundreds of
    URLs, which would read as growth."""
    tracemalloc.start(1)
    try:
        for i in range(TRACED_WARM_UP):  # bounded caches fill first
            one(i, server, rng, TRACED_FAULTS)
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        for i in range(TRACED_RUNS):
            one(i, server, rng, TRACED_FAULTS)
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - start) / TRACED_RUNS
    finally:
        tracemalloc.stop()
