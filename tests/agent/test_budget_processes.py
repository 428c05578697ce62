"""A ``Budget`` shared by real processes (SQLite file, PostgreSQL schema) holds: together they
overshoot it by at most the requests they had in flight, and each run says it is spent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from piagent import Budget
from piagent.sessions import PostgresStore, SQLiteStore

from ..conftest import WAIT
from ..sessions.pg import drop_schema, postgres_dsn, unique_schema

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 3
COST = 0.01  # USD per request
MAX_COST = 0.40

WORKER = textwrap.dedent("""
    import json, sys
    from piagent import Agent, Budget, Cost, Limits, Usage, tool
    from piagent.sessions import PostgresStore, SQLiteStore
    from piagent.testing import ScriptedStreamFn, assistant_tool_calls

    kind, where, schema, cost, max_cost = sys.argv[1:6]
    store = (SQLiteStore(where) if kind == "sqlite" else PostgresStore(where, schema=schema))

    @tool
    def poke() -> str:
        \"\"\"Poke.\"\"\"
        return "poked"

    message = assistant_tool_calls(("poke", {}))
    message.usage = Usage(input=10, output=5, total_tokens=15, cost=Cost(total=float(cost)))
    scripted = ScriptedStreamFn([message] * 1000)
    budget = Budget(store, "user:42", max_cost=float(max_cost))
    agent = Agent(model=scripted.model, tools=[poke], stream_fn=scripted,
                  limits=Limits(budget=budget))
    budget.spent()  # connected, the tables exist
    print("ready", flush=True)
    sys.stdin.readline()
    run = agent.prompt("Poke for ever.")
    print(json.dumps({"requests": scripted.call_count, "error": run.error_message,
                      "limit": run.limit_hit.limit if run.limit_hit else None}), flush=True)
    store.close()
""")


def _run_workers(kind: str, where: str, schema: str) -> list[dict[str, object]]:
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, kind, where, schema, str(COST),
                                 str(MAX_COST)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env) for _ in range(PROCESSES)]
    try:
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        for w in workers:  # as close to together as processes get
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        results = []
        for w in workers:
            out, _ = w.communicate(timeout=WAIT * 12)
            assert w.returncode == 0
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(WAIT)


def _check(results: list[dict[str, object]], budget: Budget) -> None:
    spent = budget.spent()
    requests = sum(int(r["requests"]) for r in results)  # type: ignore[call-overload]
    assert spent.requests == requests  # every request was counted, no refused one
    assert spent.cost == pytest.approx(requests * COST)
    # the budget was used up, and overshot by at most one request in flight per process
    assert MAX_COST - 1e-9 <= spent.cost <= MAX_COST + PROCESSES * COST + 1e-9
    for result in results:
        assert result["limit"] == "budget.max_cost"
        assert str(result["error"]).startswith("The budget 'user:42' is spent: ")


def test_processes_sharing_a_budget_in_sqlite_stay_within_it(tmp_path: Path) -> None:
    path = str(tmp_path / "sessions.db")
    with SQLiteStore(path) as store:
        budget = Budget(store, "user:42", max_cost=MAX_COST)
        _check(_run_workers("sqlite", path, ""), budget)


@pytest.fixture
def pg() -> Iterator[tuple[str, str]]:
    dsn = postgres_dsn()
    schema = unique_schema()
    yield dsn, schema
    drop_schema(dsn, schema)


def test_processes_sharing_a_budget_in_postgres_stay_within_it(pg: tuple[str, str]) -> None:
    dsn, schema = pg
    with PostgresStore(dsn, schema=schema) as store:
        budget = Budget(store, "user:42", max_cost=MAX_COST)
        budget.spent()
        _check(_run_workers("postgres", dsn, schema), budget)


def test_a_charge_is_atomic_and_reads_back_the_totals(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        assert store.charge_budget("k").requests == 0
        store.charge_budget("k", cost=0.5, tokens=10, requests=1)
        total = store.charge_budget("k", cost=0.25, tokens=5, requests=1)
        assert (total.cost, total.tokens, total.requests) == (0.75, 15, 2)
        assert store.charge_budget("other").cost == 0.0
        with pytest.raises(TypeError, match="cost must be a finite number"):
            store.charge_budget("k", cost=float("nan"))
        with pytest.raises(ValueError, match="budget key must be a non-empty str"):
            store.charge_budget("")
