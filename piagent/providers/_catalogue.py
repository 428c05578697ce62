"""The bundled model catalogue (``models.json``): ``get_model``, ``get_models``, ``get_providers``."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from ..models import Model, ModelCost

__all__ = ["get_model", "get_models", "get_providers"]


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, dict[str, Any]]:
    text = resources.files("piagent.providers").joinpath("models.json").read_text(encoding="utf-8")
    data: dict[str, dict[str, Any]] = json.loads(text)["providers"]
    return data


def _to_model(provider: str, model_id: str, entry: dict[str, Any]) -> Model:
    cost = entry.get("cost") or {}
    return Model(
        id=model_id, api=entry["api"], provider=provider, base_url=entry["baseUrl"],
        name=entry.get("name"), reasoning=bool(entry.get("reasoning", False)),
        input=tuple(entry.get("input") or ("text",)),
        cost=ModelCost(input=float(cost.get("input", 0)), output=float(cost.get("output", 0)),
                       cache_read=float(cost.get("cacheRead", 0)),
                       cache_write=float(cost.get("cacheWrite", 0))),
        context_window=int(entry.get("contextWindow", 128_000)),
        max_tokens=int(entry.get("maxTokens", 16_384)),
        headers=entry.get("headers"), compat=entry.get("compat"),
    )


def get_providers() -> list[str]:
    """The providers in the bundled catalogue."""
    return sorted(_catalogue())


def get_models(provider: str) -> list[Model]:
    """Every catalogued model of ``provider`` (fresh objects; ``[]`` when unknown)."""
    entries = _catalogue().get(provider, {})
    return [_to_model(provider, model_id, entry) for model_id, entry in entries.items()]


def get_model(provider: str, model_id: str) -> Model:
    """The catalogued model (a fresh object each call).

    Raises:
        LookupError: unknown provider or model; the message lists what exists. Any other
            model is one line: ``Model(id=..., api=..., provider=..., base_url=...)``.
    """
    entries = _catalogue().get(provider)
    if entries is None:
        msg = (f"Unknown provider {provider!r}. Known providers: {', '.join(get_providers())}. "
               "For any other server build Model(id=..., api=..., provider=..., base_url=...).")
        raise LookupError(msg)
    entry = entries.get(model_id)
    if entry is None:
        msg = (f"Unknown model {model_id!r} for provider {provider!r}. Known: "
               f"{', '.join(entries)}. For another model build "
               f"Model(id={model_id!r}, api=..., provider={provider!r}, base_url=...).")
        raise LookupError(msg)
    return _to_model(provider, model_id, entry)
