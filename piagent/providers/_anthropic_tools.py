"""Anthropic Messages tool definitions (pi-ai 1.6.1's ``convertTools``), strict tools
included.

``convert_tools``: each declaration as ``{name, description, eager_input_streaming?, strict?,
input_schema}``; the schema keeps ``type`` ``"object"``, ``properties`` and ``required``
(always present), and ``additionalProperties``, ``$schema``, ``$defs`` and ``definitions``
when the tool has them (other root keys stay out: Anthropic refuses a root ``anyOf``). A
tool with JSON-schema constrained sampling is sent ``strict: true`` with its strict schema
where the model's compat has ``supportsStrictTools`` and the schema uses nothing Claude's
strict mode refuses; ``relax_strict`` sends the "prefer" ones plain (after Claude refused
their number, ``_strict``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import ToolDeclaration
from ..models import Model
from ._strict import prefers_strict, strict_sampling

__all__ = ["convert_tools"]

# what Claude's strict tool use refuses with a 400 for the whole request
_UNSUPPORTED = frozenset(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                          "multipleOf", "maxItems", "uniqueItems", "minContains", "maxContains",
                          "minProperties", "maxProperties"))
_FORMATS = frozenset(("date-time", "time", "date", "duration", "email", "hostname", "uri",
                      "ipv4", "ipv6", "uuid"))
_KEPT = ("additionalProperties", "$schema", "$defs", "definitions")


def _refused(key: str, value: Any) -> bool:
    if key in _UNSUPPORTED:
        return True
    if key == "minItems":
        return value not in (0, 1) or isinstance(value, bool)
    if key == "format":
        return not isinstance(value, str) or value not in _FORMATS
    return False


def convert_tools(model: Model, tools: Sequence[ToolDeclaration], cache: dict[str, str] | None,
                  *, relax_strict: bool = False) -> list[dict[str, Any]]:
    """The ``tools`` of a request (``cache``: the last one's ``cache_control``)."""
    compat = model.compat or {}
    eager = compat.get("supportsEagerToolInputStreaming", True)
    supports = bool(compat.get("supportsStrictTools", False))
    out: list[dict[str, Any]] = []
    for tool in tools:
        strict = None
        if tool.constrained_sampling is not None and not (relax_strict and prefers_strict(tool)):
            strict = strict_sampling(tool, supports, _refused)
        schema = strict or tool.parameters or {}
        wire: dict[str, Any] = {"name": tool.name, "description": tool.description}
        if eager:
            wire["eager_input_streaming"] = True
        if strict is not None:
            wire["strict"] = True
        legacy: dict[str, Any] = {"type": "object", "properties": schema.get("properties", {}),
                                  "required": schema.get("required", [])}
        for key in _KEPT:
            if key in schema:
                legacy[key] = schema[key]
        wire["input_schema"] = {**strict, **legacy} if strict is not None else legacy
        out.append(wire)
    if out and cache is not None and compat.get("supportsCacheControlOnTools", True):
        out[-1]["cache_control"] = cache
    return out
