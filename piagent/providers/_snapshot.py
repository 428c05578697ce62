"""``Snapshot``: proof that transcript messages still hold what a request converted.

A request cache may reuse an old message's converted form only while the message holds
exactly what it held then, at every depth: an application may edit a message in place (a
``transform_context`` that shortens old tool results, a hook that assigns a new content
list, an edit of ``agent.state.messages`` between prompts), and the very next request must
carry the edit. A snapshot records, for every object of the messages' trees (the message,
its lists and dicts, its content blocks), the identity of each value it held, and every
container's length. Checking it again reads the same objects with C-level calls only
(``operator.attrgetter`` over the fields, the lists' and dicts' own iterators) and
compares identities: any assignment of a field, any change of a list or dict at any depth
shows as another object in some slot or another length, and the cache converts that
message again.

Identity, not equality: an equal value can encode differently (``1`` for ``True``, ``0.0``
for ``-0.0``, a dict with its keys in another order). A value may be a ``str``, ``int``,
``float``, ``bool`` or ``None`` (immutable), a ``list``, ``tuple`` or ``dict`` of those, or
one of the message and content-block dataclasses (exactly those types). A message holding
anything else (a subclass, an application object) gets no snapshot and is never reused.
``_NOT_SENT`` names the fields no adapter reads (a tool result's ``details`` is for the UI;
usage and timings are the response's record); they are left out so that large details do
not cost every later request. ``tests/providers/test_request_caches.py`` mutates every
field, those too, and compares the cached request with the uncached one.

Thread safety: a snapshot is built by one thread and then only read (``unchanged``,
``prefix`` make new lists); it may be shared between threads once built.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

from ..messages import (
    AssistantMessage,
    Cost,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    Usage,
    UserMessage,
)

__all__ = ["Snapshot"]

_LEAVES = frozenset({str, int, float, bool, type(None)})
_MAX_DEPTH = 64  # deeper (or cyclic) values get no snapshot
# Fields that no adapter using these caches reads (openai-completions, anthropic-messages,
# and transform_messages, which only copies them onto messages it rebuilds): the
# response's record, the UI's details, unknown JSON keys. Edits of them cannot change a
# request, so they are not read at every check. A field not listed here is checked.
_RECORD = frozenset({"timestamp", "extra"})
_NOT_SENT: dict[type, frozenset[str]] = {
    AssistantMessage: _RECORD | {
        "usage", "duration_ms", "diagnostics", "error_message", "thinking_level",
        "response_model", "response_id", "provider_thinking_level", "raw_stop_reason",
        "end_turn", "deferred"},
    ToolResultMessage: _RECORD | {"details", "nested_calls", "usage", "duration_ms"},
    UserMessage: _RECORD,
    SystemMessage: _RECORD,
    TextContent: _RECORD,
    ThinkingContent: _RECORD,
    ImageContent: _RECORD,
    ToolCall: _RECORD,
    ToolDeclaration: _RECORD,
}
_call: Callable[[Callable[[Any], Any], Any], Any] = getattr(
    operator, "call", lambda function, value: function(value))  # operator.call: 3.11+


def _spec(kind: type) -> Callable[[Any], tuple[Any, ...]]:
    """The getter of a dataclass's checked fields (a tuple, even of one)."""
    skip = _NOT_SENT.get(kind, frozenset())
    names = [f.name for f in dataclasses.fields(kind) if f.name not in skip]
    if len(names) == 1:
        names.append(names[0])
    return operator.attrgetter(*names)


# the exact types a snapshot reads, and the getters of their checked fields
_SPECS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    kind: _spec(kind) for kind in (
        SystemMessage, UserMessage, AssistantMessage, ToolResultMessage, TextContent,
        ThinkingContent, ImageContent, ToolCall, ToolDeclaration, Usage, Cost)}
# (Usage and Cost: reachable only through fields left out above, kept for completeness)


class Snapshot:
    """What a sequence of messages held when it was converted, checkable in one pass.

    It holds no reference to the messages themselves (a cache keyed by a message must not
    keep it alive): ``unchanged`` is given them again, and the caller has checked that they
    are the very objects. Message ``m``'s fields are read by ``roots[m]``; the objects
    inside the messages, ``objs[i]``, by ``getters[i]``; the values read, concatenated,
    are ``root_values`` and ``values``; ``sized`` are the containers and ``lengths`` their
    lengths then; ``ends[m]`` = (root values, objects, values, containers) up to and
    including message ``m``.
    """

    __slots__ = ("ends", "getters", "lengths", "objs", "root_values", "roots", "sized",
                 "values")

    def __init__(self) -> None:
        self.roots: list[Callable[[Any], Any]] = []
        self.root_values: list[Any] = []
        self.objs: list[Any] = []
        self.getters: list[Callable[[Any], Any]] = []
        self.values: list[Any] = []
        self.sized: list[Any] = []
        self.lengths: list[int] = []
        self.ends: list[tuple[int, int, int, int]] = []

    def __len__(self) -> int:
        """How many messages it covers."""
        return len(self.ends)

    def extend(self, messages: Sequence[Any]) -> int:
        """Add ``messages`` in order, up to the first one that cannot be snapshotted;
        returns how many were added."""
        objs, getters, sized, values = self.objs, self.getters, self.sized, self.values
        added = 0
        for message in messages:
            getter = _SPECS.get(type(message))
            if getter is None:
                break
            fields = getter(message)
            o, s = len(objs), len(sized)
            for item in fields:
                if type(item) not in _LEAVES and not _walk(item, objs, getters, sized, 1):
                    del objs[o:], getters[o:], sized[s:]
                    return added
            self.roots.append(getter)
            self.root_values.extend(fields)
            values.extend(itertools.chain.from_iterable(map(_call, getters[o:], objs[o:])))
            self.lengths.extend(map(len, sized[s:]))
            self.ends.append((len(self.root_values), len(objs), len(values), len(sized)))
            added += 1
        return added

    def unchanged(self, messages: Sequence[Any], count: int) -> int:
        """How many of the first ``count`` messages (the very objects snapshotted; at most
        ``len(self)``) still hold what they held: ``count``, or the index of the first
        that changed."""
        count = min(count, len(self.ends), len(messages))
        if not count:
            return 0
        r, o, v, s = self.ends[count - 1]
        if count == len(self.ends):
            roots, root_values = self.roots, self.root_values
            objs, getters, values = self.objs, self.getters, self.values
            sized, lengths = self.sized, self.lengths
        else:
            roots, root_values = self.roots[:count], self.root_values[:r]
            objs, getters, values = self.objs[:o], self.getters[:o], self.values[:v]
            sized, lengths = self.sized[:s], self.lengths[:s]
        if (list(map(len, sized)) == lengths
                and all(map(operator.is_, itertools.chain.from_iterable(
                    map(_call, roots, messages)), root_values))
                and all(map(operator.is_, itertools.chain.from_iterable(
                    map(_call, getters, objs)), values))):
            return count
        for m in range(count):  # the rare edit: find the first message that changed
            if not self._same(messages[m], m):
                return m
        return count  # changed back meanwhile: unchanged as far as this check goes

    def _same(self, message: Any, m: int) -> bool:
        r0, o0, v0, s0 = self.ends[m - 1] if m else (0, 0, 0, 0)
        r1, o1, v1, s1 = self.ends[m]
        if list(map(len, self.sized[s0:s1])) != self.lengths[s0:s1]:
            return False
        fields = self.roots[m](message)
        if len(fields) != r1 - r0 or not all(map(operator.is_, fields,
                                                  self.root_values[r0:r1])):
            return False
        now = list(itertools.chain.from_iterable(
            map(_call, self.getters[o0:o1], self.objs[o0:o1])))
        return len(now) == v1 - v0 and all(map(operator.is_, now, self.values[v0:v1]))

    def prefix(self, count: int) -> Snapshot:
        """A snapshot of the first ``count`` messages (a copy)."""
        out = Snapshot()
        if count <= 0:
            return out
        r, o, v, s = self.ends[count - 1]
        out.roots, out.root_values = self.roots[:count], self.root_values[:r]
        out.objs, out.getters, out.values = self.objs[:o], self.getters[:o], self.values[:v]
        out.sized, out.lengths = self.sized[:s], self.lengths[:s]
        out.ends = self.ends[:count]
        return out


def _walk(value: Any, objs: list[Any], getters: list[Callable[[Any], Any]],
          sized: list[Any], depth: int) -> bool:
    """Append ``value``'s objects (itself, then what it holds); False if it holds
    something a snapshot cannot prove unchanged."""
    kind = type(value)
    if kind in _LEAVES:
        return True
    if depth > _MAX_DEPTH:
        return False
    depth += 1
    if kind is list:
        sized.append(value)
        if not value:
            return True  # its length says it is still empty
        objs.append(value)
        getters.append(iter)
        items: Any = value
    elif kind is dict:
        sized.append(value)
        if not value:
            return True
        objs.append(value)  # its keys, in order
        getters.append(iter)
        objs.append(value)  # its values, in order
        getters.append(dict.values)
        for key in value:
            if type(key) not in _LEAVES:
                return False
        items = value.values()
    elif kind is tuple:
        items = value  # its own slots cannot change
    else:
        spec = _SPECS.get(kind)
        if spec is None:
            return False
        getter = spec
        objs.append(value)
        getters.append(getter)
        items = getter(value)
    for item in items:
        if type(item) not in _LEAVES and not _walk(item, objs, getters, sized, depth):
            return False
    return True
