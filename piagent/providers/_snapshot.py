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

The messages one request adds are walked together, a level of their trees at a time, each
level sorted by type and read with C-level calls (a few dozen Python steps per level,
however many messages): a snapshot is a list of such batches, and a check finds the first
batch that changed (the cache converts again from its first message).

Thread safety: a snapshot is built by one thread and then only read (``unchanged``,
``prefix`` make new lists); it may be shared between threads once built.
"""

from __future__ import annotations

import bisect
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
_MAX_DEPTH = 64  # a batch holding deeper values (or a cycle) is covered message by message
_VALUES = dict.values
_IS_LEAF = _LEAVES.__contains__
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
_IS_SPEC = _SPECS.__contains__
_CONTAINERS = frozenset({list, dict, tuple})
_WALKABLE = _CONTAINERS | _SPECS.keys()


class Snapshot:
    """What a sequence of messages held when it was converted, checkable in one pass.

    It holds no reference to the messages themselves (a cache keyed by a message must not
    keep it alive): ``unchanged`` is given them again, and the caller has checked that they
    are the very objects. Message ``m``'s fields are read by ``roots[m]``; the objects
    inside the messages, ``objs[i]``, by ``getters[i]``; the values read, concatenated,
    are ``root_values`` and ``values``; ``sized`` are the containers and ``lengths`` their
    lengths then. ``ends[b]`` = (messages, root values, objects, values, containers) up to
    and including batch ``b``; ``counts[b]`` its first item.
    """

    __slots__ = ("counts", "ends", "getters", "lengths", "objs", "root_values", "roots",
                 "sized", "values")

    def __init__(self) -> None:
        self.roots: list[Callable[[Any], Any]] = []
        self.root_values: list[Any] = []
        self.objs: list[Any] = []
        self.getters: list[Callable[[Any], Any]] = []
        self.values: list[Any] = []
        self.sized: list[Any] = []
        self.lengths: list[int] = []
        self.ends: list[tuple[int, int, int, int, int]] = []
        self.counts: list[int] = []

    def __len__(self) -> int:
        """How many messages it covers."""
        return self.counts[-1] if self.counts else 0

    def extend(self, messages: Sequence[Any]) -> int:
        """Add ``messages`` as one batch, up to the first one that cannot be snapshotted;
        returns how many were added."""
        messages = tuple(messages)
        roots: list[Any] = list(map(_SPECS.get, map(type, messages)))
        if None in roots:  # an application message: the snapshot ends before it
            messages = messages[:roots.index(None)]
            del roots[len(messages):]
        if not messages:
            return 0
        fields = list(map(_call, roots, messages))
        objs: list[Any] = []
        getters: list[Callable[[Any], Any]] = []
        sized: list[Any] = []
        if not _walk(itertools.chain.from_iterable(fields), objs, getters, sized):
            if len(messages) == 1:
                return 0
            added = 0  # something in the batch cannot be covered: find it, one at a time
            for message in messages:
                if not self.extend((message,)):
                    break
                added += 1
            return added
        self.roots += roots
        self.root_values.extend(itertools.chain.from_iterable(fields))
        self.objs += objs
        self.getters += getters
        self.values.extend(itertools.chain.from_iterable(map(_call, getters, objs)))
        self.sized += sized
        self.lengths.extend(map(len, sized))
        count = len(self) + len(messages)
        self.ends.append((count, len(self.root_values), len(self.objs), len(self.values),
                          len(self.sized)))
        self.counts.append(count)
        return len(messages)

    def unchanged(self, messages: Sequence[Any], count: int) -> int:
        """How many leading messages still hold what they held, checked up to the last
        batch that ends within the first ``count`` (the very objects snapshotted): that
        batch's end, or the start of the first batch that changed."""
        b = bisect.bisect_right(self.counts, min(count, len(messages)))
        if not b:
            return 0
        if self._same(messages, 0, b):
            return self.counts[b - 1]
        first = 0  # the rare edit: find the first batch that changed
        while first < b and self._same(messages, first, first + 1):
            first += 1
        return self.counts[first - 1] if first else 0

    def _same(self, messages: Sequence[Any], first: int, last: int) -> bool:
        """Batches ``first`` to ``last`` (excluded) still hold what they held."""
        m0, r0, o0, v0, s0 = self.ends[first - 1] if first else (0, 0, 0, 0, 0)
        m1, r1, o1, v1, s1 = self.ends[last - 1]
        if first == 0 and last == len(self.ends):
            roots, root_values = self.roots, self.root_values
            objs, getters, values = self.objs, self.getters, self.values
            sized, lengths = self.sized, self.lengths
        else:
            roots, root_values = self.roots[m0:m1], self.root_values[r0:r1]
            objs, getters, values = self.objs[o0:o1], self.getters[o0:o1], self.values[v0:v1]
            sized, lengths = self.sized[s0:s1], self.lengths[s0:s1]
        if list(map(len, sized)) != lengths:
            return False
        now = list(itertools.chain.from_iterable(map(_call, roots, messages[m0:m1])))
        if len(now) != len(root_values) or not all(map(operator.is_, now, root_values)):
            return False
        now = list(itertools.chain.from_iterable(map(_call, getters, objs)))
        return len(now) == len(values) and all(map(operator.is_, now, values))

    def prefix(self, count: int) -> Snapshot:
        """A snapshot of the first ``count`` messages (a copy); ``count`` is 0 or where a
        batch ends (what ``unchanged`` returns)."""
        out = Snapshot()
        b = bisect.bisect_right(self.counts, count)
        if not b:
            return out
        m, r, o, v, s = self.ends[b - 1]
        out.roots, out.root_values = self.roots[:m], self.root_values[:r]
        out.objs, out.getters, out.values = self.objs[:o], self.getters[:o], self.values[:v]
        out.sized, out.lengths = self.sized[:s], self.lengths[:s]
        out.ends, out.counts = self.ends[:b], self.counts[:b]
        return out


def _holders(items: Any) -> itertools.compress[Any]:
    """The items that are not leaves (filtered in C: no Python step per leaf)."""
    items = tuple(items)
    return itertools.compress(items, map(operator.not_, map(_IS_LEAF, map(type, items))))


def _of(kind: type, level: list[Any], kinds: list[type]) -> list[Any]:
    """The items of ``level`` whose type is ``kind`` (selected in C)."""
    return list(itertools.compress(level, map(operator.is_, kinds, itertools.repeat(kind))))


def _walk(fields: Any, objs: list[Any], getters: list[Callable[[Any], Any]],
          sized: list[Any]) -> bool:
    """Append the objects held by ``fields`` (values), at every depth, a level at a time;
    False if they hold something a snapshot cannot prove unchanged, or are nested deeper
    than ``_MAX_DEPTH`` (a cycle)."""
    level = list(_holders(fields))
    depth = 0
    while level:
        depth += 1
        if depth > _MAX_DEPTH:
            return False
        kinds = list(map(type, level))
        present = set(kinds)
        if not present <= _WALKABLE:
            return False
        below: list[Any] = []
        if list in present:
            lists = _of(list, level, kinds)
            sized += lists
            lists = list(filter(None, lists))  # (an empty one: its length says it still is)
            objs += lists
            getters.extend(itertools.repeat(iter, len(lists)))
            below.extend(_holders(itertools.chain.from_iterable(lists)))
        if dict in present:
            dicts = _of(dict, level, kinds)
            sized += dicts
            dicts = list(filter(None, dicts))
            objs += dicts  # their keys, in order (a key that is no leaf is walked)
            getters.extend(itertools.repeat(iter, len(dicts)))
            objs += dicts  # their values, in order
            getters.extend(itertools.repeat(_VALUES, len(dicts)))
            below.extend(_holders(itertools.chain.from_iterable(dicts)))
            below.extend(_holders(itertools.chain.from_iterable(map(_VALUES, dicts))))
        if tuple in present:  # their own slots cannot change
            below.extend(_holders(itertools.chain.from_iterable(_of(tuple, level, kinds))))
        if not present <= _CONTAINERS:
            blocks = list(itertools.compress(level, map(_IS_SPEC, kinds)))
            read = list(map(_SPECS.__getitem__, map(type, blocks)))
            objs += blocks
            getters += read
            below.extend(_holders(itertools.chain.from_iterable(map(_call, read, blocks))))
        level = below
    return True
