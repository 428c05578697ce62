"""``LocalRunner`` in one process, on a ``MemoryStore`` and on an ``SQLiteStore``.

Covers docs/sessions.md: the events of a run by id (order, ids, resuming after an id, ``None``
when idle), one live run per session (``AgentBusyError``), ``RunNotFoundError``, steer /
follow-up / abort delivered exactly once and in order (also to the session's next run),
the final states, the thread count after a run, and the errors bad arguments raise.
"""

from __future__ import annotations

import datetime
import threading
from pathlib import Path
from typing import Any

import pytest

from piagent import Agent, AgentBusyError, UserMessage, event_to_dict, tool
from piagent.messages import AgentMessage, ToolResultMessage
from piagent.runs import LocalRunner, QueuedRunner, RunInfo, RunNotFoundError
from piagent.sessions import JsonlStore, MemoryStore, PostgresStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import WAIT
from .conftest import (
    DJANGO,
    SQLALCHEMY,
    WatchedAgent,
    charge_and_look,
    collect,
    echo,
    store_fixture,
)

store = store_fixture("memory", "sqlite", "postgres", *SQLALCHEMY, *DJANGO)


class Harness:
    """A runner whose agents share one scripted model and one gate their ``block`` tool waits on."""

    def __init__(self, store: SessionStore, responses: list[Any], **agent_options: Any) -> None:
        self.scripted = ScriptedStreamFn(responses)
        self.gate = threading.Event()  # the block tool returns once the test sets it
        self.entered = threading.Event()  # set when the block tool starts
        self.agents: list[WatchedAgent] = []
        gate, entered = self.gate, self.entered

        @tool
        def block() -> str:
            """Wait for the test."""
            entered.set()
            if not gate.wait(WAIT):
                raise TimeoutError("the test never opened the gate")
            return "unblocked"

        def make_agent(session_id: str) -> Agent:
            agent = WatchedAgent(model=self.scripted.model, stream_fn=self.scripted,
                                 tools=[block], system_prompt="test", **agent_options)
            self.agents.append(agent)
            return agent

        self.runner = LocalRunner(store, make_agent)
        self.store = store

    def user_texts(self, session_id: str) -> list[str]:
        return [m.text for m in self.store.load(session_id) if isinstance(m, UserMessage)]


def test_events_in_order_with_ordered_ids(store: SessionStore) -> None:
    """Every event from agent_start to agent_end, ids increasing as strings, pi-JSON dicts."""
    h = Harness(store, [assistant_text("hello there")])
    run_id = h.runner.start("s1", "hi")
    events = collect(h.runner, run_id)
    # the same sequence an Agent's own listener sees
    scripted = ScriptedStreamFn([assistant_text("hello there")])
    reference = Agent(model=scripted.model, stream_fn=scripted, system_prompt="test")
    seen: list[str] = []
    reference.subscribe(lambda event, signal: seen.append(event_to_dict(event)["type"]))
    reference.prompt("hi")
    assert [e.type for e in events] == seen
    assert seen[:4] == ["agent_start", "turn_start", "message_start", "message_end"]
    assert seen[-2:] == ["turn_end", "agent_end"] and "message_update" in seen
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert ids[0] == "0000000000"
    assert events[3].event["message"]["role"] == "user"
    assert events[-1].event["messages"][-1]["content"][0]["text"] == "hello there"
    assert h.runner.wait(run_id, WAIT)
    info = h.runner.status(run_id)
    assert isinstance(info, RunInfo)
    assert (info.run_id, info.session_id, info.state, info.error_message) == (
        run_id, "s1", "done", None)
    assert info.created_at <= (info.started_at or 0) <= (info.ended_at or 0)
    # read again after the end: the same events
    assert collect(h.runner, run_id) == events
    assert [m.role for m in store.load("s1")] == ["system", "user", "assistant"]


def test_events_after_an_id_resume_just_after_it(store: SessionStore) -> None:
    h = Harness(store, [assistant_text("one two three")])
    run_id = h.runner.start("s1", "hi")
    events = collect(h.runner, run_id)
    assert collect(h.runner, run_id, after=events[4].id) == events[5:]
    assert collect(h.runner, run_id, after=events[-1].id) == []


def test_idle_yields_none_then_the_run_goes_on(store: SessionStore) -> None:
    h = Harness(store, [assistant_tool_calls(("block", {})), assistant_text("done")])
    run_id = h.runner.start("s1", "go")
    stream = h.runner.events(run_id, timeout=0.05)
    seen: list[str] = []
    nones = 0
    for item in stream:
        if item is None:
            nones += 1
            assert nones < WAIT / 0.05, "the tool never started"
            if h.entered.is_set():  # idle inside the tool (a slow machine may idle earlier)
                break
            continue
        seen.append(item.type)
    assert seen[-1] == "tool_execution_start"
    h.gate.set()
    rest = [item.type for item in stream if item is not None]
    assert rest[-1] == "agent_end" and "tool_execution_end" in rest
    assert h.runner.wait(run_id, WAIT)


def test_one_live_run_per_session(store: SessionStore) -> None:
    h = Harness(store, [assistant_tool_calls(("block", {})), assistant_text("a"),
                        assistant_text("b"), assistant_text("c")])
    first = h.runner.start("s1", "go")
    assert h.entered.wait(WAIT)
    with pytest.raises(AgentBusyError, match=f"already has a live run \\('{first}'\\)"):
        h.runner.start("s1", "again")
    assert h.runner.status(first).state == "running"
    other = h.runner.start("s2", "elsewhere")  # another session is free
    h.gate.set()
    assert h.runner.wait(first, WAIT) and h.runner.wait(other, WAIT)
    second = h.runner.start("s1", "again")  # free again once the run ended
    assert h.runner.wait(second, WAIT)
    assert h.runner.status(second).state == "done"


def test_unknown_run_id(store: SessionStore) -> None:
    runner = Harness(store, []).runner
    for call in (runner.status, runner.wait, runner.abort, runner.events):
        with pytest.raises(RunNotFoundError, match="No run 'nope'") as caught:
            call("nope")  # type: ignore[operator]
        assert isinstance(caught.value, KeyError)


def test_steer_and_follow_up_reach_the_run_once_in_order(store: SessionStore) -> None:
    h = Harness(store, [assistant_tool_calls(("block", {})), echo, echo, echo, echo],
                steering_mode="all", follow_up_mode="all")
    run_id = h.runner.start("s1", "go")
    assert h.entered.wait(WAIT)
    agent = h.agents[-1]
    h.runner.follow_up("s1", "c")
    assert agent.wait_queued(lambda a: [m.text for m in a.peek_queued_messages()] == ["c"])
    h.runner.steer("s1", "a")
    h.runner.steer("s1", UserMessage(content="b"))
    assert agent.wait_queued(lambda a: [m.text for m in a.peek_queued_messages()] == ["a", "b"])
    h.gate.set()
    events = collect(h.runner, run_id)
    assert h.runner.wait(run_id, WAIT) and h.runner.status(run_id).state == "done"
    assert h.user_texts("s1") == ["go", "a", "b", "c"]
    ended = [e.event["message"]["content"] for e in events
             if e.type == "message_end" and e.event["message"]["role"] == "user"]
    assert len(ended) == 4
    # nothing is left over for the next run
    again = h.runner.start("s1", "next")
    assert h.runner.wait(again, WAIT)
    assert h.user_texts("s1") == ["go", "a", "b", "c", "next"]


def test_steer_without_a_live_run_waits_for_the_next_run(store: SessionStore) -> None:
    h = Harness(store, [echo, echo, echo])
    h.runner.steer("s1", "early")
    h.runner.follow_up("s1", "later")
    run_id = h.runner.start("s1", "go")
    assert h.runner.wait(run_id, WAIT) and h.runner.status(run_id).state == "done"
    assert h.user_texts("s1") == ["go", "early", "later"]
    # pi's rule for input queued before a run: the steer joins the run's first turn (with
    # its input, before the first request); the follow-up comes when the agent would stop
    assert [(m.role, getattr(m, "text", "")) for m in h.store.load("s1")[1:]] == [
        ("user", "go"), ("user", "early"), ("assistant", "echo early"), ("user", "later"),
        ("assistant", "echo later")]
    other = h.runner.start("s2", "alone")  # the inbox is per session
    assert h.runner.wait(other, WAIT)
    assert h.user_texts("s2") == ["alone"]


def test_abort_stops_the_run(store: SessionStore) -> None:
    scripted_text = " ".join(f"word{i}" for i in range(200))
    h = Harness(store, [assistant_text(scripted_text)])
    h.scripted.chunk_delay = 0.02
    run_id = h.runner.start("s1", "talk")
    events = []
    for item in h.runner.events(run_id, timeout=WAIT):
        assert item is not None
        events.append(item)
        if item.type == "message_update":
            h.runner.abort(run_id, "enough")
    assert events[-1].type == "agent_end"
    assert h.runner.wait(run_id, WAIT)
    info = h.runner.status(run_id)
    assert info.state == "aborted"
    assert info.error_message is not None
    assert store.load("s1")[-1].stop_reason == "aborted"  # type: ignore[union-attr]
    h.runner.abort(run_id)  # a final run: no-op
    assert h.runner.status(run_id).state == "aborted"


def test_a_failed_run_reads_error(store: SessionStore) -> None:
    h = Harness(store, [])  # the script is empty: the model's answer is an error
    run_id = h.runner.start("s1", "hi")
    assert h.runner.wait(run_id, WAIT)
    info = h.runner.status(run_id)
    assert info.state == "error"
    assert "no scripted response left" in (info.error_message or "")


def test_steering_left_unused_goes_to_the_next_run(store: SessionStore) -> None:
    """A steer the Agent took but never used (the run was aborted first) is not lost."""
    h = Harness(store, [assistant_tool_calls(("block", {})), echo, echo, echo])
    run_id = h.runner.start("s1", "go")
    assert h.entered.wait(WAIT)
    agent = h.agents[-1]
    h.runner.steer("s1", "keep me")
    assert agent.wait_queued(lambda a: a.has_queued_messages()), "the steer to reach the Agent"
    h.runner.abort(run_id, "stop")
    h.gate.set()
    assert h.runner.wait(run_id, WAIT)
    texts = h.user_texts("s1")
    if "keep me" not in texts:  # the aborted run did not take it: the next one does
        again = h.runner.start("s1", "next")
        assert h.runner.wait(again, WAIT)
        texts = h.user_texts("s1")
    assert texts.count("keep me") == 1


def test_no_thread_outlives_a_run(store: SessionStore) -> None:
    h = Harness(store, [assistant_tool_calls(("block", {})), assistant_text("ok")])
    h.gate.set()
    before = {t.ident for t in threading.enumerate()}
    run_id = h.runner.start("s1", "go")
    assert h.runner.wait(run_id, WAIT)
    after = {t.ident for t in threading.enumerate()}
    assert after == before
    # a PostgresStore's connection pool has threads of its own, from before the run
    assert not [t for t in threading.enumerate() if t.name.startswith("piagent-")
                and t.ident not in before]


def test_transcript_is_in_the_store(store: SessionStore) -> None:
    h = Harness(store, [assistant_tool_calls(("block", {})), assistant_text("ok")])
    h.gate.set()
    run_id = h.runner.start("s1", "go")
    assert h.runner.wait(run_id, WAIT)
    messages: list[AgentMessage] = store.load("s1")
    assert [m.role for m in messages] == ["system", "user", "assistant", "toolResult",
                                          "assistant"]
    assert isinstance(messages[3], ToolResultMessage)


def test_bad_arguments_fail_at_once(store: SessionStore, tmp_path: Path) -> None:
    h = Harness(store, [assistant_text("ok")])
    run_id = h.runner.start("s1", "hi")
    assert h.runner.wait(run_id, WAIT)
    with pytest.raises(ValueError, match="after must be None or an event id"):
        h.runner.events(run_id, after="abc")
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        h.runner.events(run_id, timeout=0)
    with pytest.raises(ValueError, match="timeout must be None or a number"):
        h.runner.wait(run_id, timeout=-1)
    with pytest.raises(TypeError, match="steer\\(\\) accepts a str or a message"):
        h.runner.steer("s1", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason must be None or a str"):
        h.runner.abort(run_id, reason=ValueError("x"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session"):
        h.runner.start("", "hi")
    with pytest.raises(TypeError, match="must return an Agent"):
        LocalRunner(store, lambda sid: None).start("s1", "hi")  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match="lease_s must be a number of seconds > 0"):
        LocalRunner(store, lambda sid: Agent(), lease_s=0)
    with pytest.raises(TypeError, match="registered runs backend.*JsonlStore has none"):
        LocalRunner(JsonlStore(tmp_path / "jsonl"), lambda sid: Agent())


def test_a_start_that_fails_is_recorded(store: SessionStore) -> None:
    """Bad input raises from start(); the session is free again for the next start."""
    h = Harness(store, [assistant_text("ok")])
    with pytest.raises(TypeError):
        h.runner.start("s1", 42)  # type: ignore[arg-type]
    run_id = h.runner.start("s1", "fine")
    assert h.runner.wait(run_id, WAIT) and h.runner.status(run_id).state == "done"


def test_two_runners_on_one_store_share_runs(store: SessionStore) -> None:
    h = Harness(store, [assistant_tool_calls(("block", {})), assistant_text("ok")])
    other = LocalRunner(store, lambda sid: Agent())
    run_id = h.runner.start("s1", "go")
    assert h.entered.wait(WAIT)
    with pytest.raises(AgentBusyError):
        other.start("s1", "again")
    assert other.status(run_id).state == "running"
    h.gate.set()
    assert other.wait(run_id, WAIT)
    assert [e.type for e in collect(other, run_id)][-1] == "agent_end"


def test_start_recovers_a_transcript_left_mid_batch(store: SessionStore) -> None:
    """Tool calls left without results: the run finishes them (replay policy), then the input."""
    ran: list[str] = []
    charge, look = charge_and_look(ran)

    scripted = ScriptedStreamFn([echo, echo])
    store.append("s1", [UserMessage("do both"),
                        assistant_tool_calls(("charge", {}, "c1"), ("look", {}, "c2"))])
    store.mark_started("s1", "c1")
    store.mark_started("s1", "c2")
    runner = LocalRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted,
                                                  tools=[charge, look]))
    run_id = runner.start("s1", "and now?")
    events = collect(runner, run_id)
    assert runner.wait(run_id, WAIT) and runner.status(run_id).state == "done"
    assert ran == ["look"]  # "never" was not repeated, "safe" was
    assert [e.type for e in events].count("agent_start") == 1
    # (the agent's tools are declared in a system message the stored transcript lacked)
    messages = [m for m in store.load("s1") if m.role != "system"]
    assert [m.role for m in messages] == ["user", "assistant", "toolResult", "toolResult",
                                          "assistant", "user", "assistant"]
    assert messages[2].is_error  # type: ignore[union-attr]
    assert messages[5].text == "and now?"  # type: ignore[union-attr]


def test_start_after_a_user_tail_answers_it_first(store: SessionStore) -> None:
    scripted = ScriptedStreamFn([echo, echo])
    store.append("s1", [UserMessage("are you there?")])  # the process died before the answer
    runner = LocalRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted))
    run_id = runner.start("s1", "hello?")
    assert runner.wait(run_id, WAIT) and runner.status(run_id).state == "done"
    assert [getattr(m, "text", "") for m in store.load("s1")] == [
        "are you there?", "echo are you there?", "hello?", "echo hello?"]


def test_waits_off_the_main_thread_return_when_the_run_ends() -> None:
    """A request thread waiting for a run (``wait``; the events iterator) sleeps until the
    run ends or writes: it is not woken in slices, which only the main thread needs."""
    harness = Harness(MemoryStore(), [assistant_tool_calls(("block", {})),
                                      assistant_text("done")])
    run_id = harness.runner.start("s1", "go")
    assert harness.entered.wait(WAIT)
    results: list[Any] = []

    def waiter() -> None:
        results.append(harness.runner.wait(run_id, timeout=WAIT))
        results.append([e.event["type"] for e in harness.runner.events(run_id)
                        if e is not None][-1])

    thread = threading.Thread(target=waiter, name="request")
    thread.start()
    harness.gate.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert results == [True, "agent_end"]
    assert harness.runner.status(run_id).state == "done"


def _stored_event_rows(store: SessionStore, run_id: str) -> int | None:
    """How many events of the run the medium holds (``None`` for a MemoryStore)."""
    if isinstance(store, SQLiteStore):
        with store.connection() as conn:
            row = conn.execute("SELECT count(*) FROM piagent_run_events WHERE run_id = ?",
                               (run_id,)).fetchone()
        return int(row[0])
    if isinstance(store, PostgresStore):
        def count(cur: Any) -> int:
            cur.execute(f'SELECT count(*) FROM "{store.schema}".run_events WHERE run_id = %s',
                        (run_id,))
            return int(cur.fetchone()[0])
        return store.run(count)
    return None


def test_purge_removes_finished_runs_and_their_events_never_a_live_one(
        store: SessionStore) -> None:
    h = Harness(store, [assistant_text("one"), assistant_tool_calls(("block", {})),
                        assistant_text("two")])
    finished = h.runner.start("done-session", "go")
    assert h.runner.wait(finished, WAIT)
    assert _stored_event_rows(store, finished) != 0
    live = h.runner.start("live-session", "hold")
    assert h.entered.wait(WAIT)  # the live run is inside its tool
    h.runner.steer("live-session", "steered")  # an inbox entry of the live run's session

    assert h.runner.purge(older_than=datetime.timedelta(days=1)) == []  # ended just now
    assert h.runner.status(finished).state == "done"

    assert h.runner.purge(older_than=0) == [finished]
    for call in (h.runner.status, h.runner.events, h.runner.wait):
        with pytest.raises(RunNotFoundError, match=f"No run '{finished}'"):
            call(finished)  # type: ignore[operator]
    assert _stored_event_rows(store, finished) in (0, None)
    assert [m.role for m in store.load("done-session")] == ["system", "user", "assistant"]

    assert h.runner.status(live).state == "running"  # untouched, and it goes on
    h.gate.set()
    events = [item.type for item in h.runner.events(live, timeout=WAIT) if item is not None]
    assert events[0] == "agent_start" and events[-1] == "agent_end"
    assert h.runner.wait(live, WAIT) and h.runner.status(live).state == "done"
    assert "steered" in h.user_texts("live-session")  # its inbox entry survived the purge
    assert h.runner.purge(0.0) == [live]
    assert h.runner.purge(0) == []


def test_purge_never_removes_a_queued_run(store: SessionStore) -> None:
    submitted: list[str] = []

    def make() -> QueuedRunner:
        return QueuedRunner(store, lambda session_id: Agent(),
                            lambda run_id, payload: submitted.append(run_id))

    if isinstance(store, MemoryStore):  # no queued runs there to purge
        with pytest.raises(TypeError, match="needs a store other processes reach"):
            make()
        return
    runner = make()
    run_id = runner.start("s", "waits for a worker")
    assert submitted == [run_id]
    assert runner.purge(0) == []
    assert runner.status(run_id).state == "queued"


def test_purge_refuses_a_bad_age(store: SessionStore) -> None:
    runner = Harness(store, []).runner
    for bad, error in (("1d", TypeError), (True, TypeError), (None, TypeError),
                       (-1, ValueError), (float("nan"), ValueError),
                       (datetime.timedelta(seconds=-5), ValueError)):
        with pytest.raises(error, match="older_than must be"):
            runner.purge(bad)  # type: ignore[arg-type]
