"""The ``ApprovalStore`` contract, the same for MemoryStore, SQLiteStore and PostgresStore: a
session's waiting batch, its decisions (refused with ``ApprovalError`` when unknown, already
made or for other arguments) and held results; entries whose call is answered are done."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import ApprovalDecision, ApprovalError, PendingApproval, TextContent, UserMessage
from piagent.messages import ToolResultMessage
from piagent.sessions import (
    ApprovalStore,
    JsonlStore,
    MemoryStore,
    PostgresStore,
    SQLiteStore,
    approval_digest,
)
from piagent.testing import assistant_tool_calls

from .pg import drop_schema, postgres_dsn, unique_schema


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        with SQLiteStore(tmp_path / "s.db") as sqlite:
            yield sqlite
    else:
        dsn = postgres_dsn()
        schema = unique_schema()
        try:
            with PostgresStore(dsn, schema=schema) as postgres:
                yield postgres
        finally:
            drop_schema(dsn, schema)


def entry(call_id: str, args: Any) -> PendingApproval:
    return PendingApproval(call_id, "write", args, approval_digest("write", args))


def result(call_id: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(call_id, "write", [TextContent(text)], timestamp=1)


def test_every_durable_store_keeps_approvals(store: Any, tmp_path: Path) -> None:
    assert isinstance(store, ApprovalStore)
    assert not isinstance(JsonlStore(tmp_path / "jsonl"), ApprovalStore)


def test_a_waiting_batch_its_decisions_and_held_results(store: Any) -> None:
    sid = "s1"
    assert store.approvals(sid) == [] and store.held_results(sid) == []
    asked = assistant_tool_calls(("write", {"p": 1}, "a"), ("write", {"p": 2}, "b"),
                                 ("write", {"p": 3}, "c"))
    store.append(sid, [UserMessage("go"), asked])
    store.mark_waiting(sid, [entry("a", {"p": 1}), entry("c", {"p": 3})], [result("b", "done b")])
    assert store.approvals(sid) == [entry("a", {"p": 1}), entry("c", {"p": 3})]
    [held] = store.held_results(sid)
    assert (held.tool_call_id, held.content[0].text) == ("b", "done b")

    with pytest.raises(ApprovalError, match=r"No tool call 'x' waits for approval in session "
                                            r"'s1' \(waiting: 'a', 'c'\)"):
        store.decide(sid, "x", ApprovalDecision(True), None)
    with pytest.raises(ApprovalError, match="the digest given does not match its arguments"):
        store.decide(sid, "a", ApprovalDecision(True), approval_digest("write", {"p": 9}))
    assert store.decide(sid, "a", ApprovalDecision(True), entry("a", {"p": 1}).digest) is False
    with pytest.raises(ApprovalError, match="'a' .* was already approved; a decision cannot"):
        store.decide(sid, "a", ApprovalDecision(False), None)
    assert store.decide(sid, "c", ApprovalDecision(False, "no"), None) is True
    assert [e.decision for e in store.approvals(sid)] == [
        ApprovalDecision(True), ApprovalDecision(False, "no")]

    # the transcript replaced (other arguments, same ids): the batch is kept
    store.replace(sid, [UserMessage("go"), assistant_tool_calls(
        ("write", {"p": 5}, "a"), ("write", {"p": 2}, "b"), ("write", {"p": 3}, "c"))])
    assert len(store.approvals(sid)) == 2
    # answered calls are done with, one by one
    store.append(sid, [result("a", "ran a")])
    assert [e.tool_call_id for e in store.approvals(sid)] == ["c"]
    store.append(sid, [result("b", "done b"), result("c", "denied")])
    assert store.approvals(sid) == [] and store.held_results(sid) == []
    assert store.load(sid)[0] == UserMessage("go", timestamp=store.load(sid)[0].timestamp)


def test_marking_again_replaces_and_clear_forgets(store: Any) -> None:
    sid = "s2"
    store.mark_waiting(sid, [entry("a", {})], [])
    store.decide(sid, "a", ApprovalDecision(True), None)
    store.mark_waiting(sid, [entry("z", {})], [])
    assert store.approvals(sid) == [entry("z", {})]
    store.clear_approvals(sid)
    assert store.approvals(sid) == []
    store.clear_approvals("never-seen")
    store.mark_waiting(sid, [entry("q", {})], [result("r", "x")])
    store.delete(sid)
    assert store.approvals(sid) == [] and store.held_results(sid) == []


def test_a_decision_needs_an_approval_decision(store: Any) -> None:
    store.mark_waiting("s3", [entry("a", {})], [])
    with pytest.raises(TypeError, match="decision must be an ApprovalDecision, not bool"):
        store.decide("s3", "a", True, None)


def test_of_two_deciders_racing_exactly_one_completes_the_batch(store: Any) -> None:
    import threading

    sid = "race"
    store.mark_waiting(sid, [entry("a", {}), entry("b", {})], [])
    barrier = threading.Barrier(2, timeout=10)
    outcomes: dict[str, bool] = {}

    def decide(call_id: str) -> None:
        barrier.wait()
        outcomes[call_id] = store.decide(sid, call_id, ApprovalDecision(True), None)

    threads = [threading.Thread(target=decide, args=(c,)) for c in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(outcomes.values()) == [False, True]


def test_a_repeated_call_id_waits_again(store: Any) -> None:
    # piagent.testing (and servers numbering per response) repeat call_1 in every batch
    sid = "again"
    store.append(sid, [UserMessage("go"), assistant_tool_calls(("write", {"p": 1}))])
    store.mark_waiting(sid, [entry("call_1", {"p": 1})], [])
    assert store.decide(sid, "call_1", ApprovalDecision(True), None) is True
    store.append(sid, [result("call_1", "ran"), UserMessage("more"), assistant_tool_calls(
        ("write", {"p": 2}), ("write", {"p": 3}))])
    store.mark_waiting(sid, [entry("call_1", {"p": 2})], [result("call_2", "held")])
    assert store.approvals(sid) == [entry("call_1", {"p": 2})]
    assert [m.tool_call_id for m in store.held_results(sid)] == ["call_2"]
    assert store.decide(sid, "call_1", ApprovalDecision(True), None) is True
    store.append(sid, [result("call_1", "ran again")])
    assert store.approvals(sid) == []
    assert [m.tool_call_id for m in store.held_results(sid)] == ["call_2"]
    store.append(sid, [result("call_2", "held")])
    assert store.held_results(sid) == []
