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
from ..models import Model
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

    A cost limit (``max_cost``, or the ``budget``'s) on a model whose responses can never
    cost anything is refused at the call (``Agent(...)``, ``prompt()``, ``run_agent_loop``)
    with a ``ValueError`` (``check_model``).
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

    def unreachable_cost(self, model: Model | None) -> str | None:
        """Why this run's cost limits can never be reached on ``model``, or ``None`` (no cost
        limit, no model, or one whose responses may cost something): the catalogue marks it
        free (an id ending ``":free"``), or its prices are all zero and its provider (through
        a bundled wire API) reports no cost. A model of another API (a custom or scripted
        stream function) may report its own cost."""
        budget = self.budget
        names = [name for name, value in (
            ("max_cost", self.max_cost),
            ("budget.max_cost", budget.max_cost if budget is not None else None))
            if value is not None]
        why = None if model is None or not names else _costs_nothing(model)
        return None if why is None else f"{' and '.join(names)} can never be reached: {why}"

    def check_model(self, model: Model | None) -> None:
        """``ValueError`` naming the model and the fix when ``unreachable_cost(model)``."""
        why = self.unreachable_cost(model)
        if why is not None:
            msg = (f"limits: {why}. Give the Model its prices (dataclasses.replace(model, "
                   "cost=ModelCost(input=..., output=...)), USD per million tokens), or limit "
                   "tokens instead (Limits(max_total_tokens=...), Budget(max_tokens=...)).")
            raise ValueError(msg)


_BUILT_IN_APIS = frozenset({"openai-completions", "openai-responses", "anthropic-messages",
                            "google-generative-ai"})
"""The wire APIs whose stream functions piagent bundles: it knows what they report."""

_REPORTS_COST = frozenset({"openrouter"})
"""Providers that report what each response cost (OpenRouter's ``usage.cost``)."""


def _costs_nothing(model: Model) -> str | None:
    """Why no response of ``model`` can ever cost anything, or ``None``."""
    name = f"{model.provider}/{model.id}"
    if model.id.endswith(":free"):
        return f"the model {name} is free (':free'), so its responses cost nothing"
    if model.api not in _BUILT_IN_APIS or model.provider in _REPORTS_COST:
        return None
    cost = model.cost
    if any((cost.input, cost.output, cost.cache_read, cost.cache_write)) or any(
            (tier.input, tier.output, tier.cache_read, tier.cache_write) for tier in cost.tiers):
        return None
    return (f"the model {name} has no prices (its cost is all zero) and {model.provider} "
            "reports no cost, so its responses cost nothing")


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
