"""``Limits`` and ``LimitHit``: what a run may spend, and which limit stopped it.

A run's own figures (requests, tool calls, tokens, cost, wall time) are checked before
each model request, so a run overshoots a token or cost limit by at most the one request
that crossed it; tool calls beyond ``max_tool_calls`` are refused before they run. A
``Budget`` (``piagent.policy``) is spending shared by every run and process that names the
same key in the same session store; it is charged after each response and checked before
each request.
``RunGuard`` (``_guard``) applies both through the loop's public hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..messages import Usage
from ..policy import Budget, check_limit as _check_limit

__all__ = ["LimitHit", "Limits"]


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
