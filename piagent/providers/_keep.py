"""``ByOwner``: one value per live object, dropped when that object is collected; the
request caches' mode (``PIAGENT_REQUEST_CACHES``) and the check mode's comparison.

The request caches (``SegmentCache``, ``PrefixEncoder``) keep one entry per conversation,
found by an object the conversation holds for its whole life (its first message). A fixed
number of entries is wrong both ways: too few and, with more conversations in flight than
entries, every turn misses (a cost that appears only under concurrency); too many and dead
conversations stay in memory for the collector to walk. Tying each entry to its owner's
life keeps exactly the conversations that can still send a request.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import threading
import weakref
from typing import Any, Generic, TypeVar

from ..errors import PiAgentError

__all__ = ["SHORT_TRANSCRIPT", "ByOwner", "RequestCacheMismatch", "cache_mode", "caching",
           "check_same", "set_cache_mode"]

_MODES = ("on", "off", "check")
# "on": the request caches are used; "off": every request is built without them (for
# measuring); "check": each request is built both ways and a difference raises (the test
# suite runs so, tests/conftest.py). Read once, when the providers are imported.
_mode = os.environ.get("PIAGENT_REQUEST_CACHES") or "on"
if _mode not in _MODES:
    raise ValueError(f"PIAGENT_REQUEST_CACHES must be one of {_MODES}, got {_mode!r}")


# In "on" mode a transcript shorter than this is converted and encoded afresh, and leaves
# nothing in the caches: checking and keeping a conversion costs more than converting a few
# messages again (a 5-round conversation of 2 tools: 3.74 M instructions a turn with the
# caches, 3.61 M without), and a thousand short conversations in flight would hold a
# thousand entries for the garbage collector to walk. A conversation that grows past it is
# cached from then on ("check" mode caches every length, so the tests check them all).
SHORT_TRANSCRIPT = 20


def caching(mode: str, count: int) -> bool:
    """Whether a request of ``count`` messages uses the caches in ``mode``."""
    return mode == "check" or (mode == "on" and count >= SHORT_TRANSCRIPT)


class RequestCacheMismatch(PiAgentError, AssertionError):
    """In check mode: a request cache gave what building the request afresh does not."""


def cache_mode() -> str:
    """``"on"``, ``"off"`` or ``"check"`` (see ``_mode``)."""
    return _mode


def set_cache_mode(mode: str) -> str:
    """Switch the mode (tests only); returns the previous one."""
    global _mode
    if mode not in _MODES:
        msg = f"mode must be one of {_MODES}, got {mode!r}"
        raise ValueError(msg)
    previous, _mode = _mode, mode
    return previous


def check_same(cached: Any, fresh: Any, what: str) -> None:
    """Raise ``RequestCacheMismatch`` unless ``cached`` encodes as ``fresh`` does."""
    if isinstance(cached, bytes) and isinstance(fresh, bytes):
        same = cached == fresh
        cached_text, fresh_text = cached.decode("utf-8", "replace"), fresh.decode(
            "utf-8", "replace")
    else:
        cached_text = json.dumps(cached, ensure_ascii=False, default=repr)
        fresh_text = json.dumps(fresh, ensure_ascii=False, default=repr)
        same = cached_text == fresh_text
    if not same:
        at = next((i for i, (a, b) in enumerate(zip(cached_text, fresh_text, strict=False))
                   if a != b), min(len(cached_text), len(fresh_text)))
        msg = (f"{what}: the cached request differs from the one built afresh at character "
               f"{at}: cached {cached_text[max(0, at - 80):at + 80]!r}, fresh "
               f"{fresh_text[max(0, at - 80):at + 80]!r}")
        raise RequestCacheMismatch(msg)

V = TypeVar("V")


class ByOwner(Generic[V]):
    """``put(owner, value)`` / ``get(owner)``: the value stored for that very object.

    An owner that can be weakly referenced keeps its entry until it is collected (then the
    entry goes, with whatever the value held); one that cannot (a dict, an instance of a
    class with ``__slots__``) shares a fallback of the latest ``fallback_size`` entries.

    Thread safety: any thread may call any method. ``_live`` is read and written one dict
    operation at a time, without a lock: the weak reference's callback that removes an
    entry runs wherever the owner dies, which may be inside a garbage collection started
    while this very thread holds a lock, so it must take none. An entry is always checked
    against the caller's own owner (``ref() is owner``), so a racing ``put`` costs at most
    a miss. ``_lock`` guards the fallback ``_recent``, whose updates take several steps.
    """

    __slots__ = ("__weakref__", "_live", "_lock", "_me", "_recent", "_size")

    def __init__(self, fallback_size: int = 8) -> None:
        # id(owner) -> (weak reference to it, value); an entry leaves when its owner dies
        self._live: dict[int, tuple[weakref.ref[object], V]] = {}
        self._lock = threading.Lock()  # guards _recent
        # owners without weak references: id(owner) -> (owner, value), oldest first
        self._recent: collections.OrderedDict[int, tuple[object, V]] = (
            collections.OrderedDict())
        self._size = fallback_size
        self._me = weakref.ref(self)  # what the owners' callbacks reach this keeper by

    def __len__(self) -> int:
        return len(self._live) + len(self._recent)

    def get(self, owner: object) -> V | None:
        """The value ``put`` for ``owner`` (the same object, not an equal one), or ``None``."""
        key = id(owner)
        entry = self._live.get(key)
        if entry is not None:
            return entry[1] if entry[0]() is owner else None
        if not self._recent:
            return None
        with self._lock:
            kept = self._recent.get(key)
        return kept[1] if kept is not None and kept[0] is owner else None

    def put(self, owner: object, value: V) -> None:
        """Keep ``value`` for ``owner``, replacing what it had."""
        key = id(owner)
        if type(owner).__weakrefoffset__:
            entry = self._live.get(key)
            if entry is not None and entry[0]() is owner:
                ref = entry[0]  # the owner's reference already carries the callback
            else:
                ref = weakref.ref(owner, functools.partial(_drop, self._me, key))
            self._live[key] = (ref, value)
            return
        with self._lock:
            self._recent[key] = (owner, value)
            self._recent.move_to_end(key)
            while len(self._recent) > self._size:
                self._recent.popitem(last=False)


def _drop(keeper_ref: weakref.ref[ByOwner[Any]], key: int,
          dead: weakref.ref[object]) -> None:
    """The callback of an owner's weak reference: its entry goes (no lock: see ByOwner).

    The keeper is reached through a weak reference, so an owner outliving its keeper does
    not keep the keeper alive. The entry is removed only if it is still the dead owner's:
    the owner's address cannot be reused before this callback has run."""
    keeper = keeper_ref()
    if keeper is None:
        return
    entry = keeper._live.get(key)
    if entry is not None and entry[0] is dead:
        keeper._live.pop(key, None)
