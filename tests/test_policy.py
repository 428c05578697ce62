"""``piagent.policy``: the approvals' and budgets' types live below the loop and the stores
(the loop imports them from there, not from ``piagent.sessions``), are the same objects
wherever they were importable before, and each store charges and decides in methods of its
own (no helper takes a store to reach into it)."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import piagent
import piagent.loop
import piagent.policy
import piagent.sessions
from piagent.policy import ApprovalStore, BudgetSpend, BudgetStore
from piagent.sessions import JsonlStore

from .conftest import WAIT, store_of

PACKAGE = Path(piagent.__file__).parent


def _imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every ``from`` import in a module of ``piagent/<package>/``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 2:
                module = f"piagent.{module}"
            elif node.level == 1:
                module = f"piagent.{path.parent.name}.{module}"
            yield node.lineno, module


def test_the_loop_takes_approvals_and_budgets_from_policy_not_from_the_stores() -> None:
    reaches = [f"{path.name}:{line}" for path in sorted((PACKAGE / "loop").glob("*.py"))
               for line, module in _imported(path) if module.startswith("piagent.sessions")]
    assert reaches == []
    used = {path.name for path in (PACKAGE / "loop").glob("*.py")
            if any(m == "piagent.policy" for _, m in _imported(path))}
    assert {"__init__.py", "_approval.py", "_config.py", "_limits.py"} <= used


@pytest.mark.parametrize(("name", "where"), [
    ("ApprovalDecision", (piagent, piagent.loop, piagent.sessions)),
    ("PendingApproval", (piagent, piagent.loop, piagent.sessions)),
    ("ApprovalStore", (piagent.sessions,)),
    ("approval_digest", (piagent.sessions,)),
    ("Budget", (piagent, piagent.loop)),
    ("BudgetStore", (piagent, piagent.loop)),
    ("BudgetSpend", (piagent.sessions,)),
])
def test_each_type_is_policys_and_still_importable_where_it_was(name: str,
                                                                where: tuple[Any, ...]) -> None:
    defined = getattr(piagent.policy, name)
    assert defined.__module__.startswith("piagent.policy.")
    for module in where:
        assert getattr(module, name) is defined, module.__name__


def test_no_helper_of_the_stores_takes_a_store() -> None:
    """Charging and deciding are methods: no module-level function of ``sessions`` or
    ``policy`` is handed a store (``def sqlite_charge(store: Any, ...)`` was)."""
    found = []
    for folder in ("sessions", "policy"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.FunctionDef):
                    names = [a.arg for a in (*node.args.args, *node.args.kwonlyargs)]
                    if "store" in names:
                        found.append(f"{folder}/{path.name}: {node.name}")
    assert found == []


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with store_of(request.param, tmp_path) as opened:
        yield opened


def test_each_store_charges_in_its_own_method_and_no_charge_is_lost(store: Any) -> None:
    assert "charge_budget" in vars(type(store))
    assert {"decide", "mark_waiting", "approvals"} <= set(vars(type(store)))
    assert isinstance(store, BudgetStore) and isinstance(store, ApprovalStore)
    threads, charges = 4, 25
    start = threading.Barrier(threads, timeout=WAIT)
    seen: list[BudgetSpend] = []  # appended by the charging threads (list.append is atomic)
    failures: list[BaseException] = []

    def charge() -> None:
        try:
            start.wait()  # every thread charges at once, the first one creating the table
            for _ in range(charges):
                seen.append(store.charge_budget("user:42", cost=0.5, tokens=3, requests=1))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    workers = [threading.Thread(target=charge) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT)
    assert failures == [] and not any(w.is_alive() for w in workers)
    total = threads * charges
    assert store.charge_budget("user:42") == BudgetSpend(0.5 * total, 3 * total, total)
    # each charge read back a total no other charge read: the charges were atomic
    assert sorted(s.requests for s in seen) == list(range(1, total + 1))
    assert store.charge_budget("user:7") == BudgetSpend()


def test_a_jsonl_store_keeps_neither_approvals_nor_budgets(tmp_path: Path) -> None:
    jsonl = JsonlStore(tmp_path)
    assert not isinstance(jsonl, BudgetStore) and not isinstance(jsonl, ApprovalStore)
    with pytest.raises(TypeError, match="Budget: store must keep budgets"):
        piagent.Budget(jsonl, "user:42", max_cost=1.0)  # type: ignore[arg-type]
