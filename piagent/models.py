"""``Model``: what a stream function needs to know to reach one model, and its prices."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .messages import Cost, Usage

__all__ = ["Model", "ModelCost", "calculate_cost"]


@dataclass(frozen=True)
class ModelCost:
    """Dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


@dataclass
class Model:
    """A model reachable through one API.

    Only ``id``, ``api``, ``provider`` and ``base_url`` are required, so any
    OpenAI-compatible server is one line::

        Model(id="llama3.2", api="openai-completions", provider="ollama",
              base_url="http://localhost:11434/v1")
    """

    id: str
    api: str
    provider: str
    base_url: str
    name: str | None = None
    reasoning: bool = False
    input: tuple[str, ...] = ("text",)
    cost: ModelCost = field(default_factory=ModelCost)
    context_window: int = 128_000
    max_tokens: int = 16_384
    headers: Mapping[str, str] | None = None
    compat: Mapping[str, Any] | None = None
    """Per-model switches for servers that differ from the API's reference behaviour."""


def calculate_cost(model: Model | None, usage: Usage) -> Cost:
    """Fill ``usage.cost`` from the model's prices and return it."""
    prices = model.cost if model is not None else ModelCost()
    cost = usage.cost
    cost.input = prices.input * usage.input / 1_000_000
    cost.output = prices.output * usage.output / 1_000_000
    cost.cache_read = prices.cache_read * usage.cache_read / 1_000_000
    cost.cache_write = prices.cache_write * usage.cache_write / 1_000_000
    cost.total = cost.input + cost.output + cost.cache_read + cost.cache_write
    return cost
