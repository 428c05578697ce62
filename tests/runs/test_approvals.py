"""Tool calls that wait for approval, decided through a runner (docs/approvals.md): a
``LocalRunner`` on a ``MemoryStore``, an ``SQLiteStore`` and PostgreSQL, and a
``QueuedRunner`` whose executor is a thread.

Covers: a run that stops at a call needing approval reads ``waiting`` (its other calls ran,
no model request was made for the waiting one); ``pending_approvals`` lists the calls; the
decision that completes the batch returns the id of the run that goes on (others return
``None``), which runs the approved call once and gives the denied one its error result, in
source order; a start while calls wait is refused; a steer sent while waiting reaches the
next run; unknown, decided and changed-argument decisions are refused; decisions raced from
many threads start exactly one run; wrong arguments fail naming the parameter.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from piagent import Agent, AgentTool, tool
from piagent.errors import ApprovalError, ApprovalPendingError
from piagent.messages import AssistantMessage, ToolResultMessage, UserMessage
from piagent.runs import LocalRunner, QueuedRunner, Runner
from piagent.sessions import SessionStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import WAIT
from .conftest import DJANGO, SQLALCHEMY, collect, store_fixture
from .test_queued import Queue

store = store_fixture("memory", "sqlite", "postgres", *SQLALCHEMY, *DJANGO)


def results_text(context: Any) -> str:
    """``name=text`` of each tool result after the last assistant message, in order."""
    tail: list[str] = []
    for message in context.messages:
        if isinstance(message, AssistantMessage):
            tail = []
        elif isinstance(message, ToolResultMessage):
            tail.append(f"{message.tool_name}={message.text}")
    return "; ".join(tail)


def answer(context: Any, options: Any) -> AssistantMessage:
    """The scripted model: a user message asks for ``delete`` (needs approval) twice, with
    ``look`` between; tool results are summed up; anything else is echoed."""
    last = context.messages[-1]
    if isinstance(last, UserMessage) and last.text.startswith("delete"):
        names = last.text.split()[1:]
        calls: list[tuple[str, dict[str, Any], str]] = [
            ("delete", {"name": name}, f"c-{name}") for name in names]
        calls.insert(1, ("look", {}, "c-look"))
        return assistant_tool_calls(*calls)
    if isinstance(last, ToolResultMessage):
        return assistant_text(f"results: {results_text(context)}")
    return assistant_text(f"echo {getattr(last, 'text', '')}")


class Tools:
    """``delete`` (needs approval) and ``look``; each appends what it did to ``ran``."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        ran = self.ran

        @tool(needs_approval=True)
        def delete(name: str) -> str:
            """Delete a thing."""
            ran.append(f"delete {name}")
            return f"deleted {name}"

        @tool
        def look() -> str:
            """Look around."""
            ran.append("look")
            return "looked"

        self.tools: list[AgentTool] = [delete, look]


class Model:
    """The scripted model, counting its requests (any thread)."""

    def __init__(self) -> None:
        self.requests = 0
        self._lock = threading.Lock()  # guards requests
        self.scripted = ScriptedStreamFn([self._answer] * 50)

    def _answer(self, context: Any, options: Any) -> AssistantMessage:
        with self._lock:
            self.requests += 1
        return answer(context, options)


def agents(tools: Tools, model: Model) -> Callable[[str], Agent]:
    """A runner's ``make_agent``: agents with ``tools`` on the scripted ``model``."""
    def make_agent(session_id: str) -> Agent:
        return Agent(model=model.scripted.model, stream_fn=model.scripted, tools=tools.tools,
                     system_prompt="test")

    return make_agent


def local(store: SessionStore, tools: Tools, model: Model) -> LocalRunner:
    return LocalRunner(store, agents(tools, model))


@contextlib.contextmanager
def runner_of(kind: str, store: SessionStore, tools: Tools, model: Model
              ) -> Iterator[Runner]:
    """A ``LocalRunner`` (``kind`` "local") or a ``QueuedRunner`` ("queued") whose executor
    threads are joined when the block ends."""
    if kind == "local":
        yield local(store, tools, model)
        return
    queue = Queue()
    runner = QueuedRunner(store, agents(tools, model), queue.submit)
    queue.runner = runner
    try:
        yield runner
    finally:
        queue.join()


def wait_final(runner: Runner, run_id: str) -> str:
    assert runner.wait(run_id, WAIT), f"run {run_id} did not end"
    return runner.status(run_id).state


def test_a_run_waits_and_the_last_decision_goes_on(store: SessionStore) -> None:
    tools, model = Tools(), Model()
    runner = local(store, tools, model)
    run_id = runner.start("s", "delete a b")
    events = collect(runner, run_id)
    assert wait_final(runner, run_id) == "waiting"
    assert tools.ran == ["look"]  # the call needing no approval ran; nothing else
    assert model.requests == 1
    asked = [e.event for e in events if e.type == "tool_approval_request"]
    assert [(e["toolCallId"], e["toolName"], e["args"]) for e in asked] == [
        ("c-a", "delete", {"name": "a"}), ("c-b", "delete", {"name": "b"})]
    assert events[-1].type == "agent_end"

    pending = runner.pending_approvals("s")
    assert [(p.tool_call_id, p.tool_name, p.args, p.decision) for p in pending] == [
        ("c-a", "delete", {"name": "a"}, None), ("c-b", "delete", {"name": "b"}, None)]
    assert [p.digest for p in pending] == [e["digest"] for e in asked]

    assert runner.approve("s", "c-a", digest=pending[0].digest) is None  # b still waits
    assert tools.ran == ["look"] and model.requests == 1
    [a, b] = runner.pending_approvals("s")
    assert a.decision is not None and a.decision.approved and b.decision is None

    next_id = runner.deny("s", "c-b", reason="keep b")
    assert isinstance(next_id, str) and next_id != run_id
    assert wait_final(runner, next_id) == "done"
    assert tools.ran == ["look", "delete a"]  # the approved call ran once, the denied never
    assert runner.pending_approvals("s") == []
    messages = store.load("s")
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert [m.tool_call_id for m in results] == ["c-a", "c-look", "c-b"]  # source order
    assert [m.is_error for m in results] == [False, False, True]
    assert "keep b" in results[2].text
    final = messages[-1]
    assert isinstance(final, AssistantMessage)
    assert final.text.startswith("results: delete=deleted a; look=looked; delete=")


def test_a_start_while_calls_wait_is_refused_and_a_steer_waits_for_the_batch(
        store: SessionStore) -> None:
    tools, model = Tools(), Model()
    runner = local(store, tools, model)
    run_id = runner.start("s", "delete a")
    assert wait_final(runner, run_id) == "waiting"
    with pytest.raises(ApprovalPendingError, match=r"delete \(c-a\).*runner\.approve\(\)"):
        runner.start("s", "something else")
    runner.steer("s", "also this")
    next_id = runner.approve("s", "c-a")
    assert next_id is not None
    assert wait_final(runner, next_id) == "done"
    texts = [(m.role, getattr(m, "text", "")) for m in store.load("s")]
    assert texts[-4:] == [("toolResult", "deleted a"), ("toolResult", "looked"),
                          ("user", "also this"), ("assistant", "echo also this")]
    # the session takes new runs again
    again = runner.start("s", "hello")
    assert wait_final(runner, again) == "done"


def test_refused_decisions(store: SessionStore) -> None:
    tools, model = Tools(), Model()
    runner = local(store, tools, model)
    run_id = runner.start("s", "delete a b")
    assert wait_final(runner, run_id) == "waiting"
    with pytest.raises(ApprovalError, match="nope"):
        runner.approve("s", "nope")
    with pytest.raises(ApprovalError, match="c-a"):
        runner.approve("s", "c-a", digest="0" * 64)  # not the digest of its arguments
    assert runner.deny("s", "c-a") is None
    with pytest.raises(ApprovalError, match="c-a"):
        runner.approve("s", "c-a")  # decided already
    with pytest.raises(ApprovalError):
        runner.approve("other", "c-a")  # nothing waits in that session
    with pytest.raises(TypeError, match="tool_call_id must be a str"):
        runner.approve("s", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason must be None or a str"):
        runner.deny("s", "c-b", reason=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="digest must be None or a str"):
        runner.deny("s", "c-b", digest=b"x")  # type: ignore[arg-type]
    assert tools.ran == ["look"] and model.requests == 1  # nothing ran meanwhile
    next_id = runner.deny("s", "c-b")
    assert next_id is not None and wait_final(runner, next_id) == "done"
    assert tools.ran == ["look"]


def test_decisions_raced_from_many_threads_start_one_run(store: SessionStore) -> None:
    tools, model = Tools(), Model()
    runner = local(store, tools, model)
    names = [f"n{i}" for i in range(6)]
    run_id = runner.start("s", "delete " + " ".join(names))
    assert wait_final(runner, run_id) == "waiting"
    barrier = threading.Barrier(len(names))
    returned: list[str | None] = []
    failures: list[BaseException] = []
    lock = threading.Lock()  # guards returned and failures

    def decide(name: str) -> None:
        try:
            barrier.wait(WAIT)
            got = runner.approve("s", f"c-{name}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            with lock:
                failures.append(exc)
            return
        with lock:
            returned.append(got)

    threads = [threading.Thread(target=decide, args=(n,), name="test-decide") for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert failures == []
    started = [r for r in returned if r is not None]
    assert len(started) == 1 and returned.count(None) == len(names) - 1
    assert wait_final(runner, started[0]) == "done"
    assert sorted(tools.ran) == sorted(["look", *(f"delete {n}" for n in names)])
    assert model.requests == 2


queued_store = store_fixture("sqlite", "postgres", *SQLALCHEMY, *DJANGO)


def test_a_queued_runner_submits_the_run_that_goes_on(queued_store: SessionStore) -> None:
    tools, model = Tools(), Model()
    queue = Queue()
    runner = QueuedRunner(queued_store, agents(tools, model), queue.submit)
    queue.runner = runner
    try:
        run_id = runner.start("q", "delete a")
        assert wait_final(runner, run_id) == "waiting"
        [pending] = runner.pending_approvals("q")
        with pytest.raises(ApprovalPendingError):
            runner.start("q", "more")
        assert len(queue.payloads) == 1  # the refused start submitted nothing
        next_id = runner.approve("q", pending.tool_call_id, digest=pending.digest)
        assert next_id is not None
        assert queue.payloads[-1] == (next_id, {"v": 1, "session_id": "q", "input": [],
                                                "continue": True})
        assert wait_final(runner, next_id) == "done"
        events = collect(runner, next_id)
        assert events[0].type == "agent_start" and events[-1].type == "agent_end"
        assert tools.ran == ["look", "delete a"]
        assert queue.results == ["waiting", "done"]
    finally:
        queue.join()


def test_a_store_without_approvals_is_refused() -> None:
    from piagent.runs._approvals import approval_store

    with pytest.raises(TypeError, match="approvals need a session store that keeps them"):
        approval_store(object())  # type: ignore[arg-type]


def test_a_decider_that_died_before_the_run_went_on_leaves_it_to_the_next_start(
        store: SessionStore) -> None:
    """The last decision was stored (here: straight in the store, as a process that died
    right after it would leave it) but no run went on: the next start completes the batch
    first, then takes its input."""
    from piagent.sessions import ApprovalDecision

    tools, model = Tools(), Model()
    runner = local(store, tools, model)
    run_id = runner.start("s", "delete a")
    assert wait_final(runner, run_id) == "waiting"
    assert store.decide("s", "c-a", ApprovalDecision(True), None) is True  # type: ignore[attr-defined]
    assert [p.decision for p in runner.pending_approvals("s")] == [ApprovalDecision(True)]
    again = runner.start("s", "and then this")
    assert wait_final(runner, again) == "done"
    assert tools.ran == ["look", "delete a"]
    texts = [(m.role, getattr(m, "text", "")) for m in store.load("s")]
    assert texts[-5:] == [("toolResult", "deleted a"), ("toolResult", "looked"),
                          ("assistant", "results: delete=deleted a; look=looked"),
                          ("user", "and then this"), ("assistant", "echo and then this")]
    assert runner.pending_approvals("s") == []


def test_every_runner_keeps_the_protocol(store: SessionStore) -> None:
    tools, model = Tools(), Model()
    assert isinstance(local(store, tools, model), Runner)


def test_a_decision_made_before_the_waiting_run_recorded_its_end_waits_for_it(
        store: SessionStore) -> None:
    """The calls are reported (and kept in the store) a moment before the run that asked
    records its end: a decision made then waits for that end, then the run goes on."""
    from ..conftest import hold_new_threads

    tools, model = Tools(), Model()
    runner = local(store, tools, model)
    with hold_new_threads("_end", file_suffix="_execution.py") as (reached, release):
        run_id = runner.start("s", "delete a")
        assert reached.wait(WAIT)  # agent_end is out; the run is still live in the store
        assert runner.status(run_id).state == "running"
        assert [p.tool_call_id for p in runner.pending_approvals("s")] == ["c-a"]
        returned: list[str | None] = []
        decider = threading.Thread(target=lambda: returned.append(runner.approve("s", "c-a")),
                                   name="test-decide")
        decider.start()
        decider.join(0.2)  # bounded: it is waiting for the run to record its end
        assert decider.is_alive() and returned == []
        release.set()
        decider.join(WAIT)
        assert not decider.is_alive()
    [next_id] = returned
    assert next_id is not None and next_id != run_id
    assert runner.status(run_id).state == "waiting"
    assert wait_final(runner, next_id) == "done"
    assert tools.ran == ["look", "delete a"]


def test_a_call_whose_arguments_changed_in_the_store_is_refused(store: SessionStore) -> None:
    import dataclasses

    from piagent.messages import ToolCall

    tools, model = Tools(), Model()
    runner = local(store, tools, model)
    run_id = runner.start("s", "delete a")
    assert wait_final(runner, run_id) == "waiting"
    messages = store.load("s")
    asking = messages[-1]
    assert isinstance(asking, AssistantMessage)
    changed = [ToolCall(b.id, b.name, {"name": "everything"}) if isinstance(b, ToolCall)
               and b.id == "c-a" else b for b in asking.content]
    store.replace("s", [*messages[:-1], dataclasses.replace(asking, content=changed)])
    with pytest.raises(ApprovalError, match="its arguments changed since approval was asked"):
        runner.approve("s", "c-a")
    assert tools.ran == ["look"] and model.requests == 1
    with pytest.raises(ApprovalPendingError) as refused:
        runner.start("s", "next")
    assert refused.value.call_ids == ["c-a"]


@pytest.mark.parametrize("kind", ["local", "queued"])
def test_a_repeated_call_id_waits_again_and_is_decided(queued_store: SessionStore,
                                                       kind: str) -> None:
    # "delete a" asks for call c-a each time: the second c-a is a new call that waits
    tools, model = Tools(), Model()
    with runner_of(kind, queued_store, tools, model) as runner:
        for round_ in (1, 2):
            run_id = runner.start("r", "delete a")
            assert wait_final(runner, run_id) == "waiting"
            [pending] = runner.pending_approvals("r")
            assert pending.tool_call_id == "c-a" and pending.decision is None
            next_id = runner.approve("r", "c-a", digest=pending.digest)
            assert next_id is not None and wait_final(runner, next_id) == "done"
            assert runner.pending_approvals("r") == []
            assert tools.ran == ["look", "delete a"] * round_
        texts = [m.text for m in queued_store.load("r") if isinstance(m, ToolResultMessage)]
        assert texts == ["deleted a", "looked"] * 2


@pytest.mark.parametrize("kind", ["local", "queued"])
def test_two_waiting_calls_of_one_batch_with_one_id_are_decided_by_key(
        queued_store: SessionStore, kind: str) -> None:
    # "delete a a" asks for c-a, c-look, c-a: two waiting calls share the id c-a
    tools, model = Tools(), Model()
    with runner_of(kind, queued_store, tools, model) as runner:
        run_id = runner.start("k", "delete a a")
        assert wait_final(runner, run_id) == "waiting"
        first, second = runner.pending_approvals("k")
        assert (first.tool_call_id, second.tool_call_id) == ("c-a", "c-a")
        assert first.call_key != second.call_key
        with pytest.raises(ApprovalError, match="2 tool calls waiting for approval in session "
                                                "'k' have the id 'c-a'"):
            runner.approve("k", "c-a")
        assert runner.deny("k", second.call_key, digest=second.digest) is None
        next_id = runner.approve("k", "c-a")  # the one undecided call of that id
        assert next_id is not None and wait_final(runner, next_id) == "done"
        assert tools.ran == ["look", "delete a"]
        texts = [m.text for m in queued_store.load("k") if isinstance(m, ToolResultMessage)]
        assert texts == ["deleted a", "looked", "Tool call denied by the user."]
