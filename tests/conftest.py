"""Shared, generic fixtures for the whole test suite."""

from __future__ import annotations

import os
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


# Skips that stand for a missing component (node, a browser, a server) are fine on a
# developer's machine but not in CI: ``.ci/run`` sets PIAGENT_REQUIRE_ALL=1, which turns
# every skip into a failure except the documentation blocks marked ``<!-- no-run -->``.
_ALLOWED_SKIPS = ("marked no-run",)


def _require(report: pytest.TestReport | pytest.CollectReport) -> None:
    if (os.environ.get("PIAGENT_REQUIRE_ALL") == "1" and report.skipped
            and not hasattr(report, "wasxfail")):
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr or "")
        if not any(allowed in reason for allowed in _ALLOWED_SKIPS):
            report.outcome = "failed"
            report.longrepr = f"skipped, but PIAGENT_REQUIRE_ALL=1 requires it to run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _require(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _require(outcome.get_result())
