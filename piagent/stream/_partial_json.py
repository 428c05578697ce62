"""Best-effort parsing of tool-call arguments while they stream (pi-ai ``parseStreamingJson``).

Owns ``parse_streaming_json``: a strict ``json.loads`` fast path, then a small tolerant
parser for truncated documents. It knows nothing of providers or tools.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["parse_streaming_json"]

_WS = re.compile(r"[ \t\n\r]*")
# Characters that can start or continue a JSON number, and the strict grammar of one.
_NUMBER_CHARS = re.compile(r"[-+0-9.eE]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
# A run of string characters up to the next quote or backslash (raw control characters are
# tolerated, as pi's repair step does for models that emit literal newlines).
_STR_CHUNK = re.compile(r'[^"\\]*')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
# What may follow a high surrogate at the end of the buffer: the start of its low half.
_PARTIAL_LOW = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_LITERALS: tuple[tuple[str, Any], ...] = (
    ("true", True),
    ("false", False),
    ("null", None),
    ("NaN", float("nan")),
    ("Infinity", float("inf")),
    ("-Infinity", float("-inf")),
)

# Parser states: what the next token may be.
_VALUE = 0  # any value
_VALUE_OR_CLOSE = 1  # a value or "]" (just after "[")
_KEY = 2  # a key (after "," in an object)
_KEY_OR_CLOSE = 3  # a key or "}" (just after "{")
_COLON = 4
_COMMA_OR_CLOSE = 5


class _Malformed(Exception):
    """The text is not a prefix of any JSON document."""


def _int_or_float(text: str) -> int | float:
    """A JSON integer; one with more digits than ``int()`` converts becomes a float
    (``inf`` past 1e308), as JavaScript's ``JSON.parse`` reads it, so the rest survives."""
    try:
        return int(text)
    except ValueError:
        return float(text)


# one decoder each: json.loads with options builds a new JSONDecoder on every call
_LENIENT = json.JSONDecoder(strict=False)
_LENIENT_BIG = json.JSONDecoder(strict=False, parse_int=_int_or_float)  # the rare retry


def parse_streaming_json(text: str | None) -> dict[str, Any]:
    """Parse possibly incomplete JSON text into the best object available so far.

    Complete keys and values are kept, a truncated string is kept as far as it goes (a
    dangling escape is cut), a truncated number is kept as far as it is valid, a truncated
    literal is completed (``tr`` → ``True``), a key without a value is dropped, and open
    objects and arrays are closed. Empty or whitespace-only text, text that is not a prefix
    of JSON, and a top level that is not an object all give ``{}``. Never raises.
    """
    try:
        if not isinstance(text, str) or not text or text.isspace():
            return {}
        if text.rstrip().endswith("}"):
            try:
                value = _LENIENT.decode(text)
            except ValueError as exc:
                if "digits" in str(exc):  # an integer longer than int() converts
                    try:
                        value = _LENIENT_BIG.decode(text)
                    except (ValueError, RecursionError):
                        pass
                    else:
                        return value if isinstance(value, dict) else {}
            except RecursionError:
                pass  # too deep for json: the partial parser decides
            else:
                return value if isinstance(value, dict) else {}
        value = _parse_flat(text)
        if value is None:
            value = _parse_prefix(text)
        return value if isinstance(value, dict) else {}
    except Exception:  # noqa: BLE001 - the contract is "never raises", for any input
        return {}


# The fast path for the usual truncated arguments: a flat object whose values are strings
# without escapes, numbers and literals. _FLAT_HEAD: "{" and the complete pairs after it,
# each with its comma; _FLAT_TAIL: the rest, nothing or one pair as far as it goes (a
# partial key, a key without a value, a truncated escape-free string or an integer).
_S = r"[ \t\n\r]*"
_INT = r"-?(?:0|[1-9][0-9]{0,17})"  # short enough that int() and json agree
_FLAT_HEAD = re.compile(
    rf'{_S}\{{(?:{_S}"[^"\\]*"{_S}:{_S}'
    rf'(?:"[^"\\]*"|{_INT}(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null){_S},)*')
_FLAT_TAIL = re.compile(
    rf'{_S}(?:"([^"\\]*)(?:"{_S}(?::{_S}(?:(")([^"\\]*)"?|({_INT}))?)?)?)?{_S}')


def _parse_flat(s: str) -> dict[str, Any] | None:
    """``_parse_prefix(s)`` for a truncated flat object (see ``_FLAT_HEAD``); ``None`` for
    any other text. Such a text has no ``}`` outside its strings: the object is still open."""
    head = _FLAT_HEAD.match(s)
    if head is None:
        return None
    end = head.end()
    tail = _FLAT_TAIL.fullmatch(s, end)
    if tail is None:
        return None
    if s[end - 1] == ",":
        value: dict[str, Any] = _LENIENT.decode(s[:end - 1] + "}")
    else:
        value = {}  # just "{"
    key, quote, string, number = tail.groups()
    if quote is not None:
        value[key] = string
    elif number is not None:
        value[key] = int(number)
    return value


def _parse_prefix(s: str) -> Any:
    """Parse a prefix of a JSON document; open containers are attached to their parent
    as soon as they open, so stopping anywhere leaves ``root`` holding the best value."""
    n = len(s)
    root: Any = None
    stack: list[Any] = []  # open containers, innermost last
    keys: list[str] = []  # pending key of each open object, innermost last
    state = _VALUE
    i = 0

    def attach(value: Any) -> None:
        nonlocal root
        if not stack:
            root = value
        elif isinstance(stack[-1], list):
            stack[-1].append(value)
        else:
            stack[-1][keys[-1]] = value

    while True:
        i = _WS.match(s, i).end()  # type: ignore[union-attr]  # the pattern matches ""
        if i >= n:
            return root
        c = s[i]
        if state == _COMMA_OR_CLOSE:
            top = stack[-1]
            if c == ",":
                state = _VALUE if isinstance(top, list) else _KEY
                i += 1
                continue
            if c == ("]" if isinstance(top, list) else "}"):
                stack.pop()
                if isinstance(top, dict):
                    keys.pop()
                if not stack:
                    return root  # complete; anything after it is ignored
                i += 1
                continue
            raise _Malformed
        if state in (_KEY, _KEY_OR_CLOSE):
            if c == "}" and state == _KEY_OR_CLOSE:
                stack.pop()
                keys.pop()
                if not stack:
                    return root
                state = _COMMA_OR_CLOSE
                i += 1
                continue
            if c != '"':
                raise _Malformed
            key, i, complete = _scan_string(s, i + 1)
            if not complete:
                return root  # a truncated key is dropped
            keys[-1] = key
            state = _COLON
            continue
        if state == _COLON:
            if c != ":":
                raise _Malformed
            state = _VALUE
            i += 1
            continue
        # _VALUE or _VALUE_OR_CLOSE
        if c == "]" and state == _VALUE_OR_CLOSE:
            stack.pop()
            if not stack:
                return root
            state = _COMMA_OR_CLOSE
            i += 1
            continue
        if c == "{":
            container: Any = {}
            attach(container)
            stack.append(container)
            keys.append("")
            state = _KEY_OR_CLOSE
            i += 1
            continue
        if c == "[":
            container = []
            attach(container)
            stack.append(container)
            state = _VALUE_OR_CLOSE
            i += 1
            continue
        if c == '"':
            string, i, complete = _scan_string(s, i + 1)
            attach(string)
            if not complete:
                return root
        elif c == "-" or "0" <= c <= "9":
            if s.startswith("-I", i):
                value, i, complete = _scan_literal(s, i)
                attach(value)
                if not complete:
                    return root
            else:
                found, value, i = _scan_number(s, i)
                if found:
                    attach(value)
                if i >= n:
                    return root
        else:
            value, i, complete = _scan_literal(s, i)
            attach(value)
            if not complete:
                return root
        if not stack:
            return root
        state = _COMMA_OR_CLOSE


def _scan_string(s: str, i: int) -> tuple[str, int, bool]:
    """Scan a string body starting after its opening quote.

    Returns the decoded text, the index after the closing quote (or ``len(s)``) and
    whether the closing quote was seen. A truncated escape is cut off.
    """
    n = len(s)
    parts: list[str] = []
    while True:
        j = _STR_CHUNK.match(s, i).end()  # type: ignore[union-attr]
        if j > i:
            parts.append(s[i:j])
        if j >= n:
            return "".join(parts), n, False
        if s[j] == '"':
            return "".join(parts), j + 1, True
        # a backslash
        if j + 1 >= n:
            return "".join(parts), n, False
        e = s[j + 1]
        simple = _ESCAPES.get(e)
        if simple is not None:
            parts.append(simple)
            i = j + 2
            continue
        if e != "u":
            raise _Malformed
        digits = s[j + 2 : j + 6]
        if len(digits) < 4:
            if not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise _Malformed
            return "".join(parts), n, False
        if not _HEX4.fullmatch(digits):
            raise _Malformed
        code = int(digits, 16)
        i = j + 6
        if 0xD800 <= code < 0xDC00:
            low = s[i + 2 : i + 6]
            if s.startswith("\\u", i) and _HEX4.fullmatch(low):
                low_code = int(low, 16)
                if 0xDC00 <= low_code < 0xE000:
                    code = 0x10000 + ((code - 0xD800) << 10) + (low_code - 0xDC00)
                    i += 6
            elif n - i < 6 and (i == n or _PARTIAL_LOW.fullmatch(s, i)):
                # the low half may still arrive: do not show half a character yet
                return "".join(parts), n, False
        parts.append(chr(code))


def _scan_number(s: str, i: int) -> tuple[bool, Any, int]:
    """Scan a number; at the end of the text keep its longest valid prefix.

    Returns whether a value was found, the value, and the index after the number.
    """
    n = len(s)
    loose_end = _NUMBER_CHARS.match(s, i).end()  # type: ignore[union-attr]
    m = _NUMBER.match(s, i)
    if m is None:
        if loose_end >= n:
            return False, None, n  # a lone "-": nothing usable yet
        raise _Malformed
    if m.end() != loose_end and loose_end < n:
        raise _Malformed
    text = m.group()
    value: Any = float(text) if m.group(1) or m.group(2) else _int_or_float(text)
    return True, value, (n if loose_end >= n else m.end())


def _scan_literal(s: str, i: int) -> tuple[Any, int, bool]:
    """Scan ``true``/``false``/``null`` (and the ``NaN``/``Infinity`` that ``json`` accepts);
    a truncated literal at the end of the text is completed."""
    rest = len(s) - i
    for word, value in _LITERALS:
        if s.startswith(word, i):
            return value, i + len(word), True
        if rest < len(word) and word.startswith(s[i:]):
            return value, len(s), False
    raise _Malformed
