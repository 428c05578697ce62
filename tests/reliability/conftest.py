"""The reliability suite's mode, its figures, and what every file of it shares.

``PIAGENT_RELIABILITY=short`` (the default, what CI runs; about a minute on 2 cores) or
``PIAGENT_RELIABILITY=full`` (the figures in ``docs/reliability.md``: 5,000 soak runs, many
more fuzz examples and random aborts)::

    python -m pytest -q -p no:cacheprovider tests/reliability               # short
    PIAGENT_RELIABILITY=full python -m pytest -q -p no:cacheprovider tests/reliability

* ``MODE`` / ``FULL`` and ``scaled(short, full)``: how much of everything to do.
* ``FIGURES``: counters the tests add to (faults tried, examples run, hangs, leaks, RSS
  growth); printed at the end of the session, and written as JSON to the file named by
  ``PIAGENT_RELIABILITY_REPORT`` when it is set.
* ``fuzz_settings(name)``: Hypothesis settings for one fuzz target (examples by mode,
  deterministic, no database, no deadline: the machine is shared).
* ``rss_bytes()``, ``open_fds()``: the process's resident memory and open descriptors.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings

_MODES = ("short", "full")
MODE = os.environ.get("PIAGENT_RELIABILITY", "short") or "short"
if MODE not in _MODES:
    raise ValueError(f"PIAGENT_RELIABILITY must be 'short' or 'full', got {MODE!r}.")
FULL = MODE == "full"

T = TypeVar("T")


def scaled(short: T, full: T) -> T:
    """``short`` in short mode, ``full`` in full mode."""
    return full if FULL else short


class Figures:
    """Counters shared by the suite (thread-safe): ``add(key, n)``, ``set(key, value)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _values (tests may count from worker threads)
        self._values: dict[str, Any] = {}

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._values[key] = self._values.get(key, 0) + n

    def set(self, key: str, value: Any) -> None:
        with self._lock:
            self._values[key] = value

    def get(self, key: str, default: Any = 0) -> Any:
        with self._lock:
            return self._values.get(key, default)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(sorted(self._values.items()))


FIGURES = Figures()


def fuzz_settings(name: str, short: int = 150, full: int = 3000) -> settings:
    """Hypothesis settings for the fuzz target ``name`` (its examples are counted)."""
    return settings(max_examples=scaled(short, full), deadline=None, database=None,
                    derandomize=True, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def rss_bytes() -> int:
    """The resident set size of this process, from ``/proc/self/statm``."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    """How many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="session")
def figures() -> Iterator[Figures]:
    yield FIGURES


def pytest_report_header(config: pytest.Config) -> str:
    return f"piagent reliability mode: {MODE} (PIAGENT_RELIABILITY=short|full)"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    values = FIGURES.snapshot()
    if not values:
        return
    terminalreporter.section(f"piagent reliability figures ({MODE})")
    for key, value in values.items():
        terminalreporter.write_line(f"{key}: {value}")
    path = os.environ.get("PIAGENT_RELIABILITY_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"mode": MODE, **values}, f, indent=1)
