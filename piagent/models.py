"""``Model``: what a stream function needs to know to reach one model, and its prices."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .messages import Cost, Usage

__all__ = ["CostTier", "Model", "ModelCost", "calculate_cost", "clamp_thinking_level",
           "supported_thinking_levels"]


@dataclass(frozen=True)
class ModelCost:
    """Dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    tiers: tuple[CostTier, ...] = ()
    """Higher prices for a request whose input (``input + cache_read + cache_write``) is
    above a tier's ``input_tokens_above``; the tier with the highest such threshold applies
    (pi-ai's ``cost.tiers``: Gemini 2.5 Pro and Claude above 200 000 input tokens)."""


@dataclass(frozen=True)
class CostTier:
    """The prices (dollars per million tokens) of a request above ``input_tokens_above``."""

    input_tokens_above: int
    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0

    @staticmethod
    def from_json(tiers: Any) -> tuple[CostTier, ...]:
        """The tiers of pi's JSON ``cost.tiers`` (``inputTokensAbove``, ``input``, …);
        ``()`` for none. ``ValueError`` for a list entry that is not such an object."""
        if not tiers:
            return ()
        out = []
        for tier in tiers:
            if not isinstance(tier, Mapping) or not isinstance(tier.get("inputTokensAbove"),
                                                                (int, float)):
                msg = f"cost.tiers entries need a number inputTokensAbove, got {tier!r}."
                raise ValueError(msg)
            out.append(CostTier(int(tier["inputTokensAbove"]), float(tier.get("input", 0)),
                                float(tier.get("output", 0)), float(tier.get("cacheRead", 0)),
                                float(tier.get("cacheWrite", 0))))
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        """pi's JSON form of the tier."""
        return {"inputTokensAbove": self.input_tokens_above, "input": self.input,
                "output": self.output, "cacheRead": self.cache_read,
                "cacheWrite": self.cache_write}


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
    thinking_level_map: Mapping[str, str | None] | None = None
    """pi-ai's ``thinkingLevelMap``: the thinking levels the model offers and the value sent
    for each. ``None`` for a level: not offered (a request asking for it gets the nearest
    offered level, ``clamp_thinking_level``); a str: the wire value; ``xhigh`` and ``max``
    are offered only when listed. ``None`` (the default): every level up to ``high``, each
    sent as the API's own mapping has it."""


_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")


def supported_thinking_levels(model: Model) -> tuple[str, ...]:
    """The thinking levels ``model`` offers (pi-ai's ``getSupportedThinkingLevels``):
    ``("off",)`` for a model that does not reason."""
    if not model.reasoning:
        return ("off",)
    mapping = model.thinking_level_map or {}
    return tuple(level for level in _LEVELS
                 if not (level in mapping and mapping[level] is None)
                 and (level in mapping or level not in ("xhigh", "max")))


def clamp_thinking_level(model: Model, level: str) -> str:
    """``level`` if ``model`` offers it, else the nearest offered level above it, else below
    (pi-ai's ``clampThinkingLevel``: Kimi K3 offers no ``medium``, so ``medium`` is sent as
    ``high``)."""
    offered = supported_thinking_levels(model)
    if level in offered:
        return level
    if level not in _LEVELS:
        return offered[0] if offered else "off"
    index = _LEVELS.index(level)
    for candidate in (*_LEVELS[index:], *reversed(_LEVELS[:index])):
        if candidate in offered:
            return candidate
    return offered[0] if offered else "off"


def calculate_cost(model: Model | None, usage: Usage) -> Cost:
    """Fill ``usage.cost`` from the model's prices (its tier for the request's input, if
    any) and return it."""
    prices: ModelCost | CostTier = model.cost if model is not None else ModelCost()
    if model is not None and model.cost.tiers:
        above = usage.input + usage.cache_read + usage.cache_write
        threshold = -1
        for tier in model.cost.tiers:
            if above > tier.input_tokens_above > threshold:
                prices, threshold = tier, tier.input_tokens_above
    cost = usage.cost
    cost.input = prices.input * usage.input / 1_000_000
    cost.output = prices.output * usage.output / 1_000_000
    cost.cache_read = prices.cache_read * usage.cache_read / 1_000_000
    long_write = usage.cache_write_1h
    if long_write:  # Anthropic's 1-hour cache writes cost twice the input price
        cost.cache_write = (prices.cache_write * (usage.cache_write - long_write)
                            + prices.input * 2 * long_write) / 1_000_000
    else:
        cost.cache_write = prices.cache_write * usage.cache_write / 1_000_000
    cost.total = cost.input + cost.output + cost.cache_read + cost.cache_write
    return cost
