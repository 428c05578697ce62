"""Spending kept under a key in a session store: one atomic "charge and read back".

A budget row holds what every process has spent under one key (a session id, ``user:42``,
...): money in USD, tokens and requests. ``charge`` adds to it and returns the new totals
in one statement, so two processes charging at once both see a total that includes the
other's charge. The limits themselves are the caller's (``piagent.agent.Budget``).

Each store keeps the rows beside its sessions, under its own schema component
(``budgets``, version 1), created on first use; the sessions schema is unchanged.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

__all__ = ["BudgetSpend", "check_budget_key"]

BUDGETS_SCHEMA_VERSION = 1
MAX_BUDGET_KEY_LENGTH = 200


@dataclass(frozen=True)
class BudgetSpend:
    """What has been spent under a budget key, by every process, after a charge."""

    cost: float = 0.0
    """USD."""
    tokens: int = 0
    requests: int = 0


def check_budget_key(key: object) -> str:
    """``key`` if it is a non-empty str of at most 200 characters, else ``TypeError``/``ValueError``."""
    if not isinstance(key, str):
        msg = f"a budget key must be a str (e.g. 'user:42'), not {type(key).__name__}."
        raise TypeError(msg)
    if not key or len(key) > MAX_BUDGET_KEY_LENGTH:
        msg = (f"a budget key must be a non-empty str of at most {MAX_BUDGET_KEY_LENGTH} "
               f"characters, got {key[:40]!r} ({len(key)} characters).")
        raise ValueError(msg)
    return key


def check_charge(cost: object, tokens: object, requests: object) -> tuple[float, int, int]:
    if not isinstance(cost, (int, float)) or isinstance(cost, bool) or not math.isfinite(cost):
        msg = f"charge_budget(): cost must be a finite number of USD, got {cost!r}."
        raise TypeError(msg)
    for name, value in (("tokens", tokens), ("requests", requests)):
        if not isinstance(value, int) or isinstance(value, bool):
            msg = f"charge_budget(): {name} must be an int, got {value!r}."
            raise TypeError(msg)
    return float(cost), int(tokens), int(requests)  # type: ignore[call-overload]


# --- SQLite ------------------------------------------------------------------------------

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS piagent_budgets (
    budget_key TEXT PRIMARY KEY,
    cost REAL NOT NULL,            -- USD
    tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    updated_at REAL NOT NULL       -- epoch seconds of the last charge
) WITHOUT ROWID
"""
_SQLITE_CHARGE = (
    "INSERT INTO piagent_budgets VALUES (?, ?, ?, ?, ?) ON CONFLICT (budget_key) DO UPDATE "
    "SET cost = cost + excluded.cost, tokens = tokens + excluded.tokens, "
    "requests = requests + excluded.requests, updated_at = excluded.updated_at "
    "RETURNING cost, tokens, requests")

# the stores whose budget table is known to exist; guarded by _ready_lock
_ready_lock = threading.Lock()
_ready: weakref.WeakSet[Any] = weakref.WeakSet()


def _is_ready(store: object) -> bool:
    with _ready_lock:
        return store in _ready


def _mark_ready(store: object) -> None:
    with _ready_lock:
        _ready.add(store)


def sqlite_charge(store: Any, key: str, cost: float, tokens: int,
                  requests: int) -> BudgetSpend:
    if not _is_ready(store):  # the table, once per store (SQLiteStore's schema hook)
        store.ensure_schema("budgets", BUDGETS_SCHEMA_VERSION, _SQLITE_SCHEMA)
        _mark_ready(store)
    with store.write() as conn:
        total = conn.execute(_SQLITE_CHARGE, (key, cost, tokens, requests, time.time())
                             ).fetchone()
    return BudgetSpend(float(total[0]), int(total[1]), int(total[2]))


# --- PostgreSQL --------------------------------------------------------------------------

def _pg_create(store: Any, cur: Any) -> None:
    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"piagent:{store.schema}",))
    cur.execute(store._sql(
        "CREATE TABLE IF NOT EXISTS {s}.budgets (budget_key text PRIMARY KEY, "
        "cost double precision NOT NULL, tokens bigint NOT NULL, requests bigint NOT NULL, "
        "updated_at double precision NOT NULL)"))
    cur.execute(store._sql("SELECT value FROM {s}.meta WHERE key = 'budgets'"))
    row = cur.fetchone()
    if row is not None and row[0] != str(BUDGETS_SCHEMA_VERSION):
        msg = (f"schema {store.schema!r} holds piagent budget tables of version {row[0]}; "
               f"this piagent reads version {BUDGETS_SCHEMA_VERSION}")
        raise RuntimeError(msg)
    cur.execute(store._sql("INSERT INTO {s}.meta VALUES ('budgets', %s) ON CONFLICT DO NOTHING"),
                (str(BUDGETS_SCHEMA_VERSION),))


def postgres_charge(store: Any, key: str, cost: float, tokens: int,
                    requests: int) -> BudgetSpend:
    """``key`` is already in the store's column form (``to_column``)."""
    ready = _is_ready(store)

    def work(cur: Any) -> tuple[Any, ...]:
        if not ready:
            _pg_create(store, cur)
        cur.execute(store._sql(
            "INSERT INTO {s}.budgets AS b VALUES (%s, %s, %s, %s, %s) ON CONFLICT (budget_key) "
            "DO UPDATE SET cost = b.cost + EXCLUDED.cost, tokens = b.tokens + EXCLUDED.tokens, "
            "requests = b.requests + EXCLUDED.requests, updated_at = EXCLUDED.updated_at "
            "RETURNING cost, tokens, requests"),
            (key, cost, tokens, requests, time.time()))
        row: tuple[Any, ...] = cur.fetchone()
        return row
    total = store.run(work)
    _mark_ready(store)
    return BudgetSpend(float(total[0]), int(total[1]), int(total[2]))


# --- memory ------------------------------------------------------------------------------

def memory_charge(store: Any, key: str, cost: float, tokens: int,
                  requests: int) -> BudgetSpend:
    with store._lock:
        spent = store._budgets.get(key, BudgetSpend())
        spent = BudgetSpend(spent.cost + cost, spent.tokens + tokens, spent.requests + requests)
        store._budgets[key] = spent
    return spent
