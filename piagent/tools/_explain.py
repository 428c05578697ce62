"""The validation errors pi-ai 1.6.1 reports (pi-schema's explainer), in its words.

A walk over the schema that reports each failing keyword at the value it failed on: ``expected
integer, got string``, ``missing``, ``unknown field``, ``expected one of ["a","b"]``. A node
the value passes reports nothing; a union reports the branch its tag selects, else the branch
that declares most of an object's keys, else the one whose first error is deepest. The path
is pi-ai's (dotted, ``root`` for the top). It runs only for arguments already known to be
invalid; whether they are is ``jsonschema``'s answer (``ok``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from ._coerce import is_number, js_number
from ._convert import UNRESOLVED, js_strict_equal, resolve_local

__all__ = ["explain", "js_json"]

Ok = Callable[[Any, Any], bool]  # (schema node, value) -> whether the value passes it
FormatOk = Callable[[str, Any], bool]
_Error = tuple[str, str]  # (JSON pointer, message)
_LISTED = 20


def js_json(value: Any) -> str:
    """``JSON.stringify(value)``: compact, numbers as JavaScript writes them."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{js_json(v)}"
                              for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(js_json(v) for v in value) + "]"
    if isinstance(value, float):
        return js_number(value) if math.isfinite(value) else "null"
    return json.dumps(value, ensure_ascii=False)


def _list_values(values: list[Any]) -> str:
    if len(values) <= _LISTED:
        return js_json(values)
    return f"{js_json(values[:_LISTED])[:-1]}, ... and {len(values) - _LISTED} more]"


def _num(value: Any) -> str:
    return js_number(value)


def _is_bound(value: Any) -> bool:
    return is_number(value)


def _type_ok(kind: Any, v: Any) -> bool:
    if kind == "string":
        return isinstance(v, str)
    if kind == "number":
        return is_number(v) and (isinstance(v, int) or math.isfinite(v))
    if kind == "integer":
        return is_number(v) and (isinstance(v, int) or float(v).is_integer())
    if kind == "boolean":
        return isinstance(v, bool)
    if kind == "null":
        return v is None
    if kind == "array":
        return isinstance(v, list)
    if kind == "object":
        return isinstance(v, dict)
    return False


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, list):
        return "array"
    if isinstance(v, bool):
        return "boolean"
    if is_number(v):
        if isinstance(v, int) or v.is_integer():
            return "integer"
        return "number" if math.isfinite(v) else js_number(v)
    if isinstance(v, str):
        return "string"
    return "object"


def _deep_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return js_strict_equal(a, b)


def _is_multiple(v: Any, d: Any) -> bool:
    if d == 0:
        return False
    from fractions import Fraction  # on first use: import piagent does not load it

    try:
        return Fraction(str(v)) % Fraction(str(d)) == 0
    except (ValueError, ZeroDivisionError, OverflowError):
        return bool(v % d == 0)


def _holds(v: Any, word: str, bound: Any) -> bool:
    if word == ">=":
        return bool(v >= bound)
    if word == "<=":
        return bool(v <= bound)
    if word == ">":
        return bool(v > bound)
    return bool(v < bound)


def _pointer(path: str, key: Any) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return True


class _Walk:
    def __init__(self, root: Any, ok: Ok, format_ok: FormatOk) -> None:
        self.root = root
        self.ok = ok
        self.format_ok = format_ok

    def walk(self, node: Any, v: Any, path: str, out: list[_Error]) -> None:
        if node is True:
            return
        if node is False:
            out.append((path, "no value is allowed here"))
            return
        if not isinstance(node, dict) or self.ok(node, v):
            return
        if UNRESOLVED in node:
            out.append((path, f"unresolved reference {node[UNRESOLVED]}"))
            return
        if "type" in node:
            types = node["type"] if isinstance(node["type"], list) else [node["type"]]
            if not any(_type_ok(t, v) for t in types):
                out.append((path, f"expected {' or '.join(str(t) for t in types)}, "
                                  f"got {_type_name(v)}"))
                return
        if isinstance(node.get("enum"), list) and not any(_deep_equal(v, x)
                                                          for x in node["enum"]):
            out.append((path, f"expected one of {_list_values(node['enum'])}"))
        if "const" in node and not _deep_equal(v, node["const"]):
            out.append((path, f"expected {js_json(node['const'])}"))
        if isinstance(v, str):
            self.string(node, v, path, out)
        if is_number(v):
            self.number(node, v, path, out)
        if isinstance(v, dict):
            self.object(node, v, path, out)
        if isinstance(v, list):
            self.array(node, v, path, out)
        if isinstance(node.get("allOf"), list):
            for sub in node["allOf"]:
                self.walk(sub, v, path, out)
        if isinstance(node.get("anyOf"), list):
            self.union(node["anyOf"], v, path, out, exactly_one=False)
        if isinstance(node.get("oneOf"), list):
            self.union(node["oneOf"], v, path, out, exactly_one=True)
        if "not" in node and self.ok(node["not"], v):
            out.append((path, "must not match the schema in not"))
        if "if" in node:
            branch = node.get("then") if self.ok(node["if"], v) else node.get("else")
            if branch is not None:
                self.walk(branch, v, path, out)
        if isinstance(node.get("$ref"), str):
            target = resolve_local(self.root, node["$ref"])
            if isinstance(target, (dict, bool)):
                self.walk(target, v, path, out)

    def string(self, node: dict[str, Any], v: str, path: str, out: list[_Error]) -> None:
        n = len(v)
        low: Any = node.get("minLength")
        high: Any = node.get("maxLength")
        if _is_bound(low) and n < low:
            out.append((path, f"expected at least {_num(low)} characters"))
        if _is_bound(high) and n > high:
            out.append((path, f"expected at most {_num(high)} characters"))
        pattern = node.get("pattern")
        if isinstance(pattern, str) and not _search(pattern, v):
            out.append((path, f"expected to match {pattern}"))
        fmt = node.get("format")
        if isinstance(fmt, str) and not self.format_ok(fmt, v):
            out.append((path, f"expected format {fmt}"))

    def number(self, node: dict[str, Any], v: Any, path: str, out: list[_Error]) -> None:
        for key, word in (("minimum", ">="), ("maximum", "<="), ("exclusiveMinimum", ">"),
                          ("exclusiveMaximum", "<")):
            bound: Any = node.get(key)
            if _is_bound(bound) and not _holds(v, word, bound):
                out.append((path, f"expected {word} {_num(bound)}"))
        divisor = node.get("multipleOf")
        if _is_bound(divisor) and not _is_multiple(v, divisor):
            out.append((path, f"expected a multiple of {_num(divisor)}"))

    def object(self, node: dict[str, Any], v: dict[str, Any], path: str,
               out: list[_Error]) -> None:
        props = node.get("properties")
        props = props if isinstance(props, dict) else {}
        required = node.get("required")
        for k in required if isinstance(required, list) else ():
            if isinstance(k, str) and k not in v:
                out.append((_pointer(path, k), "missing"))
        for k, sub in props.items():  # draft 3: a property's own `required: true`
            if isinstance(sub, dict) and sub.get("required") is True and k not in v:
                out.append((_pointer(path, k), "missing"))
        for k, sub in props.items():
            if k in v:
                self.walk(sub, v[k], _pointer(path, k), out)
        patterns = node.get("patternProperties")
        patterns = list(patterns.items()) if isinstance(patterns, dict) else []
        for k in list(v):
            matched = k in props
            for source, sub in patterns:
                if _search(source, k):
                    matched = True
                    self.walk(sub, v[k], _pointer(path, k), out)
            if not matched and "additionalProperties" in node:
                if node["additionalProperties"] is False:
                    out.append((_pointer(path, k), "unknown field"))
                else:
                    self.walk(node["additionalProperties"], v[k], _pointer(path, k), out)
            if "propertyNames" in node and not self.ok(node["propertyNames"], k):
                out.append((_pointer(path, k), "invalid property name"))
        count = len(v)
        low: Any = node.get("minProperties")
        high: Any = node.get("maxProperties")
        if _is_bound(low) and count < low:
            out.append((path, f"expected at least {_num(low)} properties"))
        if _is_bound(high) and count > high:
            out.append((path, f"expected at most {_num(high)} properties"))
        dependencies: dict[str, Any] = {}
        for key in ("dependentRequired", "dependencies"):
            if isinstance(node.get(key), dict):
                dependencies.update(node[key])
        for k, needs in dependencies.items():
            if k not in v:
                continue
            if not isinstance(needs, list):
                self.walk(needs, v, path, out)
                continue
            for r in needs:
                if r not in v:
                    out.append((_pointer(path, r), f"required when {k} is present"))
        if isinstance(node.get("dependentSchemas"), dict):
            for k, sub in node["dependentSchemas"].items():
                if k in v:
                    self.walk(sub, v, path, out)

    def array(self, node: dict[str, Any], v: list[Any], path: str, out: list[_Error]) -> None:
        items = node.get("items")
        if isinstance(items, list):
            prefix, rest = items, node.get("additionalItems")
        else:
            found = node.get("prefixItems")
            prefix = found if isinstance(found, list) else []
            rest = items
        for i, item in enumerate(v):
            sub = prefix[i] if i < len(prefix) else rest
            if sub is not None:
                self.walk(sub, item, f"{path}/{i}", out)
        low: Any = node.get("minItems")
        high: Any = node.get("maxItems")
        if _is_bound(low) and len(v) < low:
            out.append((path, f"expected at least {_num(low)} items"))
        if _is_bound(high) and len(v) > high:
            out.append((path, f"expected at most {_num(high)} items"))
        if node.get("uniqueItems") is True and any(
                _deep_equal(v[i], v[j]) for i in range(1, len(v)) for j in range(i)):
            out.append((path, "expected unique items"))
        if "contains" in node:
            least: Any = node.get("minContains")
            least = least if _is_bound(least) else 1
            most: Any = node.get("maxContains")
            most = most if _is_bound(most) else math.inf
            found = sum(1 for item in v if self.ok(node["contains"], item))
            if not least <= found <= most:
                out.append((path, _contains_message(least, most)))

    def union(self, branches: list[Any], v: Any, path: str, out: list[_Error],
              exactly_one: bool) -> None:
        matches = sum(1 for s in branches if self.ok(s, v))
        if matches == 1 or (not exactly_one and matches > 0):
            return
        if matches > 1:
            out.append((path, "matches more than one alternative"))
            return
        resolved = [self.resolved(s) for s in branches]
        tag = _tag_of(resolved)
        if tag is not None and isinstance(v, dict):
            key, values = tag
            at = next((i for i, x in enumerate(values)
                       if key in v and js_strict_equal(x, v[key])), -1)
            if at < 0:
                out.append((_pointer(path, key), f"expected one of {_list_values(values)}"))
            else:
                self.walk(branches[at], v, path, out)
            return
        best: tuple[list[_Error], int] | None = None
        for s, node in zip(branches, resolved, strict=True):
            errors: list[_Error] = []
            self.walk(s, v, path, errors)
            if not errors:
                continue
            declared = 0
            if isinstance(v, dict) and isinstance(node, dict) \
                    and isinstance(node.get("properties"), dict):
                declared = sum(1 for k in v if k in node["properties"])
            if best is None or declared > best[1] or (
                    declared == best[1] and len(errors[0][0]) > len(best[0][0][0])):
                best = (errors, declared)
        out.extend(best[0] if best is not None else [(path, "matches no alternative")])

    def resolved(self, node: Any) -> Any:
        if isinstance(node, dict) and isinstance(node.get("$ref"), str):
            return resolve_local(self.root, node["$ref"])
        return node


def _tag_of(resolved: list[Any]) -> tuple[str, list[Any]] | None:
    first = resolved[0] if resolved else None
    if not isinstance(first, dict) or not isinstance(first.get("properties"), dict):
        return None
    for key in first["properties"]:
        values = []
        for node in resolved:
            props = node.get("properties") if isinstance(node, dict) else None
            tag = props.get(key) if isinstance(props, dict) else None
            values.append(tag["const"] if isinstance(tag, dict) and "const" in tag else None)
        present = all(isinstance(node, dict) and isinstance(node.get("properties"), dict)
                      and isinstance(node["properties"].get(key), dict)
                      and "const" in node["properties"][key] for node in resolved)
        primitive = all(not isinstance(x, (dict, list)) for x in values)
        distinct = all(not js_strict_equal(values[i], values[j])
                       for i in range(len(values)) for j in range(i))
        if present and primitive and distinct:
            return key, values
    return None


def _contains_message(least: Any, most: Any) -> str:
    if most == math.inf:
        return f"expected at least {_num(least)} matching {'item' if least == 1 else 'items'}"
    if least == 0:
        return f"expected at most {_num(most)} matching {'item' if most == 1 else 'items'}"
    return f"expected between {_num(least)} and {_num(most)} matching items"


def _dotted(pointer: str) -> str:
    if pointer == "":
        return "root"
    return ".".join(part.replace("~1", "/").replace("~0", "~")
                    for part in pointer[1:].split("/"))


def explain(root: Any, value: Any, ok: Ok, format_ok: FormatOk) -> list[tuple[str, str]]:
    """The ``(path, message)`` lines pi-ai 1.6.1 lists for ``value`` failing ``root``."""
    out: list[_Error] = []
    _Walk(root, ok, format_ok).walk(root, value, "", out)
    if not out:
        out.append(("", "invalid"))
    return [(_dotted(p), m) for p, m in out]
