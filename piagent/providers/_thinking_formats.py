"""Chat Completions' thinking parameters, per the server's thinking format, as pi-ai 1.6.1
sends them (``compat.thinking_format``; the level already clamped to what the model offers,
the values from the model's ``thinking_level_map`` where it names them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..models import Model
from ._compat import OpenAICompat

__all__ = ["add_reasoning", "effort"]


def add_reasoning(body: dict[str, Any], model: Model, level: str | None,
                  compat: OpenAICompat) -> None:
    """Add the thinking fields of a request at ``level`` (``None`` or "off": thinking off)
    for a reasoning ``model`` to ``body``."""
    levels = model.thinking_level_map or {}
    on = level is not None and level != "off"
    fmt = compat.thinking_format
    # "off": None in the map, the model cannot stop thinking (say nothing when off); a str,
    # the value that stops it
    off = levels.get("off", "none")
    wanted = effort(level, compat, levels) if on and compat.supports_reasoning_effort else None
    if fmt == "openrouter":
        if on or off is not None:
            body["reasoning"] = {"effort": effort(level, compat, levels) if on else off}
    elif fmt == "zai":
        body["thinking"] = {"type": "enabled", "clear_thinking": False} if on \
            else {"type": "disabled"}
    elif fmt == "deepseek":
        if on or off is not None:
            body["thinking"] = {"type": "enabled" if on else "disabled"}
    elif fmt == "qwen":
        body["enable_thinking"] = on
    elif fmt == "qwen-chat-template":
        body["chat_template_kwargs"] = {"enable_thinking": on, "preserve_thinking": True}
    elif fmt == "together":
        body["reasoning"] = {"enabled": on}
    elif fmt == "ant-ling":
        mapped = levels.get(level) if on and level else None
        if isinstance(mapped, str):
            body["reasoning"] = {"effort": mapped}
        return
    elif fmt == "baseten":
        args = _template_values(compat.chat_template_args, on, level, levels)
        if args:
            body["chat_template_args"] = args
        value = _mapped(on, level, levels)
        if compat.supports_reasoning_effort and isinstance(value, str):
            body["reasoning_effort"] = value
        return
    elif not on:
        if compat.supports_reasoning_effort and isinstance(levels.get("off"), str):
            body["reasoning_effort"] = levels["off"]
        return
    if wanted is not None and fmt != "openrouter":
        body["reasoning_effort"] = wanted


def effort(level: str | None, compat: OpenAICompat,
           levels: Mapping[str, str | None] | None = None) -> str:
    """The wire effort: the model's ``thinking_level_map`` value (the catalogue's), else the
    compat's map, else the level (``xhigh`` and ``max`` as ``high``)."""
    assert level is not None
    mapped = levels.get(level) if levels else None
    if mapped is not None:
        return mapped
    if level in compat.reasoning_effort_map:
        return compat.reasoning_effort_map[level]
    return "high" if level in ("xhigh", "max") else level


def _template_values(values: Mapping[str, Any], on: bool, level: str | None,
                     levels: Mapping[str, str | None]) -> dict[str, Any]:
    """pi-ai's ``buildChatTemplateValues``: literal values as they are; ``{"$var":
    "thinking.enabled"}`` whether thinking is on; ``omitWhenOff`` dropped when off; any other
    object the level's mapped value. ``thinking.budget`` is not sent (no catalogued model
    uses it; docs/reference.md, ``catalogue-completions-compat-16``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if not isinstance(value, Mapping):
            out[key] = value
        elif not on and value.get("omitWhenOff"):
            continue
        elif value.get("$var") == "thinking.enabled":
            out[key] = on
        elif value.get("$var") == "thinking.budget":
            continue
        else:
            mapped = _mapped(on, level, levels)
            if isinstance(mapped, str):
                out[key] = mapped
    return out


def _mapped(on: bool, level: str | None, levels: Mapping[str, str | None]) -> str | None:
    """The map's value for the level (or for "off" when thinking is off); the level itself
    when the map does not name it; ``None`` for a level the map says is not offered."""
    requested = level if on else None
    key = requested or "off"
    return levels.get(key, requested)
