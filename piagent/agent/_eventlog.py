"""``EventLog``: the events a run keeps for ``AgentRun.events()``, in one flat list.

A run keeps every event until it is dropped, and with a thousand runs in one process the
garbage collector's walks over those objects were most of what piagent cost over a bare
loop. So the log makes no object of its own per event:

* An event of one of piagent's classes (``piagent.events``) is kept as its class's code
  followed by its field values, appended to one list; a second list holds where each
  event's values end. The values are the objects the event held (the message, the tool
  result), no copies; only the event object itself is not kept.
* A ``message_update`` (dozens a turn) whose message copy holds the very same field values
  (each the same object) as the update kept whole before it, and whose assistant event (a
  text, thinking or tool-call start, delta or end) has that update's partial message, is
  kept as ``kind, where that update is, the assistant event's other fields``: for a delta,
  ints and a string. Read back, its ``message`` is that update's copy (equal, field by
  field, to its own). An update kept whole is kept as its copy, its kind, its partial
  message and its other fields: its assistant event is not kept either.
* Anything else (a subclass, say) is kept as it is.

Read back, an event is made again from its values: equal to the one the listeners got,
holding the same objects, but not the same event object.

Thread safety: the run's worker thread appends (values first, then their end); any thread
may read (``len``, an index, iteration) while it does.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any, get_args

from ..events import AgentEvent, MessageUpdateEvent
from ..messages import AssistantMessage
from ..stream import AssistantMessageEvent, DoneEvent, ErrorEvent, StartEvent

__all__ = ["EventLog"]


def _fields_of(kind: type[Any]) -> list[str]:
    return [f.name for f in fields(kind)]


# the assistant events an update carries (text, thinking, tool call: start, delta, end),
# deltas first: (content_index, delta, partial), the usual ones; their codes are 0, 1, ...
_UPDATE_KINDS = [kind for kind in get_args(AssistantMessageEvent)
                 if kind not in (StartEvent, DoneEvent, ErrorEvent)]
_KINDS: tuple[type[Any], ...] = tuple(sorted(
    _UPDATE_KINDS, key=lambda kind: _fields_of(kind) != ["content_index", "delta", "partial"]))
_KIND_OF = {kind: code for code, kind in enumerate(_KINDS)}
_DELTAS = sum(1 for kind in _KINDS if _fields_of(kind) == ["content_index", "delta", "partial"])


def _values_of(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """``obj -> (obj.<name>, ...)`` for ``names``, as a tuple whatever their number."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        only = operator.attrgetter(names[0])
        return lambda obj: (only(obj),)
    return operator.attrgetter(*names)


def _other_fields(kind: type[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of ``kind``'s fields but ``partial`` (its last), as a tuple."""
    names = _fields_of(kind)
    assert names[-1] == "partial", kind  # rebuilt as kind(*values, partial)
    return _values_of(names[:-1])


_OTHER_FIELDS = tuple(_other_fields(kind) for kind in _KINDS)  # by kind

# piagent's event classes, coded after the update kinds; then the code of an event kept whole
_CLASSES: tuple[type[Any], ...] = get_args(AgentEvent)
_FIRST_CLASS = len(_KINDS)
_WHOLE = _FIRST_CLASS + len(_CLASSES)
_UPDATE = _WHOLE + 1  # an update kept whole: its copy, kind, partial message, other fields


def _encoder(code: int, kind: type[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """``event -> (code, *its field values)`` for an event of ``kind``; ``kind(*values)``
    makes it again."""
    assert all(f.init for f in fields(kind)), kind
    values = _values_of(_fields_of(kind))
    return lambda event: (code, *values(event))


_ENCODE = {kind: _encoder(_FIRST_CLASS + index, kind) for index, kind in enumerate(_CLASSES)}
_NO_REF: Any = object()  # no update kept whole to compare with: no partial message is this


def _same_fields(a: AssistantMessage, b: AssistantMessage) -> bool:
    """Whether each field of ``a`` holds the very object that field of ``b`` holds.

    Every field of ``AssistantMessage``, written out (tests/agent/test_event_log.py checks
    the list against the dataclass): ``vars()`` would make CPython build a ``__dict__`` for
    the copy, one more object for the collector per update kept whole.
    """
    return (a.content is b.content and a.usage is b.usage and a.stop_reason is b.stop_reason
            and a.error_message is b.error_message and a.api is b.api
            and a.provider is b.provider and a.model is b.model
            and a.thinking_level is b.thinking_level and a.timestamp is b.timestamp
            and a.duration_ms is b.duration_ms and a.response_model is b.response_model
            and a.response_id is b.response_id
            and a.provider_thinking_level is b.provider_thinking_level
            and a.raw_stop_reason is b.raw_stop_reason and a.end_turn is b.end_turn
            and a.diagnostics is b.diagnostics and a.deferred is b.deferred
            and a.extra is b.extra)


class EventLog:
    """A run's events in order, kept as values in one flat list (above)."""

    __slots__ = ("_ends", "_flat", "_ref", "_ref_message", "_ref_partial")

    def __init__(self) -> None:
        # each event: its code, then its values; _ends[i] is where event i's values end
        # (appended after them, so a reader sees an event only once it is whole)
        self._flat: list[Any] = []
        self._ends: list[int] = []
        # the latest message_update kept whole (worker only): where it starts in _flat, its
        # assistant event's partial message, and its message copy
        self._ref = -1
        self._ref_partial: object = _NO_REF
        self._ref_message: Any = None

    def append(self, event: AgentEvent) -> None:
        """Keep an event: its class's code and its values, or (another class) the event."""
        encode = _ENCODE.get(type(event))
        flat = self._flat
        if encode is None:
            flat += (_WHOLE, event)
        else:
            flat += encode(event)
        self._ends.append(len(flat))

    def append_update(self, event: MessageUpdateEvent) -> None:
        """Keep a ``message_update`` (exactly that class: the caller has checked it; a
        subclass goes to ``append``): small if its message copy is like the last one kept
        whole (each field the very object it holds: an equal but distinct ``Usage``, say,
        could be changed later through the partial message and read back wrong)."""
        inner: Any = event.assistant_message_event  # one of _KINDS when kind is not None
        kind = _KIND_OF.get(type(inner))
        message = event.message
        flat = self._flat
        if kind is None or type(message) is not AssistantMessage:  # fields not known
            self._ref_partial = _NO_REF
            self.append(event)
            return
        if inner.partial is self._ref_partial and _same_fields(message, self._ref_message):
            if kind < _DELTAS:
                flat += (kind, self._ref, inner.content_index, inner.delta)
            else:
                flat += (kind, self._ref, *_OTHER_FIELDS[kind](inner))
        else:
            partial = inner.partial
            self._ref, self._ref_partial, self._ref_message = len(flat), partial, message
            flat += (_UPDATE, message, kind, partial, *_OTHER_FIELDS[kind](inner))
        self._ends.append(len(flat))

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: int) -> AgentEvent:
        ends = self._ends
        end = ends[index]  # IndexError as a list's
        if index < 0:
            index += len(ends)
        start = ends[index - 1] if index else 0
        flat = self._flat
        code = flat[start]
        if code < _FIRST_CLASS:  # an update kept small: kind, where its whole one is, values
            ref = flat[start + 1]
            return MessageUpdateEvent(flat[ref + 1], _KINDS[code](
                *flat[start + 2:end], flat[ref + 3]))
        if code == _UPDATE:  # copy, kind, partial, values
            return MessageUpdateEvent(flat[start + 1], _KINDS[flat[start + 2]](
                *flat[start + 4:end], flat[start + 3]))
        if code == _WHOLE:
            return flat[start + 1]  # type: ignore[no-any-return]
        return _CLASSES[code - _FIRST_CLASS](*flat[start + 1:end])  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[AgentEvent]:
        for index in range(len(self._ends)):
            yield self[index]
