"""``QueuedRunner`` in one process: ``submit`` hands the run to an executor thread, which calls
``execute``; on an ``SQLiteStore`` and a real PostgreSQL (``tests/sessions/pg.py``).

Covers: a submitted run streams, steers and aborts like a ``LocalRunner`` run; a payload
delivered twice runs once; a run whose executor died (its lease ran out mid-batch) is
recovered by the next ``execute`` with the ``replay`` rules; a failing ``submit`` is
recorded; the errors bad arguments raise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from piagent import AbortSignal, Agent, AgentBusyError, message_from_dict, tool
from piagent.runs import QueuedRunner
from piagent.runs._registry import backend_for
from piagent.sessions import MemoryStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_tool_calls

from ..conftest import WAIT, wait_until
from .conftest import (
    DJANGO,
    SQLALCHEMY,
    WatchedAgent,
    charge_and_look,
    collect,
    echo,
    store_fixture,
)

store = store_fixture("sqlite", "postgres", *SQLALCHEMY, *DJANGO)


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


def _runner(store: SessionStore, responses: list[Any], tools: list[Any] = (),  # type: ignore[assignment]
            agents: list[WatchedAgent] | None = None,
            **options: Any) -> tuple[QueuedRunner, Queue]:
    scripted = ScriptedStreamFn(responses)
    queue = Queue()

    def make_agent(session_id: str) -> Agent:
        agent = WatchedAgent(model=scripted.model, stream_fn=scripted, tools=list(tools),
                             system_prompt="test")
        if agents is not None:
            agents.append(agent)
        return agent

    queue.runner = QueuedRunner(store, make_agent, queue.submit, **options)
    return queue.runner, queue


def test_a_submitted_run_executes_and_streams(store: SessionStore) -> None:
    runner, queue = _runner(store, [echo])
    run_id = runner.start("s1", "hello")
    events = collect(runner, run_id)
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

    agents: list[WatchedAgent] = []
    runner, queue = _runner(store, [assistant_tool_calls(("block", {})), echo,
                                    assistant_tool_calls(("block", {})), echo], [block],
                            agents)
    run_id = runner.start("s1", "go")
    assert entered.wait(WAIT)
    runner.steer("s1", "steered")
    assert agents[-1].wait_queued(lambda a: a.has_queued_messages()), "the steer never came"
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
    assert [e.type for e in collect(runner, second)][-1] == "agent_end"


def test_a_payload_delivered_twice_runs_once(store: SessionStore) -> None:
    entered, gate = threading.Event(), threading.Event()

    @tool
    def block() -> str:
        """Wait for the test."""
        entered.set()
        assert gate.wait(WAIT)
        return "unblocked"

    runner, queue = _runner(store, [assistant_tool_calls(("block", {})), echo], [block])
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
    charge, look = charge_and_look(ran)

    delivered: list[tuple[str, dict[str, Any]]] = []
    scripted = ScriptedStreamFn([echo])
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
    events = collect(runner, run_id)
    assert events[0].id == "0000000000" and events[1].id == "0000000001"
    assert events[-1].type == "agent_end"


def _died_before_storing_the_input(
        store: SessionStore, make_agent: Callable[[str], Agent]
) -> tuple[QueuedRunner, str, list[tuple[str, dict[str, Any]]]]:
    """A queued run ``s1``/"hello" taken by an executor that died before it stored the
    prompt; the runner, the run id and what was submitted."""
    delivered: list[tuple[str, dict[str, Any]]] = []
    runner = QueuedRunner(store, make_agent,
                          lambda run_id, payload: delivered.append((run_id, payload)),
                          lease_s=0.3, redelivery_grace=WAIT)
    run_id = runner.start("s1", "hello")
    backend = backend_for(store)
    assert backend.take_run(run_id, "dead-executor", 0.3).kind == "fresh"  # type: ignore[attr-defined]
    backend.set_running(run_id, "dead-executor")
    return runner, run_id, delivered


def test_an_executor_that_died_before_storing_the_input_has_it_run(
        store: SessionStore) -> None:
    scripted = ScriptedStreamFn([echo])
    runner, run_id, delivered = _died_before_storing_the_input(
        store, lambda sid: Agent(model=scripted.model, stream_fn=scripted))
    assert runner.execute(*delivered[0]) == "done", runner.status(run_id)
    assert [getattr(m, "text", "") for m in store.load("s1")] == ["hello", "echo hello"]
    # delivered once more after that: nothing is run twice
    assert runner.execute(*delivered[0]) is None
    assert len(store.load("s1")) == 2


def test_a_failing_submit_is_recorded(store: SessionStore) -> None:
    def submit(run_id: str, payload: dict[str, Any]) -> None:
        raise ConnectionError("broker down")

    scripted = ScriptedStreamFn([echo])
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


def _lapse(runner: QueuedRunner, run_id: str) -> None:
    """Wait (bounded) until the dead executor's lease has run out."""
    wait_until(lambda: runner.status(run_id).state == "lost", "the dead lease to run out",
               wake=lambda seconds: runner.wait(run_id, seconds))


def test_recover_lost_submits_a_lapsed_run_once_and_its_stream_says_it_resumed(
        store: SessionStore) -> None:
    delivered: list[tuple[str, dict[str, Any]]] = []
    scripted = ScriptedStreamFn([echo])

    def make(lease_s: float) -> QueuedRunner:
        return QueuedRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted),
                            lambda run_id, payload: delivered.append((run_id, payload)),
                            lease_s=lease_s, redelivery_grace=WAIT)

    runner, elsewhere = make(0.3), make(WAIT)
    run_id = runner.start("s1", "hello")
    backend = backend_for(store)
    assert backend.take_run(run_id, "dead-executor", 0.3).kind == "fresh"  # type: ignore[attr-defined]
    backend.set_running(run_id, "dead-executor")
    store.append("s1", [message_from_dict(delivered[0][1]["input"][0])])  # then it died
    backend.append_events(run_id, 0, ['{"type":"agent_start"}'])
    assert runner.recover_lost() == []  # its lease still holds
    _lapse(runner, run_id)
    assert elsewhere.recover_lost() == [run_id]  # one checker submits it...
    assert runner.recover_lost() == []  # ...the others see it held
    assert runner.status(run_id).state == "running"  # a recovery is on its way
    assert delivered[-1] == (run_id, {"v": 1, "session_id": "s1", "input": [],
                                      "recover": True})
    assert runner.execute(*delivered[-1]) == "done"  # taken at once, not after a lease
    assert [getattr(m, "text", "") for m in store.load("s1")] == ["hello", "echo hello"]
    types = [e.type for e in collect(runner, run_id)]
    assert types[:2] == ["agent_start", "run_resumed"] and types[-1] == "agent_end"
    assert types.count("agent_start") == 1 and types.count("run_resumed") == 1
    assert runner.execute(*delivered[0]) is None  # the broker's redelivery, later: nothing
    assert runner.execute(*delivered[-1]) is None  # a recovery sent twice: nothing either


def test_a_recovery_whose_input_was_never_stored_says_so(store: SessionStore) -> None:
    runner, run_id, delivered = _died_before_storing_the_input(store, lambda sid: Agent())
    _lapse(runner, run_id)
    assert runner.recover_lost() == [run_id]
    assert runner.execute(*delivered[-1]) == "error"
    info = runner.status(run_id)
    assert info.state == "error"
    assert info.error_message == ("the run's executor died before the run's input was "
                                  "stored; the input is lost: send it again")
