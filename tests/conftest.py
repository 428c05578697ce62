"""Shared, generic fixtures for the whole test suite."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest


@pytest.fixture
def no_thread_leak() -> Iterator[None]:
    """Fail the test if it leaves more threads alive than it found."""
    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert leaked == [], f"threads left running: {leaked}"


@pytest.fixture
def piagent_threads_back_to_baseline() -> Iterator[None]:
    """Fail the test if the thread count changed or a ``piagent*`` thread is still alive."""
    baseline = threading.active_count()
    yield
    alive = [t.name for t in threading.enumerate() if t.name.startswith("piagent")]
    assert alive == []
    assert threading.active_count() == baseline
