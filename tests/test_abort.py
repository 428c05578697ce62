"""AbortController / AbortSignal: a threading.Event with reasons and on_abort callbacks."""

from __future__ import annotations

import threading

import pytest

from piagent import AbortController, AbortSignal


def test_signal_is_an_event_that_fires_once_with_a_reason() -> None:
    controller = AbortController()
    signal = controller.signal
    assert isinstance(signal, threading.Event) and isinstance(signal, AbortSignal)
    assert not signal.aborted and signal.reason is None
    controller.abort("user-interrupt")
    controller.abort("second")
    assert signal.aborted and signal.is_set() and signal.reason == "user-interrupt"


def test_on_abort_runs_once_on_the_aborting_thread() -> None:
    controller = AbortController()
    seen: list[str] = []
    controller.signal.on_abort(lambda: seen.append(threading.current_thread().name))
    worker = threading.Thread(target=controller.abort, name="aborter")
    worker.start()
    worker.join(5)
    controller.abort()
    assert seen == ["aborter"]


def test_on_abort_after_abort_runs_at_once_and_unregister_works() -> None:
    controller = AbortController()
    seen: list[int] = []
    unregister = controller.signal.on_abort(lambda: seen.append(1))
    unregister()
    unregister()  # idempotent
    controller.abort()
    assert seen == []
    controller.signal.on_abort(lambda: seen.append(2))
    assert seen == [2]


def test_a_failing_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    controller = AbortController()
    seen: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    controller.signal.on_abort(broken)
    controller.signal.on_abort(lambda: seen.append("ok"))
    controller.abort()
    assert seen == ["ok"]
    assert "on_abort callback raised" in caplog.text


def test_wait_wakes_on_abort_from_another_thread() -> None:
    controller = AbortController()
    started = threading.Event()
    woke: list[bool] = []

    def sleeper() -> None:
        started.set()
        woke.append(controller.signal.wait(10))

    thread = threading.Thread(target=sleeper)
    thread.start()
    assert started.wait(5)
    controller.abort()
    thread.join(5)
    assert woke == [True]


def test_signal_cannot_be_cleared() -> None:
    with pytest.raises(RuntimeError, match="new AbortController"):
        AbortController().signal.clear()
