"""pi-ai 1.6.1's argument coercion (pi-schema's ``coerce: true``), as three passes over a schema.

1. Optional nulls: a ``null`` in an optional property whose schema rejects ``null`` is dropped.
2. Conversion (TypeBox's ``Value.Convert`` rules, keyed on JSON Schema): ``const``, ``enum``,
   ``anyOf``/``oneOf`` (the first branch whose conversion the union accepts), ``allOf``,
   ``type``: ``null`` becomes ``"null"`` for a string, ``"3.5"`` becomes ``3`` for an integer,
   a single value becomes a one-element array; ``$ref`` targets are followed.
3. Primitive coercion by ``type`` (also type lists): what pass 2 left, e.g. ``""`` for ``null``.

Every pass is copy-on-write: a dict or list is copied only when a member changes, so the input
is never modified. A value that cannot be coerced is left as it is; validation reports it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from ._coerce import JS_SPACE, coerce_primitive, is_number, js_number, parse_js_number

__all__ = ["Converter", "UNRESOLVED", "js_strict_equal", "resolve_local"]

Passes = Callable[[Any, Any], bool]  # (schema node, value) -> whether the value passes it

UNRESOLVED = "$piagentUnresolvedRef"
"""The key marking a node that stands for a ``$ref`` naming nothing (its value: the ref)."""

_MISSING = object()
_BIGINT_TRUNC = re.compile(r"-?(0|[1-9]\d*)\.\d+")
_BIGINT = re.compile(r"-?(0|[1-9]\d*)n?")
_MAX_SAFE = 2**53 - 1


def resolve_local(root: Any, ref: str) -> Any:
    """The node a local ``$ref`` (``#``, ``#/a/b``) names in ``root``; ``_MISSING`` when it
    names nothing or is not local."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return _MISSING
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def js_strict_equal(a: Any, b: Any) -> bool:
    """JavaScript's ``===`` on JSON values (containers by identity, ``1 === 1.0``)."""
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if is_number(a) and is_number(b):
        return bool(a == b)
    return type(a) is type(b) and a == b


def _finite(value: Any) -> bool:
    return is_number(value) and (isinstance(value, int) or math.isfinite(value))


def _try_string(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if _finite(value):
        try:
            return js_number(value)
        except ValueError:  # more digits than str() converts
            return _MISSING
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    return _MISSING


def _try_number(value: Any) -> Any:
    if isinstance(value, bool):
        return 1 if value else 0
    if _finite(value):
        return value
    if value is None:
        return 0
    if not isinstance(value, str):
        return _MISSING
    if not value.strip(JS_SPACE):
        return 0  # JavaScript's +value: "" and " " are 0
    parsed = parse_js_number(value)
    if parsed is not None:
        return parsed
    lower = value.lower()
    if lower in ("false", "true"):
        return int(lower == "true")
    if _BIGINT_TRUNC.fullmatch(value):
        digits = value.split(".")[0]
    elif _BIGINT.fullmatch(value):
        digits = value.rstrip("n")
    else:
        return _MISSING
    if len(digits) > 17:  # past 2**53 either way
        return _MISSING
    big = int(digits)
    return big if -_MAX_SAFE <= big <= _MAX_SAFE else _MISSING


def _try_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if _finite(value):
        return True if value == 1 else False if value == 0 else _MISSING
    if value is None:
        return False
    if not isinstance(value, str):
        return _MISSING
    lower = value.lower()
    if lower == "false" or value == "0":
        return False
    if lower == "true" or value == "1":
        return True
    return _MISSING


def _try_null(value: Any) -> Any:
    if isinstance(value, bool):
        return None if value is False else _MISSING
    if _finite(value):
        return None if value == 0 else _MISSING
    if value is None:
        return None
    if isinstance(value, str) and (value.lower() in ("undefined", "null") or value in ("", "0")):
        return None
    return _MISSING


def _convert_literal(literal: Any, value: Any) -> Any:
    if js_strict_equal(literal, value):
        return value
    if isinstance(literal, str):
        result = _try_string(value)
    elif isinstance(literal, bool):
        result = _try_boolean(value)
    elif is_number(literal):
        result = _try_number(value)
    else:
        return value
    return result if result is not _MISSING and js_strict_equal(result, literal) else value


def _types_of(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    return []


def _matches_type(value: Any, kind: str) -> bool:
    if kind == "number":
        return _finite(value)
    if kind == "integer":
        return _finite(value) and (isinstance(value, int) or float(value).is_integer())
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "null":
        return value is None
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return False


def _item_schema(schema: dict[str, Any], index: int) -> Any:
    items = schema.get("items")
    if isinstance(items, list):
        return items[index] if index < len(items) else None
    prefix = schema.get("prefixItems")
    if isinstance(prefix, list) and index < len(prefix):
        return prefix[index]
    return items


def _map_items(items: list[Any], step: Callable[[Any, int], Any]) -> list[Any]:
    out: list[Any] | None = None
    for i, item in enumerate(items):
        new = step(item, i)
        if new is item or js_strict_equal(new, item) and type(new) is type(item):
            continue
        if out is None:
            out = list(items)
        out[i] = new
    return items if out is None else out


def _changed(new: Any, old: Any) -> bool:
    return not (new is old or (js_strict_equal(new, old) and type(new) is type(old)))


def _patterns(schema: dict[str, Any]) -> list[tuple[re.Pattern[str], Any]]:
    found = schema.get("patternProperties")
    if not isinstance(found, dict):
        return []
    out = []
    for source, item in found.items():
        try:
            out.append((re.compile(source), item))
        except re.error:
            continue
    return out


class Converter:
    """The three passes for one schema ``root``; ``passes(node, value)`` answers whether a
    value passes a node of it (``$ref``s resolved against ``root``)."""

    def __init__(self, root: Any, passes: Passes) -> None:
        self.root = root
        self.passes = passes
        # the (node, value) pairs being converted through a re-entry point ($ref, a wrapped
        # single value): a recursive schema meeting a value no branch accepts stops there.
        # Local to one call of coerce (a new list per call: the converter is shared).
        self._entered: list[tuple[Any, Any]] = []

    def coerce(self, value: Any, valid: Callable[[Any], bool] | None = None) -> Any:
        """``value`` through the three passes; with ``valid`` (the whole schema's check), a
        value valid after the first two skips the third, which leaves every valid value as
        it is (each node of it is valid, and a valid value has its node's type)."""
        run = Converter(self.root, self.passes)
        value = run._convert(self.root, run._drop_nulls(value, self.root))
        if valid is not None and valid(value):
            return value
        return run._coerce_types(value, self.root)

    # --- pass 1 ---------------------------------------------------------------------------

    def _drop_nulls(self, value: Any, schema: Any) -> Any:
        if not isinstance(schema, dict):
            return value
        if isinstance(value, list):
            return _map_items(value, lambda item, i: self._drop_item(item, schema, i))
        if not isinstance(value, dict):
            return value
        properties = schema.get("properties")
        props = properties if isinstance(properties, dict) else {}
        patterns = _patterns(schema)
        extra = schema.get("additionalProperties")
        additional = extra if isinstance(extra, dict) else None
        if not patterns and additional is None and not isinstance(properties, dict):
            return value
        listed = schema.get("required")
        required = set(listed) if isinstance(listed, list) else set()
        out: dict[str, Any] | None = None
        for key, prop in props.items():
            if key not in value:
                continue
            is_ref = isinstance(prop, dict) and (isinstance(prop.get("$ref"), str)
                                                 or UNRESOLVED in prop)
            if value[key] is None and key not in required and not is_ref \
                    and not self.passes(prop, None):
                out = dict(value) if out is None else out
                del out[key]
                continue
            new = self._drop_nulls(value[key], prop)
            if _changed(new, value[key]):
                out = dict(value) if out is None else out
                out[key] = new
        if patterns or additional is not None:
            for key in list(value):
                matched = key in props
                for pattern, item in patterns:
                    if pattern.search(key):
                        matched = True
                        current = (value if out is None else out).get(key)
                        new = self._drop_nulls(current, item)
                        if _changed(new, current):
                            out = dict(value) if out is None else out
                            out[key] = new
                if not matched and additional is not None:
                    new = self._drop_nulls(value[key], additional)
                    if _changed(new, value[key]):
                        out = dict(value) if out is None else out
                        out[key] = new
        return value if out is None else out

    def _drop_item(self, item: Any, schema: dict[str, Any], index: int) -> Any:
        sub = _item_schema(schema, index)
        return item if sub is None else self._drop_nulls(item, sub)

    # --- pass 2 ---------------------------------------------------------------------------

    def _convert(self, node: Any, value: Any) -> Any:
        if not isinstance(node, dict):
            return value
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = resolve_local(self.root, ref)
            return self._reenter(target, value) if isinstance(target, dict) else value
        return self._convert_node(node, value)

    def _reenter(self, node: Any, value: Any) -> Any:
        for entered, seen in self._entered:
            if entered is node and (seen is value or (not isinstance(value, (dict, list))
                                                      and js_strict_equal(seen, value))):
                return value
        self._entered.append((node, value))
        try:
            return self._convert(node, value)
        finally:
            self._entered.pop()

    def _convert_node(self, node: dict[str, Any], value: Any) -> Any:
        if "const" in node:
            return _convert_literal(node["const"], value)
        if isinstance(node.get("enum"), list):
            return self._convert_enum(node, node["enum"], value)
        for union in ("anyOf", "oneOf"):
            if isinstance(node.get(union), list):
                return self._convert_union(node, node[union], value)
        if isinstance(node.get("allOf"), list):
            for member in node["allOf"]:
                value = self._convert(member, value)
            return self._convert_members(node, value)
        kind = node.get("type", _MISSING)
        if kind == "string":
            result = _try_string(value)
        elif kind == "number":
            result = _try_number(value)
        elif kind == "integer":
            result = _try_number(value)
            return value if result is _MISSING else math.trunc(result)
        elif kind == "boolean":
            result = _try_boolean(value)
        elif kind == "null":
            result = _try_null(value)
        elif kind == "array":
            return self._convert_array(node, value)
        elif kind == "object":
            return self._convert_object(node, value)
        elif kind is _MISSING:
            if "properties" in node or "patternProperties" in node:
                return self._convert_object(node, value)
            if "items" in node or "prefixItems" in node:
                return self._convert_array(node, value)
            return value
        else:
            return value
        return value if result is _MISSING else result

    def _convert_enum(self, node: dict[str, Any], values: list[Any], value: Any) -> Any:
        if any(js_strict_equal(member, value) for member in values):
            return value
        for member in values:
            candidate = _convert_literal(member, value)
            if _changed(candidate, value) and self.passes(node, candidate):
                return candidate
        return value

    def _convert_union(self, node: dict[str, Any], branches: list[Any], value: Any) -> Any:
        if any(self.passes(branch, value) for branch in branches):
            return self._convert_members(node, value)
        for branch in branches:
            candidate = self._convert_members(node, self._convert(branch, value))
            if self.passes(node, candidate):
                return candidate
        return self._convert_members(node, value)

    def _convert_members(self, node: dict[str, Any], value: Any) -> Any:
        if any(k in node for k in ("properties", "patternProperties", "additionalProperties")):
            return self._convert_object(node, value)
        return value

    def _convert_array(self, node: dict[str, Any], value: Any) -> Any:
        items = node.get("items", _MISSING)
        prefix = items if isinstance(items, list) else node.get("prefixItems")
        if isinstance(prefix, list):
            if not isinstance(value, list):  # a tuple never wraps a single value
                return value
            rest = None if isinstance(items, list) or items is _MISSING else items

            def step(item: Any, i: int) -> Any:
                sub = prefix[i] if i < len(prefix) else rest
                return item if sub is None else self._convert(sub, item)

            return _map_items(value, step)
        if isinstance(value, list):
            if items is _MISSING:
                return value
            return _map_items(value, lambda item, i: self._convert(items, item))
        return [self._reenter(items, value) if isinstance(items, dict) else value]

    def _convert_object(self, node: dict[str, Any], value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        properties = node.get("properties")
        props = properties if isinstance(properties, dict) else {}
        patterns = _patterns(node)
        extra = node.get("additionalProperties")
        additional = extra if isinstance(extra, dict) else None
        out: dict[str, Any] | None = None
        for key, old in value.items():
            new = old
            matched = key in props
            if matched:
                new = self._convert(props[key], new)
            for pattern, sub in patterns:
                if pattern.search(key):
                    matched = True
                    new = self._convert(sub, new)
            if not matched and additional is not None:
                new = self._convert(additional, new)
            if _changed(new, old):
                out = dict(value) if out is None else out
                out[key] = new
        return value if out is None else out

    # --- pass 3 ---------------------------------------------------------------------------

    def _coerce_types(self, value: Any, schema: Any) -> Any:
        if not isinstance(schema, dict):
            return value
        members = schema.get("allOf")
        for member in members if isinstance(members, list) else ():
            value = self._coerce_types(value, member)
        for union in ("anyOf", "oneOf"):
            if isinstance(schema.get(union), list):
                value = self._coerce_union(value, schema[union])
        types = _types_of(schema)
        if types and not (len(types) > 1 and any(_matches_type(value, t) for t in types)):
            for kind in types:
                candidate = coerce_primitive(value, kind)
                if _changed(candidate, value):
                    value = candidate
                    break
        if "object" in types and isinstance(value, dict):
            value = self._coerce_properties(value, schema)
        if "array" in types and isinstance(value, list):
            value = _map_items(value, lambda item, i: self._coerce_item(item, schema, i))
        return value

    def _coerce_item(self, item: Any, schema: dict[str, Any], index: int) -> Any:
        sub = _item_schema(schema, index)
        return self._coerce_types(item, sub) if isinstance(sub, dict) else item

    def _coerce_union(self, value: Any, branches: list[Any]) -> Any:
        if any(self.passes(branch, value) for branch in branches):
            return value
        for branch in branches:
            coerced = self._coerce_types(value, branch)
            if self.passes(branch, coerced):
                return coerced
        return value

    def _coerce_properties(self, value: dict[str, Any], schema: dict[str, Any]) -> Any:
        properties = schema.get("properties")
        props = properties if isinstance(properties, dict) else {}
        patterns = _patterns(schema)
        extra = schema.get("additionalProperties")
        additional = extra if isinstance(extra, dict) else None
        out: dict[str, Any] | None = None

        def put(key: str, new: Any) -> None:
            nonlocal out
            if _changed(new, (value if out is None else out)[key]):
                out = dict(value) if out is None else out
                out[key] = new

        for key, prop in props.items():
            if key in value:
                put(key, self._coerce_types(value[key], prop))
        for key in list(value):
            matched = key in props
            for pattern, item in patterns:
                if pattern.search(key):
                    matched = True
                    put(key, self._coerce_types((value if out is None else out)[key], item))
            if not matched and additional is not None:
                put(key, self._coerce_types(value[key], additional))
        return value if out is None else out
