"""The stores' side of budgets (the types are ``piagent.policy``'s): the tables and the one
"charge and read back" statement of SQLite and PostgreSQL. Each store's ``charge_budget``
runs them (``MemoryStore`` keeps a dict).

A budget row holds what every process has spent under one key (a session id, ``user:42``,
...): money in USD, tokens and requests. The charge adds to it and returns the new totals
in one statement, so two processes charging at once both see a total that includes the
other's charge. Each store keeps the rows beside its sessions, under its own schema
component (``budgets``, version 1), created on first use; the sessions schema is unchanged.
"""

from __future__ import annotations

__all__ = ["BUDGETS_SCHEMA_VERSION", "PG_CHARGE", "PG_CREATE", "PG_SET_VERSION", "PG_VERSION",
           "SQLITE_CHARGE", "SQLITE_SCHEMA"]

BUDGETS_SCHEMA_VERSION = 1

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS piagent_budgets (
    budget_key TEXT PRIMARY KEY,
    cost REAL NOT NULL,            -- USD
    tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    updated_at REAL NOT NULL       -- epoch seconds of the last charge
) WITHOUT ROWID
"""
# parameters: key, cost, tokens, requests, now
SQLITE_CHARGE = (
    "INSERT INTO piagent_budgets VALUES (?, ?, ?, ?, ?) ON CONFLICT (budget_key) DO UPDATE "
    "SET cost = cost + excluded.cost, tokens = tokens + excluded.tokens, "
    "requests = requests + excluded.requests, updated_at = excluded.updated_at "
    "RETURNING cost, tokens, requests")

# PostgreSQL: ``{s}`` is the store's schema (``PostgresStore._sql``)
PG_CREATE = (
    "CREATE TABLE IF NOT EXISTS {s}.budgets (budget_key text PRIMARY KEY, "
    "cost double precision NOT NULL, tokens bigint NOT NULL, requests bigint NOT NULL, "
    "updated_at double precision NOT NULL)")
PG_VERSION = "SELECT value FROM {s}.meta WHERE key = 'budgets'"
PG_SET_VERSION = "INSERT INTO {s}.meta VALUES ('budgets', %s) ON CONFLICT DO NOTHING"
# parameters: key (in the store's column form), cost, tokens, requests, now
PG_CHARGE = (
    "INSERT INTO {s}.budgets AS b VALUES (%s, %s, %s, %s, %s) ON CONFLICT (budget_key) "
    "DO UPDATE SET cost = b.cost + EXCLUDED.cost, tokens = b.tokens + EXCLUDED.tokens, "
    "requests = b.requests + EXCLUDED.requests, updated_at = EXCLUDED.updated_at "
    "RETURNING cost, tokens, requests")
