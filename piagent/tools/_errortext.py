"""pi-ai's error text for the model: ``Validation failed for tool "<name>":``, one
``  - <path>: <message>`` line per error (``_explain``), then the received arguments as
``JSON.stringify(args, null, 2)`` writes them; and the errors of ints too long to convert."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from ._coerce import js_number

__all__ = ["format_error_text", "huge_integer_errors"]


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
