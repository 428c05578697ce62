"""``EventLog``: the events a run keeps for ``AgentRun.events()``, deltas kept small.

A turn streams dozens of ``message_update`` events, and a run keeps every one until it is
dropped: each a ``MessageUpdateEvent``, its shallow copy of the message and the assistant
event inside, three objects the garbage collector walks on every full collection. With a
thousand runs in one process that walk was most of what piagent cost over a bare loop.

So an update whose message copy has the very same field values (each the same object) as
the update kept whole before it, and whose assistant event (a text, thinking or tool-call
start, delta or end) has that update's partial message, is kept as ``(kind, index of that
update, the assistant event's other fields...)``: for a delta, ints and a string, a tuple
the collector stops tracking. Read back, it is rebuilt from the update it names: a
``MessageUpdateEvent`` equal to the one the listeners got, whose ``message`` is that
update's copy (equal, field by field, to its own). Every other event is kept as is.

Thread safety: the run's worker thread appends; any thread may read (``len``, an index,
iteration) while it does.
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
# deltas first: (content_index, delta, partial), the usual ones
_UPDATE_KINDS = [kind for kind in get_args(AssistantMessageEvent)
                 if kind not in (StartEvent, DoneEvent, ErrorEvent)]
_KINDS: tuple[type[Any], ...] = tuple(sorted(
    _UPDATE_KINDS, key=lambda kind: _fields_of(kind) != ["content_index", "delta", "partial"]))
_KIND_OF = {kind: code for code, kind in enumerate(_KINDS)}
_DELTAS = sum(1 for kind in _KINDS if _fields_of(kind) == ["content_index", "delta", "partial"])


def _other_fields(kind: type[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of ``kind``'s fields but ``partial`` (its last), as a tuple."""
    names = _fields_of(kind)
    assert names[-1] == "partial", kind  # rebuilt as kind(*values, partial)
    if len(names) == 2:
        only = operator.attrgetter(names[0])
        return lambda event: (only(event),)
    return operator.attrgetter(*names[:-1])


_OTHER_FIELDS = tuple(_other_fields(kind) for kind in _KINDS)  # by kind


class EventLog:
    """A run's events in order; ``message_update`` deltas kept as small tuples (above)."""

    __slots__ = ("_items", "_ref", "_ref_partial", "_ref_values")

    def __init__(self) -> None:
        self._items: list[Any] = []  # AgentEvents and (kind, ref, *other fields)
        # the latest message_update kept whole (worker only): its index, its assistant
        # event's partial message, and its message copy's attribute values
        self._ref = -1
        self._ref_partial: object = None
        self._ref_values: tuple[Any, ...] = ()

    def append(self, event: AgentEvent) -> None:
        """Keep an event as it is."""
        self._items.append(event)

    def append_update(self, event: MessageUpdateEvent) -> None:
        """Keep a ``message_update``: small if its message copy is like the last one kept
        whole (each attribute the very object it holds: an equal but distinct ``Usage``,
        say, could be changed later through the partial message and read back wrong)."""
        inner: Any = event.assistant_message_event  # one of _KINDS when kind is not None
        kind = _KIND_OF.get(type(inner))
        message = event.message
        if kind is None or type(message) is not AssistantMessage:  # fields not known
            self._ref_partial = None
            self._items.append(event)
            return
        # the copy's attributes, in the order the loop's copy set them, as the ref's were
        values = vars(message).values()
        ref_values = self._ref_values
        if inner.partial is self._ref_partial and len(values) == len(ref_values) \
                and all(map(operator.is_, values, ref_values)):
            if kind < _DELTAS:
                self._items.append((kind, self._ref, inner.content_index, inner.delta))
            else:
                self._items.append((kind, self._ref, *_OTHER_FIELDS[kind](inner)))
            return
        self._ref, self._ref_partial = len(self._items), inner.partial
        self._ref_values = tuple(values)
        self._items.append(event)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> AgentEvent:
        item = self._items[index]
        if type(item) is not tuple:
            return item  # type: ignore[no-any-return]
        kind, ref, *values = item
        whole: Any = self._items[ref]  # a MessageUpdateEvent whose inner event is of _KINDS
        return MessageUpdateEvent(whole.message, _KINDS[kind](
            *values, whole.assistant_message_event.partial))

    def __iter__(self) -> Iterator[AgentEvent]:
        for index in range(len(self._items)):
            yield self[index]
