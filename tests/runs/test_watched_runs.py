"""``piagent.runs.backend.WatchedRuns``, what every runs backend's readers wait on: changes
are counted only while a reader watches the run, the count goes when the last reader
leaves, and a waiting reader is woken by a change from another thread."""

from __future__ import annotations

import threading

from piagent.runs.backend import WatchedRuns
from tests.conftest import WAIT


def test_changes_count_only_while_a_reader_watches() -> None:
    watched = WatchedRuns()
    watched.changed("r")  # nobody watches: nothing kept
    with watched.cond:
        assert watched.version("r") == 0
    watched.enter("r")
    watched.enter("r")  # two readers of one run
    watched.changed("r", "other")
    watched.changed("r")
    with watched.cond:
        assert (watched.version("r"), watched.version("other")) == (2, 0)
    watched.leave("r")
    with watched.cond:
        assert watched.version("r") == 2  # one reader is still there
    watched.leave("r")
    watched.leave("r")  # one leave too many is no error
    with watched.cond:
        assert watched.version("r") == 0  # the last one left: forgotten


def test_a_waiting_reader_wakes_when_its_run_changes() -> None:
    watched = WatchedRuns()
    watched.enter("r")
    with watched.cond:
        seen = watched.version("r")
    waiting = threading.Event()  # set by the reader just before it waits
    woken: list[bool] = []

    def reader() -> None:
        with watched.cond:
            waiting.set()  # the lock is released only inside wait_for: no change is missed
            woken.append(watched.cond.wait_for(lambda: watched.version("r") != seen, WAIT))

    thread = threading.Thread(target=reader)
    thread.start()
    assert waiting.wait(WAIT)
    watched.changed("r")
    thread.join(WAIT)
    assert not thread.is_alive() and woken == [True]
    watched.leave("r")
