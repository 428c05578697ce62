"""Databases written by piagent's ``main`` at 1f9f1fd, before a tool-call id was scoped to its
batch, open and keep working: the waiting call whose id repeats an answered one is listed
and approved, a start mark of the stopped batch is honoured, the earlier batch's mark is not,
and new records append (``fixtures/make_main_fixtures.py`` says how the files were made).
Budgets charged by ``main`` at cf0e31f, before each store charged in its own method, read
back and take new charges (``fixtures/make_budget_fixtures.py``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import Agent, AgentTool, AgentToolResult, TextContent, ToolResultMessage, UserMessage
from piagent.policy import BudgetSpend
from piagent.sessions import PostgresStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import WAIT
from .pg import drop_schema, postgres_dsn, unique_schema

FIXTURES = Path(__file__).resolve().parent / "fixtures"
UNKNOWN = "The process stopped while tool"


def _open(kind: str, name: str, fixture_schema: str, tmp_path: Path) -> Iterator[Any]:
    """A copy of the fixture ``name`` (``.db``, or ``-postgres.sql`` made in
    ``fixture_schema``) opened as a store of ``kind``."""
    if kind == "sqlite":
        shutil.copy(FIXTURES / f"{name}.db", tmp_path / "s.db")
        with SQLiteStore(tmp_path / "s.db") as sqlite:
            yield sqlite
        return
    import psycopg

    dsn, schema = postgres_dsn(), unique_schema()
    script = (FIXTURES / f"{name}-postgres.sql").read_text()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(script.replace(fixture_schema, schema))  # type: ignore[arg-type]
    try:
        with PostgresStore(dsn, schema=schema) as postgres:
            yield postgres
    finally:
        drop_schema(dsn, schema)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from _open(request.param, "main-1f9f1fd", "piagent_main_fixture", tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def budget_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from _open(request.param, "budgets-cf0e31f", "piagent_budget_fixture", tmp_path)


def tools(ran: list[str]) -> list[AgentTool]:
    def make(name: str, needs_approval: bool = False) -> AgentTool:
        def execute(call_id: str, params: Any, *args: Any) -> AgentToolResult:
            ran.append(f"{name}:{call_id}:{params.get('n')}")
            return AgentToolResult(content=[TextContent(f"{name} {params.get('n')} done")])

        return AgentTool(name=name, description=name, parameters={"type": "object"},
                         execute=execute, needs_approval=needs_approval)

    return [make("write", True), make("free"), make("never")]


def results(store: Any, session_id: str) -> list[tuple[str, str]]:
    return [(m.tool_call_id, m.content[0].text) for m in store.load(session_id)
            if isinstance(m, ToolResultMessage)]


def test_the_waiting_repeated_call_is_listed_and_approved(store: Any) -> None:
    ran: list[str] = []
    fn = ScriptedStreamFn([assistant_text("twice")])
    agent = Agent(model=fn.model, stream_fn=fn, store=store, session_id="wait",
                  tools=tools(ran))
    assert [(p.tool_call_id, p.args, p.decision) for p in agent.pending_approvals()] == [
        ("call_1", {"n": 2}, None)]
    assert [m.tool_call_id for m in store.held_results("wait")] == ["call_2"]
    run = agent.approve("call_1")
    assert run is not None and run.wait(WAIT) and run.text == "twice"
    assert ran == ["write:call_1:2"]  # call_2's held result is used, not run again
    assert results(store, "wait") == [("call_1", "write 1 done"), ("call_1", "write 2 done"),
                                      ("call_2", "free 3 done")]
    assert agent.pending_approvals() == [] and store.approvals("wait") == []


def test_the_stopped_batch_resumes_by_its_own_marks(store: Any) -> None:
    assert store.started("crash") == {"call_2"}  # the first batch's call_1 mark is over
    ran: list[str] = []
    fn = ScriptedStreamFn([assistant_text("recovered")])
    agent = Agent(model=fn.model, stream_fn=fn, store=store, session_id="crash",
                  tools=tools(ran))
    assert agent.resume(timeout=WAIT).text == "recovered"
    assert ran == ["never:call_1:2"]  # never started: it runs; call_2 started: not again
    [_, (first, text), (second, unknown)] = results(store, "crash")
    assert (first, text, second) == ("call_1", "never 2 done", "call_2")
    assert unknown.startswith(UNKNOWN)
    assert store.started("crash") == set()


def test_a_plain_session_loads_and_appends(store: Any) -> None:
    assert sorted(store.session_ids()) == ["crash", "plain", "wait"]
    [hello, hi] = store.load("plain")
    assert isinstance(hello, UserMessage) and hi.text == "hi"
    store.append("plain", [UserMessage("more", timestamp=3)])
    assert [getattr(m, "text", None) for m in store.load("plain")] == ["hello", "hi", "more"]


def test_budgets_charged_by_main_read_back_and_take_new_charges(budget_store: Any) -> None:
    assert budget_store.charge_budget("user:42") == BudgetSpend(0.75, 30, 2)
    assert budget_store.charge_budget("team:a", cost=0.5, tokens=7, requests=1) == BudgetSpend(
        1.5, 7, 3)
    assert budget_store.charge_budget("user:7") == BudgetSpend()
    assert [getattr(m, "text", None) for m in budget_store.load("plain")] == ["hello", "hi"]
