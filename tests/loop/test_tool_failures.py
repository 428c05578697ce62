"""A failing tool is debuggable: its type reaches the model, its traceback the developer;
a tool that ignores its signal after an abort is named once."""

from __future__ import annotations

import logging
import threading

import pytest

from piagent import AbortSignal, Agent, ToolExecutionEndEvent, ToolResultMessage, tool
from piagent.loop import _tools
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls


@tool
def read(path: str) -> str:
    """Read a file from the index."""
    index: dict[str, str] = {}
    return index["file"]


def test_raising_tool_gives_type_text_and_traceback(caplog: pytest.LogCaptureFixture) -> None:
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    agent = Agent(model=fn.model, stream_fn=fn, tools=[read])
    ends: list[ToolExecutionEndEvent] = []
    agent.subscribe(lambda e, s: ends.append(e) if isinstance(e, ToolExecutionEndEvent) else None)
    with caplog.at_level(logging.DEBUG, logger="piagent.loop"):
        agent.prompt("go")
    result = next(m for m in agent.state.messages if isinstance(m, ToolResultMessage))
    assert result.is_error and result.text == "KeyError: 'file'"
    error = result.details["error"]
    assert error["type"] == "KeyError" and error["message"] == "'file'"
    assert 'return index["file"]' in error["traceback"]
    assert ends[0].result.details["error"]["traceback"] == error["traceback"]
    record = next(r for r in caplog.records if r.name == "piagent.loop")
    assert record.getMessage() == "Tool 'read' raised KeyError: 'file'"
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    # and the model was shown the type
    sent = fn.calls[1].context.messages[-1]
    assert isinstance(sent, ToolResultMessage) and sent.text == "KeyError: 'file'"


def test_a_tool_ignoring_its_signal_is_named_once(caplog: pytest.LogCaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tools, "ABORT_GRACE_S", 0.05)
    started = threading.Event()
    release = threading.Event()
    named = threading.Event()

    @tool
    def stubborn(signal: AbortSignal) -> str:
        """Ignores its signal."""
        started.set()
        release.wait(10)
        return "late"

    class Release(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "has not returned yet" in record.getMessage():
                named.set()
                release.set()

    handler = Release()
    logging.getLogger("piagent.loop").addHandler(handler)
    try:
        fn = ScriptedStreamFn([assistant_tool_calls(("stubborn", {}))])
        agent = Agent(model=fn.model, stream_fn=fn, tools=[stubborn])
        with caplog.at_level(logging.WARNING, logger="piagent.loop"):
            run = agent.prompt("go", block=False)
            assert started.wait(10)
            run.abort()
            assert named.wait(10)
            assert run.wait(10)
    finally:
        logging.getLogger("piagent.loop").removeHandler(handler)
        release.set()
    notices = [r.getMessage() for r in caplog.records if "has not returned" in r.getMessage()]
    assert notices == [
        "The run was aborted 0.05 s ago and tool 'stubborn' (call call_1) has not returned yet; "
        "the run ends when it returns. A long-running tool should watch its signal "
        "(signal.aborted, signal.wait(timeout), signal.on_abort)."]


def test_a_tool_that_returns_promptly_after_abort_is_not_named(
        caplog: pytest.LogCaptureFixture) -> None:
    started = threading.Event()

    @tool
    def polite(signal: AbortSignal) -> str:
        """Watches its signal."""
        started.set()
        signal.wait(10)
        return "stopped"

    fn = ScriptedStreamFn([assistant_tool_calls(("polite", {}))])
    agent = Agent(model=fn.model, stream_fn=fn, tools=[polite])
    with caplog.at_level(logging.WARNING, logger="piagent.loop"):
        run = agent.prompt("go", block=False)
        assert started.wait(10)
        run.abort()
        assert run.wait(10)
    assert not [r for r in caplog.records if "has not returned" in r.getMessage()]
