"""Validation errors in AJV's words and order, and pi's error text for the model."""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

from ._coerce import is_number

__all__ = ["collect_errors", "format_error_text", "huge_integer_errors"]

def _pointer(path: Any) -> str:
    return "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _fmt(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return _safe_repr(value)


def _safe_repr(value: Any) -> str:
    """``repr(value)``, or a description when it cannot be written (too deep, an int with
    more digits than Python converts)."""
    try:
        return repr(value)
    except (ValueError, RecursionError) as exc:
        return f"<{type(value).__name__} that cannot be shown: {exc}>"


def huge_integer_errors(arguments: Any) -> list[tuple[str, str]]:
    """An error for every int in ``arguments`` with more digits than ``str()`` converts
    (``sys.get_int_max_str_digits``): jsonschema cannot even quote such a value."""
    limit = sys.get_int_max_str_digits()
    found: list[tuple[str, str]] = []
    todo: list[tuple[Any, str]] = [(arguments, "")]
    while todo and len(found) < 100:
        value, path = todo.pop()
        if isinstance(value, dict):
            todo.extend((v, f"{path}/{_pointer([k])}") for k, v in reversed(value.items()))
        elif isinstance(value, (list, tuple)):
            todo.extend((v, f"{path}/{i}") for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, int) and not isinstance(value, bool) and limit and \
                value.bit_length() > limit * 3.32:  # log2(10) bits per digit
            found.append((path.lstrip("/") or "root",
                          f"must NOT have more than {limit} digits"))
    return found


def collect_errors(error: ValidationError, out: list[tuple[str, str]]) -> None:
    """Append ``error`` as AJV ``allErrors`` would list it: branch errors first."""
    keyword = error.validator
    if keyword in ("anyOf", "oneOf") and error.context:
        for sub in error.context:
            collect_errors(sub, out)
    path = _pointer(error.absolute_path)
    if keyword == "required":
        missing = _missing_property(error)
        out.append((path or missing or "root", f"must have required property '{missing}'"))
    elif keyword == "additionalProperties" and error.validator_value is False:
        for name in _additional_properties(error):
            out.append((path or "root", f"must NOT have additional property '{name}'"))
    else:
        out.append((path or "root", _message(error)))


def _missing_property(error: ValidationError) -> str:
    # jsonschema's message is f"{name!r} is a required property"
    required: Any = error.validator_value
    instance: Any = error.instance
    # draft 3 marks a property itself `required: true`; the name is then in the message
    for name in required if isinstance(required, list) else ():
        if (
            isinstance(instance, dict)
            and name not in instance
            and error.message.startswith(repr(name))
        ):
            return str(name)
    return error.message.removesuffix(" is a required property").strip("'\"")


def _additional_properties(error: ValidationError) -> list[str]:
    schema = error.schema if isinstance(error.schema, dict) else {}
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    instance = error.instance if isinstance(error.instance, dict) else {}
    names = [
        str(k) for k in instance if k not in props and not any(re.search(p, k) for p in patterns)
    ]
    return names or ["?"]


_PLAIN = {
    "anyOf": "must match a schema in anyOf",
    "oneOf": "must match exactly one schema in oneOf",
    "not": "must NOT be valid",
    "uniqueItems": "must NOT have duplicate items",
    "contains": "must contain at least 1 valid item",
    "additionalItems": "must NOT have more items",
}
_COMPARE = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
_COUNTS = {
    "minLength": ("fewer", "characters"),
    "maxLength": ("more", "characters"),
    "minItems": ("fewer", "items"),
    "maxItems": ("more", "items"),
    "minProperties": ("fewer", "properties"),
    "maxProperties": ("more", "properties"),
}


def _message(error: ValidationError) -> str:
    keyword = error.validator
    arg: Any = error.validator_value
    if keyword == "type":
        names = [arg] if isinstance(arg, str) else list(arg)
        return "must be " + ",".join(str(n) for n in names)
    if keyword == "enum":
        return "must be equal to one of the allowed values: " + ", ".join(_fmt(x) for x in arg)
    if keyword == "const":
        return f"must be equal to constant {_fmt(arg)}"
    if keyword in _COMPARE and is_number(arg):
        return f"must be {_COMPARE[str(keyword)]} {_fmt(arg)}"
    if keyword in _COUNTS:
        more_or_fewer, unit = _COUNTS[str(keyword)]
        return f"must NOT have {more_or_fewer} than {arg} {unit}"
    if keyword == "pattern":
        return f'must match pattern "{arg}"'
    if keyword == "format":
        return f'must match format "{arg}"'
    if keyword == "multipleOf":
        return f"must be multiple of {_fmt(arg)}"
    if keyword in _PLAIN:
        return _PLAIN[str(keyword)]
    if keyword is None or error.schema is False:
        return "boolean schema is false"
    return error.message


def format_error_text(tool_name: str, errors: list[tuple[str, str]], arguments: Any, *,
                      too_deep: bool = False) -> str:
    """pi's ``validateToolArguments`` message for ``errors`` on the original ``arguments``.

    ``too_deep``: the arguments are nested past the recursion limit; they are described, not
    written (indented JSON is written by the pure-Python encoder, whose time grows with the
    square of the depth when the limit has been raised).
    """
    lines = "\n".join(f"  - {path}: {message}" for path, message in errors)
    if too_deep:
        received = f"<{type(arguments).__name__} nested too deeply to show>"
    else:
        try:
            received = json.dumps(arguments, indent=2, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            received = _safe_repr(arguments)
    return f'Validation failed for tool "{tool_name}":\n{lines}\n\nReceived arguments:\n{received}'
