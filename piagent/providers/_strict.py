"""JSON-schema constrained sampling of tools (pi-ai's ``constrainedSampling``): the strict
schema, whether a tool gets it, and Claude's strict-tool limits.

A tool whose ``ToolDeclaration.constrained_sampling`` is ``{"type": "json_schema", "strict":
"prefer" | "require"}`` is sent strict where the API and model support it: its schema made
strict (``make_strict_schema``: every property required, an optional one nullable,
``additionalProperties: false``). "prefer" falls back to the plain schema where strict is
unsupported (or the schema cannot be made strict); "require" fails the request there.

Anthropic (pi-ai 1.6): Claude refuses a request whose strict tools exceed its limits (20
tools, 16 optional or union-typed parameters); the request is sent again with the "prefer"
tools non-strict, and later requests of that session send them so at once
(``mark_over_strict_limits``).
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..errors import ProviderError
from ..messages import ToolDeclaration

__all__ = ["is_strict_limit_error", "make_strict_schema", "mark_over_strict_limits",
           "over_strict_limits", "prefers_strict", "strict_sampling"]


# A schema with a construct strict sampling does not take raises ValueError (it never leaves
# the adapter: "prefer" falls back, "require" becomes a ProviderError).
UnsupportedStrictSchema = ValueError


_UNSUPPORTED_KEYS = ("$ref", "$defs", "definitions", "allOf", "oneOf", "patternProperties",
                     "dependentSchemas", "dependencies", "unevaluatedProperties",
                     "propertyNames", "contains", "prefixItems", "not", "if", "then", "else")
Keyword = Callable[[str, Any], bool]


def _structured(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    types = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    return ("object" in types or "array" in types or "properties" in schema
            or "items" in schema)


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if ("const" in schema and schema["const"] is None) or (
            isinstance(schema.get("enum"), list) and None in schema["enum"]):
        return True
    variants = schema.get("anyOf")
    return isinstance(variants, list) and any(_allows_null(v) for v in variants)


def _strict_node(schema: Any, unsupported: Keyword | None) -> None:
    if not isinstance(schema, dict):
        raise UnsupportedStrictSchema("boolean schemas are unsupported")
    for key in _UNSUPPORTED_KEYS:
        if key in schema:
            raise UnsupportedStrictSchema(f"{key} schemas are unsupported")
    if unsupported is not None:
        for key, value in schema.items():
            if unsupported(key, value):
                text = json.dumps(value, separators=(",", ":"))
                raise UnsupportedStrictSchema(f"{key}: {text} is unsupported")
    if "type" not in schema and "anyOf" not in schema and "enum" not in schema:
        raise UnsupportedStrictSchema("schemas without a type are unsupported")
    if "anyOf" in schema:
        variants = schema["anyOf"]
        if not isinstance(variants, list) or not variants:
            raise UnsupportedStrictSchema("anyOf must contain at least one schema")
        for variant in variants:
            if _structured(variant):
                raise UnsupportedStrictSchema("object and array unions are unsupported")
            _strict_node(variant, unsupported)
    if "items" in schema:
        if isinstance(schema["items"], list):
            raise UnsupportedStrictSchema("tuple schemas are unsupported")
        _strict_node(schema["items"], unsupported)
    is_object = schema.get("type") == "object"
    if "properties" in schema and not is_object:
        raise UnsupportedStrictSchema("properties require type object")
    if not is_object:
        return
    if "additionalProperties" in schema and schema["additionalProperties"] is not False:
        raise UnsupportedStrictSchema("schema-valued or true additionalProperties is unsupported")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise UnsupportedStrictSchema("object properties must be a schema map")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        raise UnsupportedStrictSchema("object required must be a string array")
    if any(key not in properties for key in required):
        raise UnsupportedStrictSchema("required contains an unknown property")
    for key, prop in list(properties.items()):
        _strict_node(prop, unsupported)
        if key not in required and not _allows_null(prop):
            properties[key] = {"anyOf": [prop, {"type": "null"}]}
    schema["required"] = list(properties)
    schema["additionalProperties"] = False


def make_strict_schema(schema: Any, unsupported: Keyword | None = None) -> dict[str, Any]:
    """A copy of ``schema`` in the strict subset (pi-ai's ``makeStrictJsonSchema``):
    ``UnsupportedStrictSchema`` for a construct it cannot take (``unsupported(key, value)``:
    the API's own refusals, Anthropic's)."""
    if not isinstance(schema, dict):
        raise UnsupportedStrictSchema("root schema must have type object")
    strict = copy.deepcopy(schema)
    _strict_node(strict, unsupported)
    if strict.get("type") != "object":
        raise UnsupportedStrictSchema("root schema must have type object")
    return strict


def strict_sampling(tool: ToolDeclaration, supported: bool,
                    unsupported: Keyword | None = None) -> dict[str, Any] | None:
    """The strict schema ``tool`` is sent with, or None for its plain schema: a
    ``json_schema`` tool where ``supported`` and its schema can be made strict. A "require"
    tool that cannot be sent strict is a ``ProviderError`` naming it (pi-ai's text)."""
    config = tool.constrained_sampling
    if not isinstance(config, dict) or config.get("type") != "json_schema":
        return None
    if supported:
        try:
            return make_strict_schema(tool.parameters, unsupported)
        except UnsupportedStrictSchema as error:
            if config.get("strict") != "require":
                return None
            msg = (f'Tool "{tool.name}" requires JSON-schema constrained sampling, but '
                   f"{error}.")
            raise ProviderError(msg) from None
    if config.get("strict") == "require":
        msg = (f'Tool "{tool.name}" requires JSON-schema constrained sampling, but strict '
               "tools are unsupported.")
        raise ProviderError(msg)
    return None


def prefers_strict(tool: ToolDeclaration) -> bool:
    """A tool that asks for strict sampling only where possible (``strict: "prefer"``)."""
    config = tool.constrained_sampling
    return (isinstance(config, dict) and config.get("type") == "json_schema"
            and config.get("strict") == "prefer")


_LIMIT_TEXTS = ("The compiled grammar is too large", "Too many strict tools (",
                "Schemas contains too many parameters with union types (")


def is_strict_limit_error(text: str) -> bool:
    """Claude's refusal of a request whose strict tools exceed its limits."""
    return any(limit in text for limit in _LIMIT_TEXTS)


_MAX_SESSIONS = 10_000  # sessions remembered; a forgotten one pays one more refusal
_over_lock = threading.Lock()  # guards _over (every adapter thread reads and marks it)
_over: OrderedDict[str, None] = OrderedDict()


def mark_over_strict_limits(session_id: str | None) -> None:
    """Remember that ``session_id``'s strict tools exceeded Claude's limits (nothing
    without a session)."""
    if session_id is None:
        return
    with _over_lock:
        _over[session_id] = None
        if len(_over) > _MAX_SESSIONS:
            _over.popitem(last=False)


def over_strict_limits(session_id: str | None) -> bool:
    """Whether an earlier request of ``session_id`` had its strict tools refused."""
    if session_id is None or not _over:
        return False
    with _over_lock:
        return session_id in _over
