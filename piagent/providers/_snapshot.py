"""``Snapshot``: proof that transcript messages still hold what a request converted.

A request cache may reuse an old message's converted form only while the message holds
exactly what it held then, at every depth: an application may edit a message in place (a
``transform_context`` that shortens old tool results, a hook that assigns a new content
list, an edit of ``agent.state.messages`` between prompts), and the very next request must
carry the edit. A snapshot records the referents (``gc.get_referents``: what the garbage
collector sees an object hold) of every message and of every object inside it that the
conversion reads (content blocks, lists, dicts), every container's length and every
dict's keys. Checking it again is a handful of C calls over all of them at once, and
compares identities: any assignment of a field, any change of a list or dict at any depth
shows as another object in some place or another length, and the cache converts that
message again. (An attribute added to or deleted from one object shifts the places after
it; each object's class ends its run, so the shift shows unless the value at just that
place is that very class.)

Identity, not equality: an equal value can encode differently (``1`` for ``True``, ``0.0``
for ``-0.0``, a dict with its keys in another order). A value may be a ``str``, ``int``,
``float``, ``bool`` or ``None`` (immutable), a ``list``, ``tuple`` or ``dict`` of those, or
one of the message and content-block dataclasses (exactly those types). A message holding
anything else (a subclass, an application object) gets no snapshot and is never reused.
``_NOT_SENT`` names the fields no adapter reads (a tool result's ``details`` is for the UI;
usage and timings are the response's record); what they hold is not walked (only their
values' identity is compared), so that large details cost later requests nothing and may
hold anything. ``tests/providers/test_request_caches.py`` mutates every
field, those too, and compares the cached request with the uncached one.

The messages one request adds are walked together, a level of their trees at a time, each
level sorted by type and read with C-level calls (a few dozen Python steps per level,
however many messages): a snapshot is a list of such batches, and a check finds the first
batch that changed (the cache converts again from its first message).

Thread safety: ``extend`` and ``truncate`` change a snapshot in place, so only its owner
calls them (``_transform._Conversion`` hands a conversation's snapshot to one request at a
time); ``unchanged`` only reads, so a snapshot no one changes any more (``WireCache``'s)
may be checked by any thread.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
import itertools
import operator
import struct
import sys
import sysconfig
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
    are the very objects. ``root_refs`` are the messages' referents (``gc.get_referents``:
    their attributes' values and their class); ``objs`` the objects inside them that the
    conversion reads (content blocks, lists, dicts), ``refs`` their referents; ``sized``
    the lists and dicts and ``lengths`` their lengths; ``dicts`` the dicts and ``keys``
    their keys (a dict of string keys shows only its values as referents). ``ends[b]`` =
    (messages, root_refs, objs, refs, sized, dicts, keys) up to and including batch ``b``;
    ``counts[b]`` its first item.
    """

    __slots__ = ("addresses", "counts", "dicts", "ends", "keys", "lengths", "objs", "refs",
                 "root_refs", "sized")

    def __init__(self) -> None:
        self.root_refs: list[Any] = []
        self.objs: list[Any] = []
        self.refs: list[Any] = []
        self.sized: list[Any] = []
        self.lengths: list[int] = []
        self.dicts: list[Any] = []
        self.keys: list[Any] = []
        self.ends: list[tuple[int, int, int, int, int, int, int]] = []
        self.counts: list[int] = []
        # root_refs, refs and keys as their items' addresses (see _ADDRESSES), or None
        self.addresses: tuple[bytearray, bytearray, bytearray] | None = (
            (bytearray(), bytearray(), bytearray()) if _ADDRESSES is not None else None)

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
        blocks: list[Any] = []
        lists: list[Any] = []
        dicts: list[Any] = []
        if not _walk(itertools.chain.from_iterable(map(_call, roots, messages)), blocks,
                     lists, dicts):
            if len(messages) == 1:
                return 0
            added = 0  # something in the batch cannot be covered: find it, one at a time
            for message in messages:
                if not self.extend((message,)):
                    break
                added += 1
            return added
        # an object whose attributes CPython keeps in a __dict__ shows that dict as its
        # referent (not its attributes' values): the dict is checked like any other
        for holder in itertools.compress((*messages, *blocks), map(operator.eq, map(
                len, map(gc.get_referents, (*messages, *blocks))), itertools.repeat(2))):
            dicts.extend(r for r in gc.get_referents(holder) if type(r) is dict)
        objs = [*blocks, *lists, *dicts]
        root_refs = gc.get_referents(*messages)
        refs = gc.get_referents(*objs)
        keys = list(itertools.chain.from_iterable(dicts))
        self.root_refs += root_refs
        self.objs += objs
        self.refs += refs
        sized = [*lists, *dicts]
        self.sized += sized
        self.lengths.extend(map(len, sized))
        self.dicts += dicts
        self.keys += keys
        if self.addresses is not None and _ADDRESSES is not None:
            roots_at, refs_at, keys_at = self.addresses
            roots_at += _ADDRESSES(root_refs)
            refs_at += _ADDRESSES(refs)
            keys_at += _ADDRESSES(keys)
        count = len(self) + len(messages)
        self.ends.append((count, len(self.root_refs), len(self.objs), len(self.refs),
                          len(self.sized), len(self.dicts), len(self.keys)))
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
        m0, r0, o0, f0, s0, d0, k0 = self.ends[first - 1] if first else (0,) * 7
        m1, r1, o1, f1, s1, d1, k1 = self.ends[last - 1]
        whole = first == 0 and last == len(self.ends)
        sized = self.sized if whole else self.sized[s0:s1]
        if list(map(len, sized)) != (self.lengths if whole else self.lengths[s0:s1]):
            return False
        now = (gc.get_referents(*messages[m0:m1]),
               gc.get_referents(*(self.objs if whole else self.objs[o0:o1])),
               list(itertools.chain.from_iterable(self.dicts if whole else self.dicts[d0:d1])))
        if self.addresses is not None and _ADDRESSES is not None:  # one memcmp each
            size = _POINTER
            roots_at, refs_at, keys_at = self.addresses
            if whole:
                return (_ADDRESSES(now[0]) == roots_at and _ADDRESSES(now[1]) == refs_at
                        and _ADDRESSES(now[2]) == keys_at)
            return (_ADDRESSES(now[0]) == roots_at[r0 * size:r1 * size]
                    and _ADDRESSES(now[1]) == refs_at[f0 * size:f1 * size]
                    and _ADDRESSES(now[2]) == keys_at[k0 * size:k1 * size])
        return (_same_objects(now[0], self.root_refs if whole else self.root_refs[r0:r1])
                and _same_objects(now[1], self.refs if whole else self.refs[f0:f1])
                and _same_objects(now[2], self.keys if whole else self.keys[k0:k1]))

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` messages only; ``count`` is 0 or where a batch ends
        (what ``unchanged`` returns)."""
        b = bisect.bisect_right(self.counts, count)
        if b == len(self.counts):
            return
        m, r, o, f, s, d, k = self.ends[b - 1] if b else (0,) * 7
        del self.root_refs[r:], self.objs[o:], self.refs[f:], self.sized[s:]
        del self.lengths[s:], self.dicts[d:], self.keys[k:], self.ends[b:], self.counts[b:]
        if self.addresses is not None:
            size = _POINTER
            roots_at, refs_at, keys_at = self.addresses
            del roots_at[r * size:], refs_at[f * size:], keys_at[k * size:]


def _same_objects(now: list[Any], then: list[Any]) -> bool:
    return len(now) == len(then) and all(map(operator.is_, now, then))


def _list_addresses() -> tuple[Callable[[list[Any]], bytes] | None, int]:
    """A function giving a list's items' addresses as bytes, in one copy, and a pointer's
    size; ``(None, 0)`` unless this is CPython with the list layout checked here.

    Comparing two lists' items for identity one ``operator.is_`` call at a time costs
    about 150 machine instructions an item; the addresses compare with one ``memcmp``.
    An address stands for an object while the object lives, and a snapshot keeps every
    object whose address it holds (``root_refs``, ``refs``, ``keys``): equal addresses are
    the very same objects. A ``list`` is ``PyObject_VAR_HEAD`` then ``ob_item`` (since
    CPython 2); the layout is checked by size and by reading a probe list, and a
    free-threaded build (another header) or another interpreter uses ``operator.is_``.
    """
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None, 0
    import ctypes  # noqa: PLC0415 - only where this is used; not at every import

    size = ctypes.sizeof(ctypes.c_void_p)
    if object.__basicsize__ != 2 * size or list.__basicsize__ != 5 * size:
        return None, 0
    read = ctypes.c_void_p.from_address
    string_at = ctypes.string_at

    def addresses(items: list[Any]) -> bytes:
        if not items:
            return b""
        return string_at(read(id(items) + 3 * size).value or 0, len(items) * size)

    probe = [object(), "probe", 12345678901234567890]
    if addresses(probe) != struct.pack(f"{len(probe)}P", *map(id, probe)):
        return None, 0
    return addresses, size


_ADDRESSES, _POINTER = _list_addresses()


def _holders(items: Any) -> itertools.compress[Any]:
    """The items that are not leaves (filtered in C: no Python step per leaf)."""
    items = tuple(items)
    return itertools.compress(items, map(operator.not_, map(_IS_LEAF, map(type, items))))


def _of(kind: type, level: list[Any], kinds: list[type]) -> list[Any]:
    """The items of ``level`` whose type is ``kind`` (selected in C)."""
    return list(itertools.compress(level, map(operator.is_, kinds, itertools.repeat(kind))))


def _walk(fields: Any, blocks: list[Any], lists: list[Any], dicts: list[Any]) -> bool:
    """Collect the objects held by ``fields`` (values), at every depth, a level at a time:
    content blocks (their checked fields walked), lists and dicts; False if they hold
    something a snapshot cannot prove unchanged, or are nested deeper than ``_MAX_DEPTH``
    (a cycle)."""
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
            found = _of(list, level, kinds)
            lists += found
            below.extend(_holders(itertools.chain.from_iterable(found)))
        if dict in present:
            found = _of(dict, level, kinds)
            dicts += found  # a key that is no leaf is walked too
            below.extend(_holders(itertools.chain.from_iterable(found)))
            below.extend(_holders(itertools.chain.from_iterable(map(_VALUES, found))))
        if tuple in present:  # their own slots cannot change
            below.extend(_holders(itertools.chain.from_iterable(_of(tuple, level, kinds))))
        if not present <= _CONTAINERS:
            found = list(itertools.compress(level, map(_IS_SPEC, kinds)))
            blocks += found
            below.extend(_holders(itertools.chain.from_iterable(
                map(_call, map(_SPECS.__getitem__, map(type, found)), found))))
        level = below
    return True
