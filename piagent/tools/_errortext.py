"""The validation errors pi-ai 1.4.0 reports, and its error text for the model.

pi-ai validates with TypeBox (``typebox/compile``) and lists ``validator.Errors(args)`` as
``  - <path>: <message>``. ``typebox_errors`` walks a schema as TypeBox's ``ErrorSchema``
does (the same keywords in the same order, at most 8 errors per context, the branches of
``anyOf``/``oneOf``/``allOf`` reported before the keyword's own error) and words each error
as TypeBox's ``en_US`` locale; the path is pi-ai's ``formatValidationPath`` (instance path
with dots, a missing property appended to ``required``'s path, ``root`` for the top).
It runs only for arguments already known to be invalid; whether they are is ``jsonschema``'s
answer.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

from ._coerce import _JS_TYPE_TESTS, is_number, js_number, schema_list

__all__ = ["collect_errors", "format_error_text", "huge_integer_errors", "typebox_errors"]

_MAX_ERRORS = 8  # TypeBox's Settings.maxErrors
FormatTest = Callable[[str, Any], bool]
# (keyword, instance path as TypeBox writes it: "/a/0", params)
_Error = tuple[str, str, dict[str, Any]]


class _Context:
    """TypeBox's ErrorContext: the errors of one (sub-)validation, at most 8."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        self.errors: list[_Error] = []

    def full(self) -> bool:
        return len(self.errors) >= _MAX_ERRORS

    def add(self, keyword: str, path: str, **params: Any) -> bool:
        if not self.full():
            self.errors.append((keyword, path, params))
        return False

    def extend(self, other: _Context) -> None:
        for error in other.errors:
            if not self.full():
                self.errors.append(error)


def _js_keys(value: dict[str, Any]) -> list[str]:
    """The keys of a JavaScript object in its order: array indices first, ascending."""
    keys = list(value)
    index = [k for k in keys if isinstance(k, str) and k.isdigit() and (k == "0" or k[0] != "0")
             and int(k) < 4294967295]
    if not index:
        return keys
    rest = [k for k in keys if k not in set(index)]
    return sorted(index, key=int) + rest


def _js_equal(a: Any, b: Any) -> bool:
    """TypeBox's deep equality (``1`` equals ``1.0``, ``true`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if is_number(a) and is_number(b):
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_js_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_js_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _number_arg(schema: dict[str, Any], key: str) -> bool:
    return is_number(schema.get(key))


class _Walker:
    def __init__(self, root: Any, format_ok: FormatTest, draft3: bool) -> None:
        self.root = root
        self.format_ok = format_ok
        self.draft3 = draft3

    def schema(self, ctx: _Context, path: str, schema: Any, value: Any) -> bool:
        if ctx.full():
            return False
        if schema is True or schema is False:
            return schema or ctx.add("boolean", path)
        if not isinstance(schema, dict):
            return True
        ok = True
        if "type" in schema:
            ok &= self.type(ctx, path, schema, value)
        if isinstance(value, dict):
            ok &= self.object(ctx, path, schema, value)
        if isinstance(value, list):
            ok &= self.array(ctx, path, schema, value)
        if isinstance(value, str):
            ok &= self.string(ctx, path, schema, value)
        if is_number(value):
            ok &= self.number(ctx, path, schema, value)
        ok &= self.applicators(ctx, path, schema, value)
        return ok

    def valid(self, schema: Any, value: Any) -> bool:
        return self.schema(_Context(), "", schema, value)

    def type(self, ctx: _Context, path: str, schema: dict[str, Any], value: Any) -> bool:
        names = schema["type"]
        listed = names if isinstance(names, list) else [names]
        for t in listed:
            test = _JS_TYPE_TESTS.get(t)
            if test(value) if test is not None else t not in _KNOWN_TYPES:
                return True  # TypeBox: a type name it does not know matches anything
        return ctx.add("type", path, type=names)

    def object(self, ctx: _Context, path: str, schema: dict[str, Any],
               value: dict[str, Any]) -> bool:
        ok = True
        required = schema.get("required")
        if self.draft3:  # draft 3: `required: true` on the property itself
            props = schema.get("properties")
            required = [k for k, v in props.items() if isinstance(v, dict)
                        and v.get("required") is True] if isinstance(props, dict) else []
        if isinstance(required, list) and all(isinstance(k, str) for k in required):
            missing = [k for k in required if k not in value]
            if missing:
                ok = ctx.add("required", path, requiredProperties=missing)
        if "additionalProperties" in schema:
            ok &= self.additional_properties(ctx, path, schema, value)
        dependencies = schema.get("dependencies")
        for key, dep in (dependencies.items() if isinstance(dependencies, dict) and value else ()):
            if key in value and isinstance(dep, list):
                if any(name not in value for name in dep):
                    ok = ctx.add("dependencies", path, property=key, dependencies=dep)
            elif key in value:
                ok &= self.schema(ctx, path, dep, value)
        dependent = schema.get("dependentRequired")
        if isinstance(dependent, dict) and value:
            for key, names in dependent.items():
                if key in value:
                    for name in schema_list(names):
                        if name not in value:
                            ok = ctx.add("dependentRequired", path, property=key,
                                         dependencies=names)
        dependent_schemas = schema.get("dependentSchemas")
        if isinstance(dependent_schemas, dict) and value:
            for key, sub in dependent_schemas.items():
                if key in value:
                    ok &= self.schema(ctx, path, sub, value)
        patterns = schema.get("patternProperties")
        if isinstance(patterns, dict):
            for pattern, sub in patterns.items():
                regexp = re.compile(pattern)
                for key in _js_keys(value):
                    if regexp.search(key):
                        ok &= self.schema(ctx, f"{path}/{key}", sub, value[key])
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, sub in properties.items():
                if key in value:
                    ok &= self.schema(ctx, f"{path}/{key}", sub, value[key])
        names_schema = schema.get("propertyNames")
        if "propertyNames" in schema:
            bad = [k for k in _js_keys(value)
                   if not self.schema(ctx, f"{path}/{k}", names_schema, k)]
            if bad:
                ok = ctx.add("propertyNames", path, propertyNames=bad)
        for key, fewer in (("minProperties", True), ("maxProperties", False)):
            if _number_arg(schema, key):
                limit = schema[key]
                if (len(value) < limit) if fewer else (len(value) > limit):
                    ok = ctx.add(key, path, limit=limit)
        return ok

    def additional_properties(self, ctx: _Context, path: str, schema: dict[str, Any],
                              value: dict[str, Any]) -> bool:
        extra = schema["additionalProperties"]
        if extra is True or (isinstance(extra, dict) and not extra):
            return True
        props = schema.get("properties")
        known = set(props) if isinstance(props, dict) else set()
        patterns = schema.get("patternProperties")
        regexps = [re.compile(p) for p in patterns] if isinstance(patterns, dict) else []
        failed = False
        for key in _js_keys(value):
            if key in known or any(r.search(key) for r in regexps):
                continue
            if not self.schema(ctx, f"{path}/{key}", extra, value[key]):
                failed = True
        return not failed or ctx.add("additionalProperties", path)

    def array(self, ctx: _Context, path: str, schema: dict[str, Any], value: list[Any]) -> bool:
        ok = True
        items = schema.get("items")
        if "additionalItems" in schema and isinstance(items, list):
            for index in range(len(items), len(value)):
                if not self.schema(ctx, f"{path}/{index}", schema["additionalItems"],
                                   value[index]):
                    ok = False
                    break
        if "contains" in schema and schema.get("minContains") != 0 and not (
                value and any(self.valid(schema["contains"], v) for v in value)):
            ok = ctx.add("contains", path, minContains=1)
        if isinstance(items, list):
            for index, sub in enumerate(items[:len(value)]):
                ok &= self.schema(ctx, f"{path}/{index}", sub, value[index])
        elif isinstance(items, (dict, bool)):
            prefix = schema.get("prefixItems")
            offset = len(prefix) if isinstance(prefix, list) else 0
            for index in range(offset, len(value)):
                ok &= self.schema(ctx, f"{path}/{index}", items, value[index])
        if _number_arg(schema, "maxContains") and "contains" in schema:
            count = sum(1 for v in value if self.valid(schema["contains"], v))
            if count > schema["maxContains"]:
                ok = ctx.add("contains", path, minContains=schema.get("minContains", 1),
                             maxContains=schema["maxContains"])
        for key, fewer in (("maxItems", False), ("minItems", True)):
            if _number_arg(schema, key):
                limit = schema[key]
                if (len(value) < limit) if fewer else (len(value) > limit):
                    ok = ctx.add(key, path, limit=limit)
        prefix_items = schema.get("prefixItems")
        if isinstance(prefix_items, list) and value:
            for index, sub in enumerate(prefix_items[:len(value)]):
                ok &= self.schema(ctx, f"{path}/{index}", sub, value[index])
        if schema.get("uniqueItems", False) is not False:
            seen: list[Any] = []
            duplicates = []
            for index, v in enumerate(value):
                if any(_js_equal(v, s) for s in seen):
                    duplicates.append(index)
                else:
                    seen.append(v)
            if duplicates:
                ok = ctx.add("uniqueItems", path, duplicateItems=duplicates)
        return ok

    def string(self, ctx: _Context, path: str, schema: dict[str, Any], value: str) -> bool:
        ok = True
        if _number_arg(schema, "maxLength") and len(value) > schema["maxLength"]:
            ok = ctx.add("maxLength", path, limit=schema["maxLength"])
        if _number_arg(schema, "minLength") and len(value) < schema["minLength"]:
            ok = ctx.add("minLength", path, limit=schema["minLength"])
        fmt = schema.get("format")
        if isinstance(fmt, str) and not self.format_ok(fmt, value):
            ok = ctx.add("format", path, format=fmt)
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and not re.search(pattern, value):
            ok = ctx.add("pattern", path, pattern=pattern)
        return ok

    def number(self, ctx: _Context, path: str, schema: dict[str, Any], value: float) -> bool:
        ok = True
        for key, comparison, passes in _BOUNDS:
            if _number_arg(schema, key) and not passes(value, schema[key]):
                ok = ctx.add(key, path, comparison=comparison, limit=schema[key])
        divisor = schema.get("multipleOf")
        if is_number(divisor) and divisor and not _multiple_of(value, divisor):
            ok = ctx.add("multipleOf", path, multipleOf=divisor)
        return ok

    def applicators(self, ctx: _Context, path: str, schema: dict[str, Any], value: Any) -> bool:
        ok = True
        ref = schema.get("$ref")
        if isinstance(ref, str):
            sub = _Context()
            target = _resolve(self.root, ref)
            if not self.schema(sub, path, False if target is None else target, value):
                ctx.extend(sub)
                ok = False
        if "const" in schema and not _js_equal(value, schema["const"]):
            ok = ctx.add("const", path)
        if isinstance(schema.get("enum"), list) and not any(
                _js_equal(value, option) for option in schema["enum"]):
            ok = ctx.add("enum", path)
        if "if" in schema:
            if self.valid(schema["if"], value):
                if not self.schema(_Context(), path, schema.get("then", True), value):
                    ok = ctx.add("if", path, failingKeyword="then")
            elif not self.schema(ctx, path, schema.get("else", True), value):
                ok = ctx.add("if", path, failingKeyword="else")
        if "not" in schema and self.valid(schema["not"], value):
            ok = ctx.add("not", path)
        for keyword in ("allOf", "anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list):
                ok &= self.combine(ctx, path, keyword, branches, value)
        return ok

    def combine(self, ctx: _Context, path: str, keyword: str, branches: list[Any],
                value: Any) -> bool:
        failed: list[_Context] = []
        passed = 0
        for sub in branches:
            sub_ctx = _Context()
            if self.schema(sub_ctx, path, sub, value):
                passed += 1
            else:
                failed.append(sub_ctx)
        if keyword == "allOf":
            ok = not failed
        elif keyword == "anyOf":
            ok = passed > 0
        else:
            ok = passed == 1
        if not ok and (keyword != "oneOf" or passed == 0):
            for sub_ctx in failed:
                ctx.extend(sub_ctx)
        if ok or keyword == "allOf":
            return ok
        return ctx.add(keyword, path)


_KNOWN_TYPES = frozenset(("object", "array", "boolean", "integer", "number", "null", "string",
                          "bigint", "constructor", "function", "symbol", "undefined", "void"))
_BOUNDS: tuple[tuple[str, str, Callable[[Any, Any], bool]], ...] = (
    ("exclusiveMaximum", "<", lambda v, b: v < b),
    ("exclusiveMinimum", ">", lambda v, b: v > b),
    ("maximum", "<=", lambda v, b: v <= b),
    ("minimum", ">=", lambda v, b: v >= b),
)


def _multiple_of(value: float, divisor: float) -> bool:
    """TypeBox's ``IsMultipleOf`` (a tolerance of 1e-10)."""
    if isinstance(value, int) and isinstance(1 / divisor, float) and (1 / divisor) % 1 == 0:
        return True
    try:
        quotient = value / divisor
    except OverflowError:
        return False
    if not math.isfinite(quotient):
        return False
    return abs(quotient - round(quotient)) < 1e-10


def _resolve(root: Any, ref: str) -> Any:
    """The target of a local ``$ref`` (``#/$defs/X``), or ``None``."""
    node = root if ref == "#" or ref.startswith("#/") else None
    for raw in ref[2:].split("/") if ref.startswith("#/") else ():
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _message(keyword: str, params: dict[str, Any]) -> str:
    """TypeBox's ``en_US`` locale."""
    if keyword == "type":
        names = params["type"]
        return f"must be {names}" if isinstance(names, str) else \
            "must be either " + " or ".join(str(n) for n in names)
    if keyword == "required":
        return "must have required properties " + ", ".join(params["requiredProperties"])
    if keyword in ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum"):
        return f"must be {params['comparison']} {js_number(params['limit'])}"
    if keyword in _COUNTS:
        more_or_fewer, unit = _COUNTS[keyword]
        return f"must not have {more_or_fewer} than {js_number(params['limit'])} {unit}"
    if keyword == "multipleOf":
        return f"must be multiple of {js_number(params['multipleOf'])}"
    if keyword == "pattern":
        return f'must match pattern "{params["pattern"]}"'
    if keyword == "format":
        return f'must match format "{params["format"]}"'
    if keyword in ("dependencies", "dependentRequired"):
        return (f"must have properties {', '.join(map(str, params['dependencies']))} when "
                f"property {params['property']} is present")
    if keyword == "propertyNames":
        return f"property names {', '.join(params['propertyNames'])} are invalid"
    if keyword == "if":
        return f'must match "{params["failingKeyword"]}" schema'
    return _PLAIN.get(keyword, "an unknown validation error occurred")


_PLAIN = {
    "additionalProperties": "must not have additional properties",
    "anyOf": "must match a schema in anyOf",
    "boolean": "schema is false",
    "const": "must be equal to constant",
    "contains": "must contain at least 1 valid item",
    "enum": "must be equal to one of the allowed values",
    "not": "must not be valid",
    "oneOf": "must match exactly one schema in oneOf",
    "uniqueItems": "must not have duplicate items",
}
_COUNTS = {
    "minLength": ("fewer", "characters"),
    "maxLength": ("more", "characters"),
    "minItems": ("fewer", "items"),
    "maxItems": ("more", "items"),
    "minProperties": ("fewer", "properties"),
    "maxProperties": ("more", "properties"),
}


def _pi_path(keyword: str, path: str, params: dict[str, Any]) -> str:
    """pi-ai's ``formatValidationPath``."""
    base = path.removeprefix("/").replace("/", ".")
    if keyword == "required" and params["requiredProperties"]:
        first = params["requiredProperties"][0]
        return f"{base}.{first}" if base else first
    return base or "root"


def typebox_errors(root: Any, value: Any, format_ok: FormatTest, *,
                   draft3: bool = False) -> list[tuple[str, str]]:
    """The ``(path, message)`` lines pi-ai lists for ``value`` against ``root``."""
    ctx = _Context()
    _Walker(root, format_ok, draft3).schema(ctx, "", root, value)
    return [(_pi_path(k, p, params), _message(k, params)) for k, p, params in ctx.errors]


def huge_integer_errors(arguments: Any) -> list[tuple[str, str]]:
    """An error for every int in ``arguments`` with more digits than ``str()`` converts
    (``sys.get_int_max_str_digits``): jsonschema cannot even quote such a value."""
    limit = sys.get_int_max_str_digits()
    found: list[tuple[str, str]] = []
    todo: list[tuple[Any, str]] = [(arguments, "")]
    while todo and len(found) < 100:
        value, path = todo.pop()
        if isinstance(value, dict):
            todo.extend((v, f"{path}.{k}") for k, v in reversed(value.items()))
        elif isinstance(value, (list, tuple)):
            todo.extend((v, f"{path}.{i}") for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, int) and not isinstance(value, bool) and limit and \
                value.bit_length() > limit * 3.32:  # log2(10) bits per digit
            found.append((path.lstrip(".") or "root",
                          f"must not have more than {limit} digits"))
    return found


def collect_errors(error: ValidationError, out: list[tuple[str, str]]) -> None:
    """Append a ``jsonschema`` error in TypeBox's words (used only where the TypeBox walk
    found nothing: a keyword TypeBox does not know)."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        for sub in error.context:
            collect_errors(sub, out)
    path = ".".join(str(p) for p in error.absolute_path) or "root"
    out.append((path, error.message))


def _stringify(value: Any, indent: str = "") -> str:
    """``JSON.stringify(value, null, 2)`` (numbers as JavaScript writes them)."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = indent + "  "
        items = [f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {_stringify(v, inner)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        inner = indent + "  "
        return "[\n" + ",\n".join(inner + _stringify(v, inner) for v in value) + "\n" + indent + "]"
    if isinstance(value, float):
        return js_number(value) if math.isfinite(value) else "null"
    return json.dumps(value, ensure_ascii=False, default=str)


def _safe_repr(value: Any) -> str:
    """``repr(value)``, or a description when it cannot be written (too deep, an int with
    more digits than Python converts)."""
    try:
        return repr(value)
    except (ValueError, RecursionError) as exc:
        return f"<{type(value).__name__} that cannot be shown: {exc}>"


def format_error_text(tool_name: str, errors: list[tuple[str, str]], arguments: Any, *,
                      too_deep: bool = False) -> str:
    """pi's ``validateToolArguments`` message for ``errors`` on the original ``arguments``.

    ``too_deep``: the arguments are nested past the recursion limit; they are described, not
    written.
    """
    lines = "\n".join(f"  - {path}: {message}" for path, message in errors)
    if not lines:
        lines = "Unknown validation error"
    if too_deep:
        received = f"<{type(arguments).__name__} nested too deeply to show>"
    else:
        try:
            received = _stringify(arguments)
        except (TypeError, ValueError, RecursionError):
            received = _safe_repr(arguments)
    return f'Validation failed for tool "{tool_name}":\n{lines}\n\nReceived arguments:\n{received}'
