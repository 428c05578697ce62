"""``Limits``, ``Budget`` and ``LimitHit``: what a run may spend, and which limit stopped it.

A run's own figures (requests, tool calls, tokens, cost, wall time) are checked before
each model request, so a run overshoots a token or cost limit by at most the one request
that crossed it; tool calls beyond ``max_tool_calls`` are refused before they run. A
``Budget`` is spending shared by every run and process that names the same key in the
same session store; it is charged after each response and checked before each request.
``RunGuard`` (``_guard``) applies both through the loop's public hooks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..messages import Usage
from ..sessions import BudgetSpend

__all__ = ["Budget", "BudgetStore", "LimitHit", "Limits"]


@runtime_checkable
class BudgetStore(Protocol):
    """A store that keeps budgets: ``SQLiteStore``, ``PostgresStore``, ``MemoryStore``."""

    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend: ...


def _check_limit(owner: str, name: str, value: object, *, integer: bool) -> None:
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
        if not isinstance(self.key, str) or not self.key or len(self.key) > 200:
            msg = (f"Budget: key must be a non-empty str of at most 200 characters (e.g. "
                   f"'user:42' or a session id), got {self.key!r}.")
            raise ValueError(msg) if isinstance(self.key, str) else TypeError(msg)
        _check_limit("Budget", "max_cost", self.max_cost, integer=False)
        _check_limit("Budget", "max_tokens", self.max_tokens, integer=True)
        _check_limit("Budget", "max_requests", self.max_requests, integer=True)
        if self.max_cost is None and self.max_tokens is None and self.max_requests is None:
            msg = "Budget: give at least one of max_cost (USD), max_tokens, max_requests."
            raise ValueError(msg)

    def spent(self) -> BudgetSpend:
        """What every process has charged to the key so far."""
        return self.store.charge_budget(self.key)


@dataclass(frozen=True)
class Limits:
    """What one run may spend. ``None`` (the default of each) is no limit.

    Tokens are the responses' ``usage``: input counts the prompt with its cache reads and
    writes; total is input plus output. Cost is ``usage.cost.total`` in USD, from the
    model's prices in the catalogue (computed here when a stream function left it 0).
    ``max_seconds`` is wall time from the run's start, checked before each request (a
    request already running is not cut: use ``prompt(timeout=...)`` for that).
    ``output_retries`` is how many invalid final results (``output_type``) the model may
    correct before the run ends.
    """

    max_requests: int | None = None
    max_tool_calls: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None
    budget: Budget | None = None
    output_retries: int = 2

    def __post_init__(self) -> None:
        for name in ("max_requests", "max_tool_calls", "max_input_tokens",
                     "max_output_tokens", "max_total_tokens"):
            _check_limit("Limits", name, getattr(self, name), integer=True)
        _check_limit("Limits", "max_cost", self.max_cost, integer=False)
        _check_limit("Limits", "max_seconds", self.max_seconds, integer=False)
        if self.budget is not None and not isinstance(self.budget, Budget):
            msg = f"Limits: budget must be a Budget or None, not {type(self.budget).__name__}."
            raise TypeError(msg)
        retries = self.output_retries
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            msg = f"Limits: output_retries must be an int >= 0, got {retries!r}."
            raise ValueError(msg)


@dataclass(frozen=True)
class LimitHit:
    """The limit that ended a run: its name, its value, and the figure that reached it."""

    limit: str
    """``"max_requests"``, ``"max_tool_calls"``, ``"max_input_tokens"``,
    ``"max_output_tokens"``, ``"max_total_tokens"``, ``"max_cost"``, ``"max_seconds"``,
    ``"budget.max_cost"``, ``"budget.max_tokens"``, ``"budget.max_requests"`` or
    ``"output_retries"``."""
    value: float
    used: float
    message: str
    """The run's ``error_message``."""


def input_tokens(usage: Usage) -> int:
    return usage.input + usage.cache_read + usage.cache_write


def total_tokens(usage: Usage) -> int:
    return usage.total_tokens or (input_tokens(usage) + usage.output)
