"""Profile every thread of a callable with cProfile (the loop spans several threads).

``profile_all_threads(fn)`` wraps ``threading.Thread.run`` so each thread started while
``fn`` runs gets its own ``cProfile.Profile``; the result merges them with the caller's.
"""

from __future__ import annotations

import cProfile
import pstats
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["profile_all_threads"]


def profile_all_threads(fn: Callable[[], Any]) -> pstats.Stats:
    """Run ``fn`` with every thread profiled; return the merged statistics."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()  # guards profiles (appended from many threads)
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profile = cProfile.Profile()
        with lock:
            profiles.append(profile)
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    main = cProfile.Profile()
    threading.Thread.run = run  # type: ignore[method-assign]
    try:
        main.enable()
        try:
            fn()
        finally:
            main.disable()
    finally:
        threading.Thread.run = original  # type: ignore[method-assign]
    stats = pstats.Stats(main)
    with lock:
        for profile in profiles:
            try:
                stats.add(profile)
            except TypeError:  # a profile of a thread that is still running: skip it
                continue
    return stats
