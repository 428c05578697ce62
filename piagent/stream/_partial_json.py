"""Best-effort parsing of tool-call arguments while they stream: pi-ai 1.4.0's
``parseStreamingJson``, step for step.

pi-ai tries ``JSON.parse``, then ``JSON.parse`` of the text after ``repairJson`` (invalid
escapes and raw control characters inside strings made valid), then the ``partial-json``
package (0.1.7) on the trimmed text. ``parse_streaming_json`` follows the same three steps and
reproduces ``partial-json``'s parser exactly, quirks included (an open string loses its
trailing spaces with the trimmed text; a number that ``JSON.parse`` rejects is retried up to
the text's last ``e``; a container that fails returns what it holds and its parent goes on
from there). Each step is linear and runs on C-speed scans (``json``'s decoder, regular
expressions), so parsing a growing buffer after every delta stays fast. It knows nothing of
providers or tools.
"""

from __future__ import annotations

import itertools
import json
import pickle
import re
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["parse_streaming_json"]

# JavaScript's String.prototype.trim white space; partial-json trims the text with it
_JS_SPACE = " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
            "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JSON_SPACE = " \t\n\r"
_BLANK = re.compile(r"[ \n\r\t]*")  # partial-json's skipBlank
# a string body as partial-json scans it: a backslash takes the next character with it
_STR_BODY = re.compile(r'[^"\\]*(?:\\[\s\S][^"\\]*)*')
_NUM_RUN = re.compile(r"[^,\]}]*")  # partial-json's number: everything up to , ] or }
_LITERALS: tuple[tuple[str, Any, int], ...] = (
    ("null", None, 0),
    ("true", True, 0),
    ("false", False, 0),
    ("Infinity", float("inf"), 0),
    ("-Infinity", float("-inf"), 1),  # partial-json: only with at least 2 characters left
    ("NaN", float("nan"), 0),
)
# repairJson: a run of string characters it copies as they are
_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_VALID_ESCAPES = frozenset('"\\/bfnrt')
_CONTROL_ESCAPES = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


# json's C string scanner: (text, index after the opening quote, strict) -> (value, end)
_scanstring: Callable[[str, int, bool], tuple[str, int]] = vars(json.decoder)["scanstring"]


class _Fail(Exception):
    """partial-json threw: the innermost open container returns what it holds, and its
    parent goes on from ``index``, where the library's shared index was at the throw."""

    def __init__(self, index: int, local: bool = True) -> None:
        super().__init__(index)
        self.index = index
        self.local = local  # False: the failure depended on text after the value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # JSON.parse rejects NaN and Infinity


def _int_or_float(text: str) -> int | float:
    """An integer with more digits than ``int()`` converts becomes a float, as JavaScript
    reads any integer."""
    try:
        return int(text)
    except ValueError:
        return float(text)


# JSON.parse: strict strings, no NaN/Infinity (one decoder each: json.loads with options
# would build a new decoder on every call)
_STRICT = json.JSONDecoder(parse_constant=_no_constant)
_STRICT_BIG = json.JSONDecoder(parse_constant=_no_constant, parse_int=_int_or_float)


def _json_parse(text: str) -> Any:
    """JavaScript's ``JSON.parse``; raises ``ValueError`` (or ``RecursionError``)."""
    try:
        return _STRICT.decode(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        if "digits" not in str(exc):  # an integer longer than int() converts
            raise
        return _STRICT_BIG.decode(text)


def parse_streaming_json(text: str | None) -> dict[str, Any]:
    """Parse possibly incomplete JSON text into the best object available so far, as pi-ai's
    ``parseStreamingJson`` does.

    Complete JSON is parsed (after repairing invalid escapes and raw control characters in
    its strings, as pi-ai does). Otherwise: complete keys and values are kept, an open string
    is kept as far as it goes without its trailing white space (a dangling escape is cut), a
    truncated number is kept when it still parses (``-1.25e`` → ``-1.25``; ``3.`` drops the
    key), a truncated literal is completed (``tr`` → ``True``), a key without a value is
    dropped, and open objects and arrays are closed. Where pi-ai gets something other than an
    object (empty text, a top level that is not an object) the answer is ``{}``. Never
    raises.
    """
    try:
        if not isinstance(text, str):
            return {}
        trimmed = text.strip(_JS_SPACE)
        if not trimmed.startswith("{"):
            return {}  # pi-ai: {} for blank text; not an object for any other top level
        if text.rstrip(_JSON_SPACE).endswith("}"):  # JSON.parse can only succeed then
            value = _parse_complete(text)
            if value is not None:
                return value
        flat = _parse_flat(trimmed)
        return flat if flat is not None else _parse_partial(trimmed)
    except Exception:  # noqa: BLE001 - the contract is "never raises", for any input
        return {}


def _parse_complete(text: str) -> dict[str, Any] | None:
    """``parseJsonWithRepair``: ``JSON.parse``, then ``JSON.parse`` of the repaired text;
    ``None`` where both fail (pi-ai then uses partial-json)."""
    try:
        value = _json_parse(text)
    except json.JSONDecodeError as exc:
        # repairJson changes only string contents; where the first error is elsewhere, the
        # repaired text fails at the same place, so it is not built at all
        if not exc.msg.startswith("Invalid"):
            return None
        repaired = repair_json(text)
        if repaired == text:
            return None
        try:
            value = _json_parse(repaired)
        except (ValueError, RecursionError):
            return None
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else {}


def repair_json(text: str) -> str:
    """pi-ai's ``repairJson``: inside strings, raw control characters are escaped and a
    backslash that starts no valid escape is doubled."""
    out: list[str] = []
    n = len(text)
    i = 0
    while True:
        quote = text.find('"', i)
        if quote < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:quote + 1])
        i = quote + 1
        while True:  # inside a string
            j = _PLAIN.match(text, i).end()  # type: ignore[union-attr]  # matches ""
            out.append(text[i:j])
            i = j
            if i >= n:
                return "".join(out)
            c = text[i]
            if c == '"':
                out.append(c)
                i += 1
                break
            if c == "\\":
                following = text[i + 1:i + 2]
                if following == "u" and _HEX4.fullmatch(text, i + 2, i + 6):
                    out.append(text[i:i + 6])
                    i += 6
                elif following and following in _VALID_ESCAPES:
                    out.append(text[i:i + 2])
                    i += 2
                else:
                    out.append("\\\\")
                    i += 1
                continue
            out.append(_CONTROL_ESCAPES.get(c) or f"\\u{ord(c):04x}")
            i += 1


def _substring(s: str, start: int, end: int) -> str:
    """JavaScript's ``s.substring(start, end)`` (negative → 0, swapped when reversed)."""
    n = len(s)
    start = min(max(start, 0), n)
    end = min(max(end, 0), n)
    if start > end:
        start, end = end, start
    return s[start:end]


def _parse_partial(s: str) -> dict[str, Any]:
    """partial-json's ``parse(s)`` for a trimmed text that starts with ``{``.

    Iterative (partial-json recurses): each open container is a frame ``[container, key,
    null_prototype]`` (``__proto__`` set to ``null``: a later ``__proto__`` is an own key);
    a failure inside a container makes it return what it holds, and its parent continues
    from where the failure left the index, as the library's ``try``/``catch`` blocks do.

    A stream parses a growing text again after every delta, so the parse resumes from the
    last checkpoint this thread saved for a text that ``s`` continues (see ``_Checkpoint``).
    """
    n = len(s)
    resumed = _checkpoint_for(s)
    frames: list[list[Any]]
    if resumed is not None:
        frames, i = resumed
    else:
        frames, i = [[{}, None, False]], _BLANK.match(s, 1).end()  # type: ignore[union-attr]
    # where a checkpoint may be taken: what the frames held there (they only grow after it)
    mark: tuple[int, list[tuple[Any, int, Any, bool]]] | None = None
    exact = True  # False once a value depended on text after it (pi's lastIndexOf("e"))
    while True:
        if exact and i < n:
            mark = (i, [(f[0], len(f[0]), f[1], f[2]) for f in frames])
        frame = frames[-1]
        container = frame[0]
        is_object = isinstance(container, dict)
        try:
            if i < n and s[i] == ("}" if is_object else "]"):
                raise _Fail(i + 1)  # closed: the container returns, like a failure
            if is_object:
                i = _BLANK.match(s, i).end()  # type: ignore[union-attr]
                if i >= n:
                    raise _Fail(i)
                frame[1], i = _parse_string(s, i)
                i = _BLANK.match(s, i).end() + 1  # type: ignore[union-attr]  # the colon
            if i < n:
                i = _BLANK.match(s, i).end()  # type: ignore[union-attr]
            if i >= n:
                raise _Fail(i)  # "Unexpected end of input"
            c = s[i]
            if c == "{":
                frames.append([{}, None, False])
                i = _BLANK.match(s, i + 1).end()  # type: ignore[union-attr]
                continue
            if c == "[":
                frames.append([[], None, False])
                i += 1
                continue
            value, i, local = _parse_atom(s, i)
            exact = exact and local
        except _Fail as failure:  # the container returns what it holds to its parent
            i = failure.index
            exact = exact and failure.local
            frames.pop()
            if not frames:
                if mark is not None:
                    _save_checkpoint(s, mark)
                return container  # type: ignore[no-any-return]  # the top level: a dict
            value = container
            frame = frames[-1]
        target = frame[0]
        if isinstance(target, dict):
            key = frame[1]
            if key == "__proto__" and not frame[2]:  # JavaScript sets the prototype
                frame[2] = value is None  # a null prototype: a later __proto__ is a key
            else:
                if key in target:  # a repeated key: what the mark saw is being changed
                    mark = None
                target[key] = value
        else:
            target.append(value)
        if i < n:
            i = _BLANK.match(s, i).end()  # type: ignore[union-attr]
            if i < n and s[i] == ",":
                i += 1


def _parse_atom(s: str, i: int) -> tuple[Any, int, bool]:
    """partial-json's ``parseAny`` for anything but a container, at a non-blank ``s[i]``;
    also whether the value depends on ``s[:index]`` alone."""
    if s[i] == '"':
        return (*_parse_string(s, i), True)
    rest = len(s) - i
    for word, value, at_least in _LITERALS:
        if s.startswith(word, i) or (at_least < rest < len(word) and word.startswith(s[i:])):
            return value, i + len(word), True
    return _parse_number(s, i)


def _parse_string(s: str, start: int) -> tuple[str, int]:
    """partial-json's ``parseStr`` from ``s[start]`` (the opening quote, or whatever is
    there: the library does not check)."""
    memo = _memo_for(s, start)
    if memo is not None:
        found = _continue_string(s, start, memo)
        if found is not None:
            return found
    n = len(s)
    end = _STR_BODY.match(s, start + 1).end()  # type: ignore[union-attr]  # matches ""
    if end < n and s[end] == '"':
        end += 1  # the library's index is past the quote when JSON.parse throws
        try:
            value = _json_parse(s[start:end])
        except (ValueError, RecursionError) as exc:
            raise _Fail(end) from exc
        return value, end
    dangling = end < n  # a lone backslash at the very end
    try:
        value = _json_parse(s[start:n - dangling] + '"')
    except (ValueError, RecursionError):  # an invalid or unfinished escape
        try:
            value = _json_parse(_substring(s, start, s.rfind("\\")) + '"')
        except (ValueError, RecursionError) as exc:
            raise _Fail(n) from exc
    else:
        _remember(s, start, n - dangling, value)
    end = n
    return value, end


# An open string that keeps growing (a file's content streamed into a tool call) is decoded
# once: each thread remembers the last long open strings it decoded (the literal's text up to
# an escape boundary and its value); a text that continues one of them decodes only what was
# added. Remembered per thread, so no lock; a memo is used only after its text is compared.
_MEMO_MIN = 2048  # shorter strings are cheap to decode again
_MEMO_SLOTS = 4  # parallel tool calls stream into one thread, interleaved
_memos = threading.local()
_Memo = tuple[int, str, str]  # (start in the trimmed text, literal text to a boundary, value)


def _memo_for(s: str, start: int) -> _Memo | None:
    for memo in getattr(_memos, "slots", ()):
        if memo[0] == start and s.startswith(memo[1], start):
            return memo  # type: ignore[no-any-return]
    return None


def _remember(s: str, start: int, cut: int, value: str) -> None:
    """Remember the open string ``s[start:cut]`` (it decoded to ``value``, so ``cut`` is an
    escape boundary) unless it is short or ends in half a surrogate pair that an escape
    after the cut could complete."""
    if cut - start < _MEMO_MIN or (value and "\ud800" <= value[-1] <= "\udbff"):
        return
    slots: list[_Memo] = getattr(_memos, "slots", [])
    slots = [m for m in slots if m[0] != start or not s.startswith(m[1], start)]
    _memos.slots = [(start, s[start:cut], value), *slots[:_MEMO_SLOTS - 1]]


def _continue_string(s: str, start: int, memo: _Memo) -> tuple[str, int] | None:
    """``_parse_string`` for a string whose beginning was decoded before; ``None`` where only
    the whole string can tell (an invalid or unfinished escape after the cut)."""
    _, text, known = memo
    n = len(s)
    cut = start + len(text)
    end = _STR_BODY.match(s, cut).end()  # type: ignore[union-attr]  # matches ""
    try:
        if end < n and s[end] == '"':
            rest, after = _scanstring(s, cut, True)
            return known + rest, after
        dangling = end < n
        rest, _ = _scanstring(s[cut:n - dangling] + '"', 0, True)
    except ValueError:
        return None
    value = known + rest
    _remember(s, start, n - dangling, value)
    return value, n


def _parse_number(s: str, start: int) -> tuple[Any, int, bool]:
    """partial-json's ``parseNum`` inside a container; also whether the value depends on
    ``s[:index]`` alone (not where JSON.parse fails and the text's last ``e`` decides)."""
    i = start + 1 if s[start] == "-" else start
    i = _NUM_RUN.match(s, i).end()  # type: ignore[union-attr]  # matches ""
    text = s[start:i]
    try:
        return _json_parse(text), i, True
    except (ValueError, RecursionError):
        if text == "-":
            raise _Fail(i) from None
    try:
        return _json_parse(_substring(s, start, s.rfind("e"))), i, False
    except (ValueError, RecursionError) as exc:
        raise _Fail(i, local=False) from exc


# Checkpoints: where partial-json's state (the open containers and the index) depends on the
# text before the index alone, a parse of a longer text that starts with the same text
# reaches the same state. Each thread keeps the last few: the text to the checkpoint, the
# index, and the open containers as they were there, pickled (copied at C speed: the result
# handed to the caller is always a fresh object).
_CHECKPOINT_MIN = 1024  # shorter texts are cheap to parse again
_Checkpoint = tuple[str, int, bytes]


def _checkpoint_for(s: str) -> tuple[list[list[Any]], int] | None:
    for text, index, frames in getattr(_memos, "points", ()):
        if s.startswith(text):
            return pickle.loads(frames), index
    return None


def _save_checkpoint(s: str, mark: tuple[int, list[tuple[Any, int, Any, bool]]]) -> None:
    index, frames = mark
    if index < _CHECKPOINT_MIN:
        return
    copies: list[list[Any]] = []
    for container, size, key, protoless in frames:
        if isinstance(container, dict):
            copies.append([dict(itertools.islice(container.items(), size)), key, protoless])
        else:
            copies.append([container[:size], key, protoless])
    text = s[:index]
    points: list[_Checkpoint] = getattr(_memos, "points", [])
    points = [p for p in points if not text.startswith(p[0])]
    _memos.points = [(text, index, pickle.dumps(copies, pickle.HIGHEST_PROTOCOL)),
                     *points[:_MEMO_SLOTS - 1]]


# The fast path for the usual truncated arguments: a flat object whose values are strings
# without escapes or control characters, numbers and literals. _FLAT_HEAD: "{" and the
# complete pairs after it, each with its comma; _FLAT_TAIL: the rest, nothing or one pair as
# far as it goes (a partial key, a key without a value, an escape-free string or an integer).
_S = r"[ \t\n\r]*"
_CHARS = r'[^"\\\x00-\x1f]*'
_INT = r"-?(?:0|[1-9][0-9]{0,17})"  # short enough that int() and JSON.parse agree
_FLAT_HEAD = re.compile(
    rf'\{{(?:{_S}"{_CHARS}"{_S}:{_S}'
    rf'(?:"{_CHARS}"|{_INT}(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null){_S},)*')
_FLAT_TAIL = re.compile(
    rf'{_S}(?:"({_CHARS})(?:"{_S}(?::{_S}(?:(")({_CHARS})"?|({_INT}))?)?)?)?')


def _parse_flat(s: str) -> dict[str, Any] | None:
    """``_parse_partial(s)`` for a trimmed, truncated flat object (see ``_FLAT_HEAD``);
    ``None`` for any other text."""
    head = _FLAT_HEAD.match(s)
    if head is None:
        return None
    end = head.end()
    tail = _FLAT_TAIL.fullmatch(s, end)
    if tail is None:
        return None
    if s[end - 1] == ",":
        value: dict[str, Any] = _STRICT.decode(s[:end - 1] + "}")
        if "__proto__" in value:  # JavaScript's prototype rules: the general parser
            return None
    else:
        value = {}  # just "{"
    key, quote, string, number = tail.groups()
    if key == "__proto__":
        return None
    if quote is not None:
        value[key] = string
    elif number is not None:
        value[key] = int(number)
    return value
