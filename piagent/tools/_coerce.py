"""AJV-style coercion (``coerceTypes: true``) compiled from a schema: a function that
deep-copies a model's arguments while coercing them to the schema's types."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

__all__ = ["EXACT_TYPES", "TYPE_TESTS", "Check", "Coercer", "CoercerBuilder", "clone", "is_number", "schema_list"]

Coercer = Callable[[Any], Any]
Check = Callable[[Any], bool]

_NO: Any = object()  # "this coercion does not apply"
_NUMERIC = re.compile(r"\s*-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\s*")
_INTEGER = re.compile(r"\s*-?[0-9]+\s*")


def clone(value: Any) -> Any:
    """Deep-copy the JSON containers of ``value`` (tuples become lists)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clone(v) for v in value]
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def _matches(value: Any, types: list[str] | None) -> bool:
    if types is None:
        return True
    for t in types:
        test = TYPE_TESTS.get(t)
        if test is None or test(value):
            return True
    return False


def _js_string(value: float) -> str:
    """A number as JavaScript's ``String(n)`` writes it (``1.0`` → ``"1"``)."""
    if isinstance(value, int):
        return str(value)  # may raise ValueError (too many digits): _to_string catches it
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def _to_number(value: Any, integer: bool) -> Any:
    if isinstance(value, bool):
        return int(value)
    if value is None:
        return 0
    if isinstance(value, float):
        # JSON "5.0" is an integer to JSON Schema; give Python code a real int
        return int(value) if integer and value.is_integer() else _NO
    if isinstance(value, str) and _NUMERIC.fullmatch(value):
        if _INTEGER.fullmatch(value):
            try:
                return int(value)
            except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
                return _NO  # not a finite number in JavaScript either: the schema reports it
        number = float(value)
        if integer:
            return int(number) if number.is_integer() else _NO
        return number
    return _NO


def _to_string(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if is_number(value):
        try:
            return _js_string(value)
        except ValueError:  # an int with more digits than str() converts
            return _NO
    if value is None:
        return ""
    return _NO


def _to_boolean(value: Any) -> Any:
    if value == "true" or (is_number(value) and value == 1):
        return True
    if value == "false" or (is_number(value) and value == 0) or value is None:
        return False
    return _NO


def _to_null(value: Any) -> Any:
    if value == "" or value is False or (is_number(value) and value == 0):
        return None
    return _NO


def _to_array(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)):
        return [value]
    return _NO


_COERCIONS: dict[str, Callable[[Any], Any]] = {
    "number": lambda v: _to_number(v, False),
    "integer": lambda v: _to_number(v, True),
    "string": _to_string,
    "boolean": _to_boolean,
    "null": _to_null,
    "array": _to_array,
}


def _coerce_scalar(value: Any, types: list[str]) -> Any:
    # AJV tries the schema's types in order and keeps the first coercion that works
    for t in types:
        coercion = _COERCIONS.get(t)
        if coercion is not None:
            result = coercion(value)
            if result is not _NO:
                return result
    return value


# the Python type of a JSON Schema type whose exact instances need no coercion or copy
EXACT_TYPES: dict[str, type] = {"integer": int, "string": str, "boolean": bool, "number": float}


def _type_test(types: list[str] | None) -> Check | None:
    """``_matches(value, types)`` as one test, or ``None`` where a mismatch coerces nothing
    (no types, an unknown type, which matches anything, or none with a coercion)."""
    if types is None or not any(t in _COERCIONS for t in types):
        return None
    if any(t not in TYPE_TESTS for t in types):
        return None
    if len(types) == 1:
        return TYPE_TESTS[types[0]]
    return lambda v: _matches(v, types)


def _types_of(schema: Any) -> list[str] | None:
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list) and all(isinstance(x, str) for x in t):
        return list(t)
    return None


def _resolve_pointer(root: Any, ref: str) -> Any:
    """The target of a local ``$ref`` (``#/$defs/X``), or ``None``."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


class CoercerBuilder:
    """Turns a schema into a function that deep-copies and coerces an instance."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, Coercer] = {}

    def build(self, schema: Any) -> Coercer:
        if not isinstance(schema, dict):
            return clone
        types = _types_of(schema)
        props = schema.get("properties")
        properties = {k: self.build(v) for k, v in props.items()} if isinstance(props, dict) else {}
        extra = schema.get("additionalProperties")
        additional = self.build(extra) if isinstance(extra, dict) else clone
        items, prefix = self._items(schema)
        all_of = [self.build(s) for s in schema_list(schema.get("allOf"))]
        any_of = [
            (self.build(s), _types_of(s))
            for key in ("anyOf", "oneOf")
            for s in schema_list(schema.get(key))
        ]
        ref = schema.get("$ref")
        ref_coercer = self._ref(ref) if isinstance(ref, str) else None
        # None where the value needs no type coercion (no type, or none that coerces)
        test = _type_test(types)
        wanted = types or []
        plain = not all_of and not any_of and ref_coercer is None

        if plain and not properties and additional is clone and items is clone and not prefix:
            if test is None:
                return clone

            exact = EXACT_TYPES.get(wanted[0]) if len(wanted) == 1 else None

            def coerce_leaf(value: Any) -> Any:  # the common leaf: a typed scalar
                if type(value) is exact:  # already the schema's type: nothing to do
                    return value
                if not test(value):
                    value = _coerce_scalar(value, wanted)
                return clone(value) if isinstance(value, (dict, list, tuple)) else value

            return coerce_leaf

        def coerce(value: Any) -> Any:
            if test is not None and not test(value):
                value = _coerce_scalar(value, wanted)
            if isinstance(value, dict):
                get = properties.get
                copy = {}
                for k, v in value.items():
                    copy[k] = get(k, additional)(v)
                value = copy
            elif isinstance(value, (list, tuple)):
                n = len(prefix)
                value = [(prefix[i] if i < n else items)(v) for i, v in enumerate(value)]
            if plain:
                return value
            for c in all_of:
                value = c(value)
            if any_of:
                value = _coerce_any_of(value, any_of)
            if ref_coercer is not None:
                value = ref_coercer(value)
            return value

        return coerce

    def _items(self, schema: dict[str, Any]) -> tuple[Coercer, list[Coercer]]:
        items = schema.get("items")
        prefix_items = schema.get("prefixItems")
        if isinstance(items, list):  # draft 7 tuple form
            rest = schema.get("additionalItems")
            return (
                self.build(rest) if isinstance(rest, dict) else clone,
                [self.build(s) for s in items],
            )
        prefix = [self.build(s) for s in schema_list(prefix_items)]
        return (self.build(items) if isinstance(items, dict) else clone), prefix

    def _ref(self, ref: str) -> Coercer:
        refs = self.refs

        def coerce_ref(value: Any) -> Any:
            # built lazily, so recursive schemas compile
            c = refs.get(ref)
            if c is None:
                c = refs[ref] = self.build(_resolve_pointer(self.root, ref))
            return c(value)

        return coerce_ref


def schema_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _coerce_any_of(value: Any, branches: list[tuple[Coercer, list[str] | None]]) -> Any:
    for coerce, types in branches:
        if _matches(value, types):
            return coerce(value)
    for coerce, types in branches:
        result = coerce(value)
        if _matches(result, types):
            return result
    return value


