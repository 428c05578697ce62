"""The bundled catalogue (``models.json``, pi-ai's model data): ``get_model``, ``get_models``,
``get_providers``, ``resolve_model`` for the ``"PROVIDER/MODEL"`` spelling, and what the
catalogue says about models on APIs piagent does not speak.

``models.json`` is generated from pi-ai's published data by ``scripts/gen_catalogue.py``
(docs/providers.md, "The catalogue"); it is read on the first call that needs it, never at
import.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from functools import lru_cache
from importlib import resources
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any

from ..models import CostTier, Model, ModelCost

__all__ = ["catalogue_key_vars", "catalogue_name", "catalogue_source", "check_base_url", "get_model",
           "get_models", "get_providers", "is_catalogued", "resolve_model",
           "unsupported_models"]

_SERVER_ADDRESSES: dict[str, str | None] = {
    "ollama": "http://localhost:11434/v1",
    "vllm": None, "llamacpp": None, "llama.cpp": None, "lmstudio": None, "sglang": None,
}
"""The model servers ``resolve_model`` knows by provider name (the CLI's ``--model`` too): the
default address where the server has one (Ollama's), else ``None``: a base URL must be given."""


_PROVIDERS = '\n "providers": {\n'
_UNSUPPORTED = '\n },\n "unsupported": {'


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    text = resources.files("piagent.providers").joinpath("models.json").read_text(encoding="utf-8")
    return read_catalogue(text)


def read_catalogue(text: str) -> dict[str, Any]:
    """``models.json`` with each model's entry kept as its JSON text, parsed when asked for:
    a dict of strings is not tracked by the garbage collector, while 1,647 parsed entries
    (about 4,000 dicts and lists) would be walked by every full collection for as long as
    the process lives. The entries are cut from their lines (one a line, as
    scripts/gen_catalogue.py writes them) without parsing them; text in another form is
    parsed whole and each entry written back as JSON."""
    split = _split_lines(text)
    if split is not None:
        rest, providers = split
        data: dict[str, Any] = json.loads(rest)
        data["providers"] = providers
        return data
    data = json.loads(text)
    data["providers"] = {
        provider: {model_id: json.dumps(entry, separators=(",", ":"))
                   for model_id, entry in models.items()}
        for provider, models in data["providers"].items()}
    return data


def _split_lines(text: str) -> tuple[str, dict[str, dict[str, str]]] | None:
    """(the file with an empty ``providers``, ``{provider: {model_id: entry text}}``), or
    ``None`` when the providers' lines are not as the generator writes them."""
    start = text.find(_PROVIDERS)
    end = text.find(_UNSUPPORTED, start)
    if start < 0 or end < 0:
        return None
    providers: dict[str, dict[str, str]] = {}
    entries: dict[str, str] | None = None
    try:
        for line in text[start + len(_PROVIDERS):end].split("\n"):
            if line.startswith('   "') and entries is not None:
                model_id, at = scanstring(line, 4)
                if not line.startswith(": {", at):
                    return None
                entries[model_id] = line[at + 2:-1] if line.endswith(",") else line[at + 2:]
            elif line.startswith('  "') and line.endswith(": {"):
                name, _ = scanstring(line, 3)
                entries = providers[name] = {}
            elif line in ("  }", "  },"):
                entries = None
            else:
                return None
    except ValueError:  # a key that is not a JSON string
        return None
    return text[:start] + '\n "providers": {' + text[end:], providers


def _catalogue() -> dict[str, dict[str, str]]:
    """``{provider: {model_id: the entry's JSON text}}``."""
    providers: dict[str, dict[str, str]] = _data()["providers"]
    return providers


def is_catalogued(provider: str) -> bool:
    """Whether the catalogue lists models of ``provider`` (a cloud service, wherever a
    model of it points: its compat is detected as pi-ai's, not as a local server's)."""
    return provider in _catalogue()


def unsupported_models(provider: str | None = None) -> dict[str, dict[str, str]]:
    """``{provider: {model_id: api}}``: the models pi-ai serves on an API piagent does not
    speak (``piagent models --all``), for ``provider`` only when given."""
    data: dict[str, dict[str, str]] = _data()["unsupported"]
    if provider is None:
        return {p: dict(models) for p, models in data.items()}
    return {provider: dict(data[provider])} if provider in data else {}


def catalogue_key_vars(provider: str) -> tuple[str, ...]:
    """The environment variables pi-ai reads ``provider``'s key from (``()`` if none)."""
    return tuple(_data()["keys"].get(provider, ()))


def catalogue_name(provider: str) -> str | None:
    """pi-ai's display name of ``provider`` ("Hugging Face"), ``None`` if it has none."""
    name: str | None = _data()["names"].get(provider)
    return name


def catalogue_source() -> dict[str, str]:
    """Where the data came from: ``package``, ``version``, ``license`` and ``notice``."""
    source: dict[str, str] = dict(_data()["source"])
    return source


def _to_model(provider: str, model_id: str, text: str) -> Model:
    entry: dict[str, Any] = json.loads(text)
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
        headers=dict(entry["headers"]) if entry.get("headers") else None,
        compat=dict(entry["compat"]) if entry.get("compat") else None,
        thinking_level_map=dict(entry["thinkingLevelMap"]) if "thinkingLevelMap" in entry
        else None,
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
    does not list is built from the arguments when ``base_url`` is given, with one
    ``UserWarning`` saying what it assumed (window, output tokens, reasoning, inputs) and
    how to set them.

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
        model = Model(id=model_id, api=api or "openai-completions", provider=provider,
                      base_url=base_url)
        warnings.warn(_assumed(model), UserWarning, stacklevel=_stacklevel())
        return model
    if entry is None:
        raise LookupError(_unknown(provider, model_id, entries))
    model = _to_model(provider, model_id, entry)
    if base_url is not None and base_url.rstrip("/") != model.base_url.rstrip("/"):
        model = dataclasses.replace(model, base_url=base_url,
                                    api=api or "openai-completions")
    elif api is not None:
        model = dataclasses.replace(model, api=api)
    return model


_SHOWN = 12  # model ids named in an unknown-model error


def _unknown(provider: str, model_id: str, entries: dict[str, str] | None) -> str:
    """Why ``provider``/``model_id`` is not in the catalogue, and what to do instead."""
    other = _data()["unsupported"].get(provider, {})
    if entries is None and other:
        apis = ", ".join(sorted(set(other.values())))
        return (f"Provider {provider!r} serves its models over {apis}, which piagent does "
                f"not speak ('piagent models --all' lists them). Known providers: "
                f"{', '.join(get_providers())}.")
    if model_id in other:
        return (f"{provider}/{model_id} is served over {other[model_id]!r}, an API piagent "
                f"does not speak (pi-ai's catalogue, 'piagent models --all'). Reach it through "
                f"a server that speaks one of {', '.join(_data()['apis'])}: "
                f"get_model({provider!r}, {model_id!r}, base_url=..., api=...).")
    if entries is None:
        return (f"Unknown provider {provider!r}. Known providers: {', '.join(get_providers())}. "
                "For any other server build Model(id=..., api=..., provider=..., base_url=...).")
    shown = ", ".join(list(entries)[:_SHOWN])
    more = f", ... ({len(entries)} in all: 'piagent models {provider}')" \
        if len(entries) > _SHOWN else ""
    return (f"Unknown model {model_id!r} for provider {provider!r}. Known: {shown}{more}. "
            f"For another model build Model(id={model_id!r}, api=..., provider={provider!r}, "
            f"base_url=...).")


def _assumed(model: Model) -> str:
    """The warning for a model the catalogue does not list: what was assumed, how to fix."""
    return (f"{model.provider}/{model.id} is not in the catalogue, so piagent assumes a "
            f"{model.context_window:,}-token context window, {model.max_tokens:,} output "
            f"tokens, no reasoning, text-only input and no prices; if the model differs, set "
            f"them: dataclasses.replace(model, context_window=..., max_tokens=..., "
            f"reasoning=True, input=('text', 'image'), cost=ModelCost(...)).")


def _stacklevel() -> int:
    """The warning's stack level: the first caller outside piagent (of ``get_model``,
    ``resolve_model`` or ``Agent(model="...")``)."""
    import sys

    frame, level = sys._getframe(2), 2
    while frame is not None and str(frame.f_globals.get("__name__")).startswith("piagent."):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


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
