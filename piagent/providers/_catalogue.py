"""The bundled model catalogue (``models.json``): ``get_model``, ``get_models``,
``get_providers``, and ``resolve_model`` for the ``"PROVIDER/MODEL"`` spelling."""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from importlib import resources
from typing import Any

from ..models import CostTier, Model, ModelCost

__all__ = ["check_base_url", "get_model", "get_models", "get_providers", "resolve_model"]

_SERVER_ADDRESSES: dict[str, str | None] = {
    "ollama": "http://localhost:11434/v1",
    "vllm": None, "llamacpp": None, "llama.cpp": None, "lmstudio": None, "sglang": None,
}
"""The model servers ``resolve_model`` knows by provider name (the CLI's ``--model`` too): the
default address where the server has one (Ollama's), else ``None``: a base URL must be given."""


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
                       cache_write=float(cost.get("cacheWrite", 0)),
                       tiers=CostTier.from_json(cost.get("tiers"))),
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


def get_model(provider: str, model_id: str, *, base_url: str | None = None,
              api: str | None = None) -> Model:
    """The catalogued model (a fresh object each call), optionally at another address.

    With ``base_url`` (a local or self-hosted server speaking the provider's wire format)
    the model keeps its catalogued prices and limits, and its ``api`` becomes
    ``"openai-completions"`` unless ``base_url`` is the provider's own address or ``api`` is
    given: servers that are not the provider itself (Ollama, vLLM, llama.cpp, LM Studio)
    speak Chat Completions, as ``piagent chat --base-url`` assumes. A model the catalogue
    does not list is built from the arguments when ``base_url`` is given.

    Raises:
        ValueError: ``base_url`` is not an ``http://`` or ``https://`` URL.
        LookupError: unknown provider or model (without ``base_url``); the message lists
            what exists. Any other model is one line:
            ``Model(id=..., api=..., provider=..., base_url=...)``.
    """
    if base_url is not None:
        check_base_url(base_url, "get_model(base_url=...)")
    entries = _catalogue().get(provider)
    entry = None if entries is None else entries.get(model_id)
    if entry is None and base_url is not None:
        return Model(id=model_id, api=api or "openai-completions", provider=provider,
                     base_url=base_url)
    if entries is None:
        msg = (f"Unknown provider {provider!r}. Known providers: {', '.join(get_providers())}. "
               "For any other server build Model(id=..., api=..., provider=..., base_url=...).")
        raise LookupError(msg)
    if entry is None:
        msg = (f"Unknown model {model_id!r} for provider {provider!r}. Known: "
               f"{', '.join(entries)}. For another model build "
               f"Model(id={model_id!r}, api=..., provider={provider!r}, base_url=...).")
        raise LookupError(msg)
    model = _to_model(provider, model_id, entry)
    if base_url is not None and base_url.rstrip("/") != model.base_url.rstrip("/"):
        model = dataclasses.replace(model, base_url=base_url,
                                    api=api or "openai-completions")
    elif api is not None:
        model = dataclasses.replace(model, api=api)
    return model


def resolve_model(spec: str, *, base_url: str | None = None, api: str | None = None) -> Model:
    """The catalogued model named ``"PROVIDER/MODEL"`` (``"openai/gpt-4o-mini"``), as the CLI's
    ``--model`` and ``Agent(model="...")`` take it: ``get_model(PROVIDER, MODEL, base_url=...,
    api=...)``. The provider is the part before the first ``/`` (an OpenRouter id keeps its
    own: ``"openrouter/openai/gpt-4o-mini"``). A model server the catalogue does not list
    takes any model id: ``"ollama/llama3.2"`` goes to Ollama's default address;
    ``"vllm/..."``, ``"llamacpp/..."``, ``"lmstudio/..."``, ``"sglang/..."`` need ``base_url``.

    Raises:
        TypeError: ``spec`` is not a str.
        ValueError: ``spec`` is not ``PROVIDER/MODEL``; a bare model id the catalogue lists
            gets the spelling to write instead. A wrong ``base_url`` as ``get_model``; a
            model server without a default address and no ``base_url``.
        LookupError: unknown provider or model, as ``get_model``.
    """
    if not isinstance(spec, str):
        msg = f"resolve_model() takes a 'PROVIDER/MODEL' str, got {type(spec).__name__}."
        raise TypeError(msg)
    provider, sep, model_id = spec.partition("/")
    if not sep or not provider or not model_id:
        raise ValueError(_not_provider_model(spec))
    if base_url is None and provider in _SERVER_ADDRESSES and provider not in _catalogue():
        base_url = _SERVER_ADDRESSES[provider]
        if base_url is None:
            msg = (f"{spec!r}: a {provider} server has no default address; give its base "
                   f"URL (base_url='http://HOST:PORT/v1' in Python, --base-url on the "
                   f"command line).")
            raise ValueError(msg)
    return get_model(provider, model_id, base_url=base_url, api=api)


def _not_provider_model(spec: str) -> str:
    """Why ``spec`` is no ``PROVIDER/MODEL``, with the spelling to use where one exists."""
    owners = [p for p, entries in sorted(_catalogue().items()) if spec in entries]
    if len(owners) == 1:
        return (f"{spec!r} is not PROVIDER/MODEL: write '{owners[0]}/{spec}', or "
                f"get_model('{owners[0]}', {spec!r}).")
    if owners:
        spellings = ", ".join(f"'{p}/{spec}'" for p in owners)
        return f"{spec!r} is not PROVIDER/MODEL: write one of {spellings}."
    return (f"{spec!r} is not PROVIDER/MODEL (for example 'openai/gpt-4o-mini'); for a model "
            f"the catalogue does not list, use get_model(provider, model_id, base_url=...) or "
            f"build Model(id=..., api=..., provider=..., base_url=...).")


def check_base_url(url: object, where: str) -> None:
    """A ``ValueError`` naming ``where`` unless ``url`` is an http(s) URL with a host."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) \
            or not url.split("://", 1)[1].strip("/"):
        hint = ""
        if isinstance(url, str) and url and "://" not in url:
            hint = f" (did you mean 'http://{url}'?)"
        msg = f"{where} must be an http:// or https:// URL, not {url!r}{hint}."
        raise ValueError(msg)
