"""pi-ai's argument coercion compiled from a schema: ``normalizeOptionalNulls`` then
``coerceWithJsonSchema`` (pi-ai 1.4.0, ``utils/validation.js``), as functions that leave the
model's arguments untouched and return a coerced deep copy."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

__all__ = [
    "EXACT_TYPES", "TYPE_TESTS", "Check", "Coercer", "CoercerBuilder", "Normalizer", "clone",
    "is_number", "js_number", "schema_list",
]

Coercer = Callable[[Any], Any]
Check = Callable[[Any], bool]
Normalizer = Callable[[Any], Any]
CheckFor = Callable[[Any], "Check | None"]  # a sub-schema's validity test; None: none known

# JavaScript's white space (String.prototype.trim, Number())
JS_SPACE = " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
           "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DIGITS = re.compile(r"[+-]?[0-9]+")
_RADIX = re.compile(r"0([xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")
_BASES = {"x": 16, "o": 8, "b": 2}


def clone(value: Any) -> Any:
    """Deep-copy the JSON containers of ``value`` (tuples become lists)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clone(v) for v in value]
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integral(value: Any) -> bool:
    """JavaScript's ``Number.isInteger``: ``5.0`` is an integer."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


TYPE_TESTS: dict[str, Check] = {
    "string": lambda v: isinstance(v, str),
    # exact ints only: 5.0 is an integer to JSON Schema, but coercion turns it into 5
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}

# pi-ai's matchesJsonType (an unknown type matches nothing)
_JS_TYPE_TESTS: dict[str, Check] = {**TYPE_TESTS, "integer": _is_integral}

# the Python type of a JSON Schema type whose exact instances need no coercion or copy
EXACT_TYPES: dict[str, type] = {"integer": int, "string": str, "boolean": bool, "number": float}


def js_number(value: float) -> str:
    """A number as JavaScript's ``String(n)`` writes it (``1.0`` → ``"1"``, ``1e21`` →
    ``"1e+21"``)."""
    if isinstance(value, int):
        return str(value)  # may raise ValueError (too many digits): callers catch it
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    sign, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    n = len(digit_tuple) + exponent  # value = 0.<digits> * 10**n
    k = len(digits)
    head = "-" if value < 0 else ""
    if k <= n <= 21:
        return head + digits + "0" * (n - k)
    if 0 < n <= 21:
        return head + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return head + "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{head}{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def _parse_js_number(text: str) -> int | float | None:
    """``Number(text)`` when it is finite (``None`` otherwise); integer syntax gives an int."""
    t = text.strip(JS_SPACE)
    if _DECIMAL.fullmatch(t):
        if _DIGITS.fullmatch(t):
            try:
                number = int(t)
            except ValueError:  # more digits than int() converts: past any double
                return None
            return number if number.bit_length() <= 1024 else None
        f = float(t)
        return f if math.isfinite(f) else None
    m = _RADIX.fullmatch(t)
    if m:
        return int(m.group(1)[1:], _BASES[m.group(1)[0].lower()])
    return None


def coerce_primitive(value: Any, kind: str) -> Any:
    """pi-ai's ``coercePrimitiveByType``: ``value`` itself when nothing applies."""
    if kind in ("number", "integer"):
        if value is None:
            return 0
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, str) and value.strip(JS_SPACE):
            parsed = _parse_js_number(value)
            if parsed is not None and (kind == "number" or _is_integral(parsed)):
                return int(parsed) if kind == "integer" else parsed
        return value
    if kind == "boolean":
        if value is None:
            return False
        if value == "true" or (is_number(value) and value == 1):
            return True
        if value == "false" or (is_number(value) and value == 0):
            return False
        return value
    if kind == "string":
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if is_number(value):
            try:
                return js_number(value)
            except ValueError:  # an int with more digits than str() converts
                return value
        return value
    if kind == "null":
        if value == "" or value is False or (is_number(value) and value == 0):
            return None
        return value
    return value


def _types_of(schema: Any) -> list[str]:
    t = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    return []


def schema_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _no_check(value: Any) -> bool:
    return False


class CoercerBuilder:
    """Turns a schema into pi-ai's coercion and optional-null normalisation.

    ``check_for(subschema)`` gives the validity test of a sub-schema on its own (pi-ai
    compiles one with TypeBox): the union branches and "does this property accept null".
    """

    def __init__(self, root: Any, check_for: CheckFor | None = None) -> None:
        self.root = root
        self.check_for: CheckFor = check_for or _default_check_for

    def _check(self, schema: Any) -> Check:
        try:
            return self.check_for(schema) or _no_check
        except Exception:  # noqa: BLE001 - pi: a sub-schema TypeBox cannot compile never passes
            return _no_check

    # coerceWithJsonSchema -----------------------------------------------------------------

    def build(self, schema: Any) -> Coercer:
        if not isinstance(schema, dict):
            return clone
        types = _types_of(schema)
        all_of = [self.build(s) for s in schema_list(schema.get("allOf"))]
        unions = [[(self.build(s), self._check(s)) for s in schema_list(schema.get(key))]
                  for key in ("anyOf", "oneOf") if isinstance(schema.get(key), list)]
        props: dict[str, Coercer] = {}
        additional: Coercer | None = None
        if "object" in types:
            properties = schema.get("properties")
            if isinstance(properties, dict):
                props = {k: self.build(v) for k, v in properties.items()}
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                additional = self.build(extra)
        items: Coercer | None = None
        tuple_items: list[Coercer] | None = None
        if "array" in types:
            raw_items = schema.get("items")
            if isinstance(raw_items, list):
                tuple_items = [self.build(s) for s in raw_items]
            elif isinstance(raw_items, dict):
                items = self.build(raw_items)
        coerce_type = _type_coercion(types)
        objects = "object" in types
        arrays = "array" in types

        if not all_of and not unions and not objects and not arrays:
            if coerce_type is None:
                return clone
            exact = EXACT_TYPES.get(types[0]) if len(types) == 1 else None

            def coerce_leaf(value: Any) -> Any:  # the common leaf: a typed scalar
                if type(value) is exact:  # already the schema's type: nothing to do
                    return value
                value = coerce_type(value)
                return clone(value) if isinstance(value, (dict, list, tuple)) else value

            return coerce_leaf

        def coerce(value: Any) -> Any:
            copied = False
            for c in all_of:
                value, copied = c(value), True
            for branches in unions:
                value, copied = _coerce_union(value, branches, copied)
            if coerce_type is not None:
                value = coerce_type(value)
            if objects and isinstance(value, dict):
                get = props.get
                fallback = additional or clone
                return {k: get(k, fallback)(v) for k, v in value.items()}
            if arrays and isinstance(value, (list, tuple)):
                if tuple_items is not None:
                    n = len(tuple_items)
                    return [(tuple_items[i] if i < n else clone)(v) for i, v in enumerate(value)]
                c = items or clone
                return [c(v) for v in value]
            return value if copied else clone(value)

        return coerce

    # normalizeOptionalNulls ---------------------------------------------------------------

    def normalizer(self, schema: Any) -> Normalizer | None:
        """A function returning ``value`` without the ``null`` of optional properties that do
        not accept ``null`` (copies only the containers it changes), or ``None`` when the
        schema has nothing to remove."""
        if not isinstance(schema, dict):
            return None
        raw_items = schema.get("items")
        array_step: Normalizer | None = None
        if isinstance(raw_items, list):
            prefix = [self.normalizer(s) for s in raw_items]
            if any(prefix):
                def array_step(value: Any) -> Any:
                    return _normalize_list(value, lambda i: prefix[i] if i < len(prefix) else None)
        elif raw_items:
            item = self.normalizer(raw_items)
            if item is not None:
                def array_step(value: Any) -> Any:
                    return _normalize_list(value, lambda i: item)
        steps: list[tuple[str, bool, Normalizer | None]] = []
        properties = schema.get("properties")
        if isinstance(properties, dict):
            required = schema.get("required")
            required_set = set(required) if isinstance(required, list) else set()
            for key, prop in properties.items():
                droppable = (key not in required_set
                             and not (isinstance(prop, dict) and isinstance(prop.get("$ref"), str))
                             and not self._accepts_null(prop))
                sub = self.normalizer(prop)
                if droppable or sub is not None:
                    steps.append((key, droppable, sub))
        if array_step is None and not steps:
            return None

        def normalize(value: Any) -> Any:
            if isinstance(value, list):
                return array_step(value) if array_step is not None else value
            if isinstance(value, dict) and steps:
                return _normalize_object(value, steps)
            return value

        return normalize

    def _accepts_null(self, schema: Any) -> bool:
        try:
            check = self.check_for(schema)
        except Exception:  # noqa: BLE001 - no validator: pi keeps the null
            return True
        return check is None or bool(check(None))


def _type_coercion(types: list[str]) -> Coercer | None:
    """The type step of ``coerceWithJsonSchema``, or ``None`` when there is none."""
    if not types:
        return None
    if len(types) == 1:
        kind = types[0]
        if kind not in ("number", "integer", "boolean", "string", "null"):
            return None
        if kind == "integer":
            def to_integer(value: Any) -> Any:
                value = coerce_primitive(value, kind)
                # 5.0 is an integer to JavaScript; Python code gets a real int
                return int(value) if isinstance(value, float) and value.is_integer() else value
            return to_integer
        return lambda value: coerce_primitive(value, kind)
    tests = [_JS_TYPE_TESTS.get(t, _no_check) for t in types]

    def to_one_of(value: Any) -> Any:
        for test in tests:
            if test(value):
                return value
        for kind in types:
            candidate = coerce_primitive(value, kind)
            if candidate is not value:
                return candidate
        return value

    return to_one_of


def _coerce_union(value: Any, branches: list[tuple[Coercer, Check]],
                  copied: bool) -> tuple[Any, bool]:
    for _, check in branches:
        if check(value):
            return value, copied
    for coerce, check in branches:
        candidate = coerce(value)
        if check(candidate):
            return candidate, True
    return value, copied


def _normalize_object(value: dict[str, Any],
                      steps: list[tuple[str, bool, Normalizer | None]]) -> dict[str, Any]:
    out = value
    for key, droppable, sub in steps:
        if key not in out:
            continue
        item = out[key]
        if item is None and droppable:
            if out is value:
                out = dict(value)
            del out[key]
        elif sub is not None:
            new = sub(item)
            if new is not item:
                if out is value:
                    out = dict(value)
                out[key] = new
    return out


def _normalize_list(value: list[Any], step_at: Callable[[int], Normalizer | None]) -> list[Any]:
    out = value
    for i, v in enumerate(value):
        step = step_at(i)
        if step is None:
            continue
        new = step(v)
        if new is not v:
            if out is value:
                out = list(value)
            out[i] = new
    return out


def _default_check_for(schema: Any) -> Check | None:
    import jsonschema

    if not isinstance(schema, (dict, bool)):
        return None
    return jsonschema.Draft7Validator(schema).is_valid
