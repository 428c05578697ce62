"""``QueuedRunner`` in one process: ``submit`` hands the run to an executor thread, which calls
``execute``; on an ``SQLiteStore`` and a real PostgreSQL (``tests/sessions/pg.py``).

Covers: a submitted run streams, steers and aborts like a ``LocalRunner`` run; a payload
delivered twice runs once; a run whose executor died (its lease ran out mid-batch) is
recovered by the next ``execute`` with the ``replay`` rules; a failing ``submit`` is
recorded; the errors bad arguments raise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import AbortSignal, Agent, AgentBusyError, message_from_dict, tool
from piagent.runs import QueuedRunner, RunEvent
from piagent.runs._registry import backend_for
from piagent.sessions import MemoryStore, PostgresStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..sessions.pg import drop_schema, postgres_dsn, unique_schema

WAIT = 10.0


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    if request.param == "postgres":
        dsn = postgres_dsn()
        schema = unique_schema()
        pg = PostgresStore(dsn, schema=schema, max_connections=8)
        yield pg
        pg.close()
        drop_schema(dsn, schema)
    else:
        sqlite = SQLiteStore(tmp_path / "runs.db")
        yield sqlite
        sqlite.close()


class Queue:
    """A task queue of executor threads: ``submit`` starts one per run (joined at close)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.payloads: list[tuple[str, dict[str, Any]]] = []
        self.results: list[Any] = []
        self.runner: QueuedRunner | None = None

    def submit(self, run_id: str, payload: dict[str, Any]) -> None:
        self.payloads.append((run_id, payload))
        self.deliver(run_id, payload)

    def deliver(self, run_id: str, payload: dict[str, Any]) -> threading.Thread:
        assert self.runner is not None

        def work() -> None:
            assert self.runner is not None
            self.results.append(self.runner.execute(run_id, payload))

        thread = threading.Thread(target=work, name="test-executor")
        self.threads.append(thread)
        thread.start()
        return thread

    def join(self) -> None:
        for thread in self.threads:
            thread.join(WAIT)
            assert not thread.is_alive()


def _echo(context: Any, options: Any) -> Any:
    return assistant_text(f"echo {getattr(context.messages[-1], 'text', '')}")


def _runner(store: SessionStore, responses: list[Any], tools: list[Any] = (),  # type: ignore[assignment]
            agents: list[Agent] | None = None, **options: Any) -> tuple[QueuedRunner, Queue]:
    scripted = ScriptedStreamFn(responses)
    queue = Queue()

    def make_agent(session_id: str) -> Agent:
        agent = Agent(model=scripted.model, stream_fn=scripted, tools=list(tools),
                      system_prompt="test")
        if agents is not None:
            agents.append(agent)
        return agent

    queue.runner = QueuedRunner(store, make_agent, queue.submit, **options)
    return queue.runner, queue


def _wait_until(predicate: Any, what: str) -> None:
    ticker = threading.Event()  # never set: its wait() is the poll interval
    for _ in range(int(WAIT / 0.01)):
        if predicate():
            return
        ticker.wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _collect(runner: QueuedRunner, run_id: str) -> list[RunEvent]:
    out = []
    for item in runner.events(run_id, timeout=WAIT):
        assert item is not None, "no event within the wait"
        out.append(item)
    return out


def test_a_submitted_run_executes_and_streams(store: SessionStore) -> None:
    runner, queue = _runner(store, [_echo])
    run_id = runner.start("s1", "hello")
    events = _collect(runner, run_id)
    assert runner.wait(run_id, WAIT)
    queue.join()
    assert events[0].type == "agent_start" and events[-1].type == "agent_end"
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert runner.status(run_id).state == "done"
    assert queue.results == ["done"]
    assert [getattr(m, "text", "") for m in store.load("s1") if m.role != "system"] == [
        "hello", "echo hello"]
    assert queue.payloads[0][1]["session_id"] == "s1"


def test_steer_and_abort_reach_the_executor(store: SessionStore) -> None:
    entered, gate = threading.Event(), threading.Event()

    @tool
    def block(signal: AbortSignal) -> str:
        """Wait for the test (or the abort)."""
        entered.set()
        for _ in range(int(WAIT / 0.01)):
            if gate.is_set() or signal.aborted:
                return "unblocked"
            signal.wait(0.01)
        raise TimeoutError("neither the gate nor the abort came")

    agents: list[Agent] = []
    runner, queue = _runner(store, [assistant_tool_calls(("block", {})), _echo,
                                    assistant_tool_calls(("block", {})), _echo], [block],
                            agents)
    run_id = runner.start("s1", "go")
    assert entered.wait(WAIT)
    runner.steer("s1", "steered")
    _wait_until(lambda: agents[-1].has_queued_messages(), "the steer to reach the Agent")
    with pytest.raises(AgentBusyError):
        runner.start("s1", "again")
    gate.set()
    assert runner.wait(run_id, WAIT)
    texts = [getattr(m, "text", "") for m in store.load("s1") if m.role == "user"]
    assert texts == ["go", "steered"]

    entered.clear()
    gate.clear()
    second = runner.start("s1", "block again")
    assert entered.wait(WAIT)
    runner.abort(second, "stop now")
    assert runner.wait(second, WAIT)
    queue.join()
    info = runner.status(second)
    assert info.state == "aborted" and info.error_message == "stop now"
    assert [e.type for e in _collect(runner, second)][-1] == "agent_end"


def test_a_payload_delivered_twice_runs_once(store: SessionStore) -> None:
    entered, gate = threading.Event(), threading.Event()

    @tool
    def block() -> str:
        """Wait for the test."""
        entered.set()
        assert gate.wait(WAIT)
        return "unblocked"

    runner, queue = _runner(store, [assistant_tool_calls(("block", {})), _echo], [block])
    run_id = runner.start("s1", "go")
    assert entered.wait(WAIT)
    queue.deliver(*queue.payloads[0])  # a redelivery while the first executor holds the lease
    gate.set()
    assert runner.wait(run_id, WAIT)
    queue.join()
    assert sorted(queue.results, key=str) == [None, "done"]
    assert [m.role for m in store.load("s1") if m.role != "system"] == [
        "user", "assistant", "toolResult", "assistant"]


def test_a_run_whose_executor_died_is_recovered_with_the_replay_rules(
        store: SessionStore) -> None:
    ran: list[str] = []

    @tool(replay="never")
    def charge() -> str:
        """Charge a card."""
        ran.append("charge")
        return "charged"

    @tool(replay="safe")
    def look() -> str:
        """Look something up."""
        ran.append("look")
        return "looked"

    delivered: list[tuple[str, dict[str, Any]]] = []
    scripted = ScriptedStreamFn([_echo])
    runner = QueuedRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted,
                                                   tools=[charge, look]),
                          lambda run_id, payload: delivered.append((run_id, payload)),
                          lease_s=0.3, redelivery_grace=WAIT)
    run_id = runner.start("s1", "do both")
    # an executor took it, stored the prompt and the tool calls, started both, and died
    backend = backend_for(store)
    assert backend.take_run(run_id, "dead-executor", 0.3).kind == "fresh"  # type: ignore[attr-defined]
    backend.set_running(run_id, "dead-executor")
    prompt = message_from_dict(delivered[0][1]["input"][0])  # the input, as it was sent
    store.append("s1", [prompt,
                        assistant_tool_calls(("charge", {}, "c1"), ("look", {}, "c2"))])
    store.mark_started("s1", "c1")
    store.mark_started("s1", "c2")
    backend.append_events(run_id, 0, ['{"type":"agent_start"}'])
    assert runner.execute(*delivered[0]) == "done"  # waits out the dead lease, then recovers
    assert ran == ["look"]
    messages = [m for m in store.load("s1") if m.role != "system"]
    assert [m.role for m in messages] == ["user", "assistant", "toolResult", "toolResult",
                                          "assistant"]
    assert messages[2].is_error and "not run again" in messages[2].text  # type: ignore[union-attr]
    events = _collect(runner, run_id)
    assert events[0].id == "0000000000" and events[1].id == "0000000001"
    assert events[-1].type == "agent_end"


def test_an_executor_that_died_before_storing_the_input_has_it_run(
        store: SessionStore) -> None:
    delivered: list[tuple[str, dict[str, Any]]] = []
    scripted = ScriptedStreamFn([_echo])
    runner = QueuedRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted),
                          lambda run_id, payload: delivered.append((run_id, payload)),
                          lease_s=0.3, redelivery_grace=WAIT)
    run_id = runner.start("s1", "hello")
    backend = backend_for(store)
    assert backend.take_run(run_id, "dead-executor", 0.3).kind == "fresh"  # type: ignore[attr-defined]
    backend.set_running(run_id, "dead-executor")  # and died before the prompt was stored
    assert runner.execute(*delivered[0]) == "done", runner.status(run_id)
    assert [getattr(m, "text", "") for m in store.load("s1")] == ["hello", "echo hello"]
    # delivered once more after that: nothing is run twice
    assert runner.execute(*delivered[0]) is None
    assert len(store.load("s1")) == 2


def test_a_failing_submit_is_recorded(store: SessionStore) -> None:
    def submit(run_id: str, payload: dict[str, Any]) -> None:
        raise ConnectionError("broker down")

    scripted = ScriptedStreamFn([_echo])
    runner = QueuedRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted),
                          submit)
    with pytest.raises(ConnectionError, match="broker down"):
        runner.start("s1", "hello")
    # the session is free again and the failed run says why
    with pytest.raises(ConnectionError):
        runner.start("s1", "hello")


def test_bad_arguments(tmp_path: Path) -> None:
    agent = lambda sid: Agent()  # noqa: E731
    with pytest.raises(TypeError, match="needs a store other processes reach"):
        QueuedRunner(MemoryStore(), agent, lambda r, p: None)
    store = SQLiteStore(tmp_path / "x.db")
    with pytest.raises(TypeError, match="submit must be a callable"):
        QueuedRunner(store, agent, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease_s must be"):
        QueuedRunner(store, agent, lambda r, p: None, lease_s=0)
    runner = QueuedRunner(store, agent, lambda r, p: None)
    with pytest.raises(ValueError, match="takes the payload start"):
        runner.execute("x", {"session_id": "s"})
    with pytest.raises(TypeError, match="accepts a str"):
        runner.start("s", 42)  # type: ignore[arg-type]
    store.close()
