"""The runs in progress in this process (``piagent.stream``'s count, which the loop keeps)
and the hooks called when the last one ends: the connection pools close their surplus then."""

from __future__ import annotations

import gc
import logging
import threading

import pytest

from piagent import AgentLoopConfig, run_agent_loop
from piagent.stream import run_ended, run_started, runs_in_progress, when_no_runs
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT, Recorder, user
from tests.loop.conftest import context_for
from tests.tools.conftest import make_tool


class _Counter:
    def __init__(self) -> None:
        self.calls = 0

    def hook(self) -> None:
        self.calls += 1


def test_hooks_are_called_once_when_the_last_run_ends() -> None:
    counter = _Counter()
    remove = when_no_runs(counter.hook)
    assert runs_in_progress() == 0
    run_started()
    run_started()
    assert runs_in_progress() == 2
    run_ended()
    assert counter.calls == 0  # one still going
    run_ended()
    assert runs_in_progress() == 0 and counter.calls == 1
    remove()
    run_started()
    run_ended()
    assert counter.calls == 1  # removed: not called again


def test_a_bound_method_is_held_weakly() -> None:
    counter = _Counter()
    calls: list[int] = []
    when_no_runs(counter.hook)
    remove = when_no_runs(lambda: calls.append(1))
    del counter
    gc.collect()
    run_started()
    run_ended()  # the dead method is skipped; the function is still called
    remove()
    assert calls == [1]


def test_a_hook_that_raises_is_logged_and_the_others_still_run(
        caplog: pytest.LogCaptureFixture) -> None:
    counter = _Counter()

    def broken() -> None:
        raise OSError("cannot close")

    remove = when_no_runs(broken)
    when_no_runs(counter.hook)
    with caplog.at_level(logging.ERROR, logger="piagent.stream"):
        run_started()
        run_ended()
    remove()
    assert counter.calls == 1
    assert "a when_no_runs hook failed" in caplog.text and "cannot close" in caplog.text


def test_wrong_input_fails_at_the_call() -> None:
    with pytest.raises(TypeError, match="hook must be callable, not int"):
        when_no_runs(3)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"run_ended\(\) without a run_started\(\)"):
        run_ended()


def test_the_loop_counts_its_run_while_it_goes_even_when_it_fails() -> None:
    seen: list[int] = []
    ended = threading.Event()

    def execute(tool_call_id: str, params: object, signal: object, on_update: object) -> object:
        seen.append(runs_in_progress())
        raise ValueError("tool failed")

    remove = when_no_runs(ended.set)
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})),
                           assistant_text("done")])
    run_agent_loop([user("go")], context_for(make_tool(execute=execute)),
                   AgentLoopConfig(model=fn.model, convert_to_llm=list), Recorder(),
                   stream_fn=fn)
    remove()
    assert seen == [1] and runs_in_progress() == 0
    assert ended.wait(WAIT)

    def listener(event: object) -> None:
        raise RuntimeError("listener failed")

    with pytest.raises(RuntimeError, match="listener failed"):
        run_agent_loop([user("go")], context_for(), AgentLoopConfig(
            model=fn.model, convert_to_llm=list), listener, stream_fn=fn)
    assert runs_in_progress() == 0
