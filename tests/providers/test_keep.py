"""ByOwner: one value per live object, found by identity, gone when the object is."""

from __future__ import annotations

import gc
import threading
from typing import Any

from piagent.providers._keep import ByOwner


class Owner:
    pass


class Cyclic:
    """Collected only by the garbage collector (it refers to itself)."""

    def __init__(self) -> None:
        self.me = self


def test_found_by_identity_and_replaced() -> None:
    keeper: ByOwner[str] = ByOwner()
    a, b = Owner(), Owner()
    keeper.put(a, "one")
    assert keeper.get(a) == "one"
    assert keeper.get(b) is None
    keeper.put(a, "two")
    assert keeper.get(a) == "two"
    assert len(keeper) == 1


def test_an_entry_goes_with_its_owner_however_many_there_are() -> None:
    keeper: ByOwner[int] = ByOwner(fallback_size=2)
    owners = [Owner() for _ in range(300)]
    for index, owner in enumerate(owners):
        keeper.put(owner, index)
    assert [keeper.get(owner) for owner in owners] == list(range(300))  # none pushed out
    del owners[:150]
    assert len(keeper) == 150  # refcounting: gone at once
    del owners, owner
    gc.collect()
    assert len(keeper) == 0


def test_owners_without_weak_references_share_a_bounded_fallback() -> None:
    keeper: ByOwner[int] = ByOwner(fallback_size=2)
    dicts: list[dict[str, Any]] = [{"n": n} for n in range(3)]
    for index, owner in enumerate(dicts):
        keeper.put(owner, index)
    assert [keeper.get(owner) for owner in dicts] == [None, 1, 2]  # the latest two
    assert keeper.get({"n": 2}) is None  # an equal dict is not the same owner
    assert len(keeper) == 2


def test_an_owner_collected_while_the_keepers_lock_is_held_does_not_deadlock() -> None:
    """The callback that drops an entry runs wherever the owner dies, which may be a
    collection started inside the keeper by the thread that holds its lock: it takes none."""
    keeper: ByOwner[int] = ByOwner()
    owner = Cyclic()
    keeper.put(owner, 1)
    del owner
    finished = threading.Event()

    def collect_holding_the_lock() -> None:
        with keeper._lock:
            gc.collect()
        finished.set()

    worker = threading.Thread(target=collect_holding_the_lock, daemon=True)
    worker.start()
    assert finished.wait(30), "the collection deadlocked on the keeper's lock"
    worker.join(30)
    assert len(keeper) == 0

