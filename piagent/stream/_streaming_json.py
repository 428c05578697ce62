"""``StreamingJsonParser``: tool-call arguments parsed as they stream, each piece read once.

pi-ai 1.6.1's ``StreamingJsonParser`` (``utils/streaming-json.js``), rule for rule: an open
string shows what it holds so far (an escape is held back until complete; trailing white
space kept), an open container the members read so far, a member whose value has not started
is left out, an open literal shows once it is a prefix of ``true``/``false``/``null``, an
open number once its digits form one (an exponent without digits is ignored). Malformed text
is read leniently: raw control characters are kept, an invalid escape stays literal text,
missing commas and colons are tolerated, values in invalid positions, unknown words, ``NaN``
and ``Infinity`` are dropped, text after the root value is ignored. Never raises.

The cost is linear in the text: ``append`` reads each piece once, and a ``snapshot`` copies
only the open containers, paid for by copy credit that each ``append`` earns (pi's rule: a
document that keeps a container of thousands of members open shows a value that lags a
little behind the text). Python strings are not ropes, so the text of an open string is kept
as a list of pieces and joined only when the value is read (``Snapshot.value``): streaming a
large file's content costs nothing per piece until someone looks. The final value of a
finished text is not this parser's business: the caller parses the whole text once.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["Snapshot", "StreamingJsonParser"]

_CREDIT_PER_APPEND = 256
_CREDIT_PER_CHARACTER = 8
_MAX_PENDING_SCALAR = 64  # a longer open number or word shows only once it ends
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NUMBER_NO_EXP_DIGITS = re.compile(r"(-?(?:0|[1-9]\d*)(?:\.\d+)?)[eE][+-]?")
_LITERALS: tuple[tuple[str, Any], ...] = (("true", True), ("false", False), ("null", None))
_DELIMITERS = frozenset(' \t\n\r,:{}[]"')
_SCALAR_RUN = re.compile(r'[^ \t\n\r,:{}\[\]"]*')
_STRING_RUN = re.compile(r'[^"\\]*')
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n",
                   "r": "\r", "t": "\t"}
_NOTHING: Any = object()  # JavaScript's undefined: no value yet
_UNBUILT: Any = object()  # a snapshot paid for (skip_snapshot) but not built
_SKIP_MAX_COST = 192  # below the credit of one piece (256), with a margin
_ROOT = ("root", None)

# A slot: where a value goes, ("root", None), ("element", index) or ("member", key); None
# for a position that takes no value


class _Text:
    """The text of an open string as it was at one snapshot: ``pieces[:count - 1]`` and
    ``last`` (the last piece may change later: a surrogate pair completed by an escape)."""

    __slots__ = ("count", "last", "pieces")

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.count = len(pieces)
        self.last = pieces[-1] if pieces else ""

    def join(self) -> str:
        if self.count <= 1:
            return self.last
        return "".join(self.pieces[:self.count - 1]) + self.last


class Snapshot:
    """One partial value: the copies of the open containers (outermost first) and where the
    open string goes; ``value`` joins that string in on the first read, then keeps it."""

    __slots__ = ("_built", "_copies", "_text", "_text_slot")

    def __init__(self, built: Any, copies: list[Any] | None = None, text: _Text | None = None,
                 text_slot: tuple[str, Any] | None = None) -> None:
        self._built = built
        self._copies = copies
        self._text = text
        self._text_slot = text_slot

    @property
    def is_object(self) -> bool:
        """The value is an object (a dict), without joining an open string."""
        slot = self._text_slot
        if self._text is not None and (slot is None or slot[0] == "root"):
            return False
        return isinstance(self._built, dict)

    @property
    def value(self) -> Any:
        """The partial value (``None`` for JSON null; see ``StreamingJsonParser.snapshot``)."""
        text = self._text
        if text is not None:
            self._text = None
            joined = text.join()
            slot = self._text_slot
            if slot is None or slot[0] == "root":
                self._built = joined
            else:
                _set_slot(self._copies[-1], slot, joined)  # type: ignore[index]
            self._copies = None
        return self._built


class _Frame:
    __slots__ = ("container", "key", "phase", "size", "slot")

    def __init__(self, container: Any, slot: tuple[str, Any] | None) -> None:
        self.container = container
        self.slot = slot
        self.size = 0
        self.key: str | None = None
        self.phase = "value" if isinstance(container, list) else "key"


class _OpenString:
    __slots__ = ("escape", "is_value", "pieces", "slot")

    def __init__(self, is_value: bool, slot: tuple[str, Any] | None) -> None:
        self.is_value = is_value
        self.slot = slot
        self.pieces: list[str] = []
        self.escape = ""


class StreamingJsonParser:
    """Incremental, tolerant JSON parser (pi-ai 1.6.1's); see the module docstring.

    Not thread-safe: one owner feeds it (the stream's worker thread)."""

    __slots__ = ("_credit", "_dirty", "_done", "_path_cost", "_root", "_scalar",
                 "_scalar_slot", "_skipped_pending", "_snapshot", "_stack", "_string")

    def __init__(self) -> None:
        self._root: Any = _NOTHING
        self._done = False
        self._stack: list[_Frame] = []
        self._string: _OpenString | None = None
        self._scalar = ""
        self._scalar_slot: tuple[str, Any] | None = None
        self._path_cost = 0  # the sum of size + 1 over the open path: what a snapshot copies
        self._credit = 0
        self._dirty = False
        self._snapshot: Any = None  # Snapshot | None | _UNBUILT
        self._skipped_pending: Any = _NOTHING  # the open scalar at the unbuilt snapshot

    def append(self, text: str) -> None:
        """Read the next piece of text; time linear in its length."""
        self._credit += _CREDIT_PER_APPEND + _CREDIT_PER_CHARACTER * len(text)
        index, n = 0, len(text)
        while index < n and not self._done:
            if self._string is not None:
                index = self._read_string(self._string, text, index)
            elif self._scalar:
                index = self._read_scalar(text, index)
            else:
                self._structural(text[index])
                index += 1

    def snapshot(self) -> Snapshot | None:
        """The value of the text read so far (``None`` before a value starts); the previous
        one while nothing changed or a fresh copy of the open path is not yet paid for."""
        if not self._dirty:
            if self._snapshot is _UNBUILT:  # paid for by skip_snapshot; the containers are as
                # they were then, and an open number or word that ended since (a dropped
                # word changes nothing else) shows as it did then
                self._snapshot = self._copy_open_path(self._skipped_pending)
            return self._snapshot  # type: ignore[no-any-return]
        pending = self._pending_scalar()
        cost = self._path_cost + (0 if pending is _NOTHING else 1)
        if cost > self._credit and self._snapshot is not _UNBUILT:
            return self._snapshot  # type: ignore[no-any-return]
        self._credit -= cost
        self._dirty = False
        self._snapshot = self._copy_open_path(pending)
        return self._snapshot  # type: ignore[no-any-return]

    def skip_snapshot(self) -> None:
        """Account for a snapshot nobody reads (pi-ai takes one after every piece): the
        credit is spent as for ``snapshot``, nothing is copied. A snapshot is taken for real
        once the open path is long; while it is short, the next one is always paid for (a
        piece earns more credit than it can add to the path), so none shows this one."""
        if not self._dirty:
            return
        pending = self._pending_scalar()
        cost = self._path_cost + (0 if pending is _NOTHING else 1)
        if cost > _SKIP_MAX_COST or cost > self._credit:
            self.snapshot()
            return
        self._credit -= cost
        self._dirty = False
        self._snapshot = _UNBUILT
        self._skipped_pending = pending

    # reading ----------------------------------------------------------------------------

    def _read_string(self, open_: _OpenString, text: str, index: int) -> int:
        n = len(text)
        while index < n:
            if open_.escape and self._continue_escape(open_, text[index]):
                index += 1
                continue
            # (a character that is not part of an escape is read as a string character)
            end = _STRING_RUN.match(text, index).end()  # type: ignore[union-attr]
            if end > index:
                self._append_string(open_, text[index:end])
            if end >= n:
                return n
            if text[end] == '"':
                self._end_string(open_)
                return end + 1
            open_.escape = "\\"
            index = end + 1
        return n

    def _read_scalar(self, text: str, start: int) -> int:
        end = _SCALAR_RUN.match(text, start).end()  # type: ignore[union-attr]
        if end > start:
            self._scalar += text[start:end]
            if self._scalar_slot is not None:
                self._dirty = True
        if end < len(text):
            self._end_scalar()
        return end

    def _structural(self, char: str) -> None:
        if char in " \t\n\r":
            return
        if char == '"':
            self._start_string()
        elif char == "{":
            self._open_container({})
        elif char == "[":
            self._open_container([])
        elif char in "}]":
            self._close_container()
        elif char == ":":
            frame = self._stack[-1] if self._stack else None
            if frame is not None and frame.phase == "colon" \
                    and not isinstance(frame.container, list):
                frame.phase = "value"
        elif char == ",":
            if self._stack:
                frame = self._stack[-1]
                frame.phase = "value" if isinstance(frame.container, list) else "key"
        else:
            self._scalar = char
            self._scalar_slot = self._value_slot()
            if self._scalar_slot is not None:
                self._dirty = True

    def _value_slot(self) -> tuple[str, Any] | None:
        if not self._stack:
            return _ROOT if self._root is _NOTHING else None
        frame = self._stack[-1]
        if isinstance(frame.container, list):
            return ("element", len(frame.container))
        if frame.phase in ("value", "colon") and frame.key is not None:  # `{"a" 1}` too
            return ("member", frame.key)
        return None

    def _start_string(self) -> None:
        frame = self._stack[-1] if self._stack else None
        if frame is not None and not isinstance(frame.container, list) \
                and frame.phase in ("key", "comma"):  # `{"a": 1 "b": 2}` too
            self._string = _OpenString(False, None)
            return
        slot = self._value_slot()
        self._string = _OpenString(True, slot)
        self._place(slot, "")

    def _continue_escape(self, open_: _OpenString, char: str) -> bool:
        """Continue an escape with ``char``; False when ``char`` is not part of it."""
        if open_.escape == "\\":
            decoded = _SIMPLE_ESCAPES.get(char)
            if decoded is not None:
                open_.escape = ""
                self._append_string(open_, decoded)
                return True
            if char == "u":
                open_.escape = "\\u"
                return True
            open_.escape = ""  # invalid: the backslash stays text, as repairJson does
            self._append_string(open_, "\\")
            return False
        if char in _HEX:
            open_.escape += char
            if len(open_.escape) < 6:
                return True
            decoded = chr(int(open_.escape[2:], 16))
            open_.escape = ""
            self._append_string(open_, decoded)
            return True
        literal = open_.escape  # `\u` without four hex digits: kept as text
        open_.escape = ""
        self._append_string(open_, literal)
        return False

    def _append_string(self, open_: _OpenString, text: str) -> None:
        pieces = open_.pieces
        if pieces and "\udc00" <= text[0] <= "\udfff" and "\ud800" <= pieces[-1][-1] <= "\udbff":
            # a JavaScript string holds the two halves side by side: one character
            last = pieces[-1]
            pair = (ord(last[-1]) - 0xD800) * 0x400 + ord(text[0]) - 0xDC00 + 0x10000
            pieces[-1] = last[:-1] + chr(pair)
            text = text[1:]
            if not text:
                if open_.is_value and open_.slot is not None:
                    self._dirty = True
                return
        pieces.append(text)
        if open_.is_value and open_.slot is not None:
            self._dirty = True  # the container's slot gets the joined text when it ends

    def _end_string(self, open_: _OpenString) -> None:
        self._string = None
        frame = self._stack[-1] if self._stack else None
        text = "".join(open_.pieces)
        if not open_.is_value:
            if frame is not None:
                frame.key = text
                frame.phase = "colon"
            return
        self._place(open_.slot, text)
        self._value_ended(frame)

    def _end_scalar(self) -> None:
        token, slot = self._scalar, self._scalar_slot
        self._scalar, self._scalar_slot = "", None
        value = _scalar_value(token)
        if value is not _NOTHING:
            self._place(slot, value)
        self._value_ended(self._stack[-1] if self._stack else None)

    def _pending_scalar(self) -> Any:
        slot, token = self._scalar_slot, self._scalar
        if slot is None or not token or len(token) > _MAX_PENDING_SCALAR:
            return _NOTHING
        value = _pending_scalar_value(token)
        return _NOTHING if value is _NOTHING else (slot, value)

    def _open_container(self, container: Any) -> None:
        slot = self._value_slot()
        self._place(slot, container)
        self._stack.append(_Frame(container, slot))
        self._path_cost += 1
        self._dirty = True

    def _close_container(self) -> None:
        if not self._stack:
            return  # a stray closer
        frame = self._stack.pop()
        self._path_cost -= frame.size + 1
        self._dirty = True
        self._value_ended(self._stack[-1] if self._stack else None)

    def _value_ended(self, frame: _Frame | None) -> None:
        if frame is None:
            if self._root is not _NOTHING:
                self._done = True  # text after the root value is ignored
            return
        frame.phase = "comma"

    def _place(self, slot: tuple[str, Any] | None, value: Any) -> None:
        """Set the value at ``slot`` in the open path; nothing for an invalid position."""
        if slot is None:
            return
        self._dirty = True
        kind, where = slot
        if kind == "root":
            self._root = value
            return
        frame = self._stack[-1]
        container = frame.container
        if kind == "element":
            if where == len(container):
                frame.size += 1
                self._path_cost += 1
                container.append(value)
            else:
                container[where] = value
            return
        if where not in container:
            frame.size += 1
            self._path_cost += 1
        container[where] = value

    def _copy_open_path(self, pending: Any) -> Snapshot:
        open_ = self._string
        text = None
        if open_ is not None and open_.is_value and open_.slot is not None:
            text = _Text(open_.pieces)
        if not self._stack:
            if pending is not _NOTHING and pending[0][0] == "root":
                return Snapshot(pending[1])
            if text is not None:
                return Snapshot(None, [], text, _ROOT)
            return Snapshot(None if self._root is _NOTHING else self._root)
        copies: list[Any] = []
        child: Any = _NOTHING
        child_slot: tuple[str, Any] | None = None
        top = len(self._stack) - 1
        for depth in range(top, -1, -1):
            frame = self._stack[depth]
            container = frame.container
            copy: Any = container.copy()
            if depth == top and pending is not _NOTHING:
                _set_slot(copy, pending[0], pending[1])
            if child is not _NOTHING and child_slot is not None:
                _set_slot(copy, child_slot, child)
            copies.append(copy)
            child, child_slot = copy, frame.slot
        built = child if child_slot is not None and child_slot[0] == "root" else (
            None if self._root is _NOTHING else self._root)
        if text is not None:
            return Snapshot(built, [copies[0]], text, open_.slot)  # type: ignore[union-attr]
        return Snapshot(built)


def _set_slot(container: Any, slot: tuple[str, Any], value: Any) -> None:
    kind, where = slot
    if kind == "element":
        if where == len(container):
            container.append(value)
        else:
            container[where] = value
    elif kind == "member":
        container[where] = value


def _scalar_value(token: str) -> Any:
    for word, value in _LITERALS:
        if token == word:
            return value
    return _number(token) if _NUMBER.fullmatch(token) else _NOTHING


def _pending_scalar_value(token: str) -> Any:
    for word, value in _LITERALS:
        if word.startswith(token):
            return value
    if _NUMBER.fullmatch(token):
        return _number(token)
    match = _NUMBER_NO_EXP_DIGITS.fullmatch(token)
    return _NOTHING if match is None else _number(match.group(1))


def _number(token: str) -> int | float:
    """The number as Python's ``json`` reads it (an integer stays exact, as in the final
    parse of the whole text)."""
    if "." in token or "e" in token or "E" in token:
        return float(token)
    try:
        return int(token)
    except ValueError:  # more digits than int() converts
        return float(token)
