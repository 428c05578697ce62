"""JavaScript's value rules the argument coercion and error text need: ``Number(text)``,
``String(n)``, pi-schema's primitive coercion by type (``coercePrimitive``), the JSON type
tests, and ``clone`` (a deep copy of the JSON containers)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

__all__ = [
    "EXACT_TYPES", "JS_SPACE", "TYPE_TESTS", "Check", "clone", "coerce_primitive", "is_number",
    "js_number", "parse_js_number", "schema_list",
]

Check = Callable[[Any], bool]

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


def parse_js_number(text: str) -> int | float | None:
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
            parsed = parse_js_number(value)
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
