"""Budgets: spending shared under a key by every run and process that names it in one store.

``Budget`` is what a run may spend under the key (``Limits(budget=...)``, docs/limits.md);
``BudgetStore`` is what a store offers for it: ``charge_budget``, which adds a charge and
reads back the new totals (``BudgetSpend``) in one atomic step, so two processes charging
at once both see a total that includes the other's charge. ``SQLiteStore``,
``PostgresStore`` and ``MemoryStore`` (``piagent.sessions``) implement it, each in its own
method; the checks of a key and of a charge are here, shared by them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["MAX_BUDGET_KEY_LENGTH", "Budget", "BudgetSpend", "BudgetStore", "check_budget_key",
           "check_charge", "check_limit"]

MAX_BUDGET_KEY_LENGTH = 200


@dataclass(frozen=True)
class BudgetSpend:
    """What has been spent under a budget key, by every process, after a charge."""

    cost: float = 0.0
    """USD."""
    tokens: int = 0
    requests: int = 0


@runtime_checkable
class BudgetStore(Protocol):
    """A store that keeps budgets: ``SQLiteStore``, ``PostgresStore``, ``MemoryStore``."""

    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend: ...


def check_limit(owner: str, name: str, value: object, *, integer: bool) -> None:
    """Nothing if ``value`` is ``None`` (no limit) or a finite number > 0 (an int when
    ``integer``); else ``TypeError``/``ValueError`` naming ``owner`` and ``name``."""
    if value is None:
        return
    kind = "an int" if integer else "a number"
    msg = f"{owner}: {name} must be None (no limit) or {kind} > 0, got {value!r}."
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise TypeError(msg)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(msg)


@dataclass(frozen=True)
class Budget:
    """Spending shared by every run, in any process, that names ``key`` in ``store``.

    Before each request the run charges what its last response spent and reads the
    totals in one atomic statement; at or past ``max_cost`` (USD), ``max_tokens`` or
    ``max_requests`` it makes no request. Several processes sharing a key overshoot it by
    at most the requests they have in flight at that moment.
    """

    store: BudgetStore
    key: str
    max_cost: float | None = None
    max_tokens: int | None = None
    max_requests: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.store, BudgetStore):
            msg = (f"Budget: store must keep budgets (SQLiteStore, PostgresStore or "
                   f"MemoryStore), not {type(self.store).__name__}.")
            raise TypeError(msg)
        if (not isinstance(self.key, str) or not self.key
                or len(self.key) > MAX_BUDGET_KEY_LENGTH):
            msg = (f"Budget: key must be a non-empty str of at most {MAX_BUDGET_KEY_LENGTH} "
                   f"characters (e.g. 'user:42' or a session id), got {self.key!r}.")
            raise ValueError(msg) if isinstance(self.key, str) else TypeError(msg)
        check_limit("Budget", "max_cost", self.max_cost, integer=False)
        check_limit("Budget", "max_tokens", self.max_tokens, integer=True)
        check_limit("Budget", "max_requests", self.max_requests, integer=True)
        if self.max_cost is None and self.max_tokens is None and self.max_requests is None:
            msg = "Budget: give at least one of max_cost (USD), max_tokens, max_requests."
            raise ValueError(msg)

    def spent(self) -> BudgetSpend:
        """What every process has charged to the key so far."""
        return self.store.charge_budget(self.key)


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
    """``(cost, tokens, requests)`` as float and ints if ``cost`` is a finite number (USD) and
    the others ints, else ``TypeError`` naming the argument."""
    if not isinstance(cost, (int, float)) or isinstance(cost, bool) or not math.isfinite(cost):
        msg = f"charge_budget(): cost must be a finite number of USD, got {cost!r}."
        raise TypeError(msg)
    for name, value in (("tokens", tokens), ("requests", requests)):
        if not isinstance(value, int) or isinstance(value, bool):
            msg = f"charge_budget(): {name} must be an int, got {value!r}."
            raise TypeError(msg)
    return float(cost), int(tokens), int(requests)  # type: ignore[call-overload]
