"""A failed run is never silent: it names the exception's type, logs one WARNING, and
``raise_for_error()`` turns it into an exception for a script that wants one."""

from __future__ import annotations

import logging

import pytest

from piagent import Agent, AgentEvent, AgentRunError, PiAgentError
from piagent.testing import ScriptedStreamFn, assistant_error, assistant_text


def test_an_exception_on_the_run_thread_names_its_type() -> None:
    scripted = ScriptedStreamFn([assistant_text("Hi.")])
    agent = Agent(model=scripted.model, stream_fn=scripted)

    def divide(event: AgentEvent, signal: object) -> None:
        if event.type == "message_end" and event.message.role == "assistant":
            1 / 0  # noqa: B018

    agent.subscribe(divide)
    run = agent.prompt("hi")
    assert run.error_message == "ZeroDivisionError: division by zero"
    assert agent.state.error_message == "ZeroDivisionError: division by zero"


def test_a_failed_run_logs_one_warning_and_raises_on_request(
        caplog: pytest.LogCaptureFixture) -> None:
    scripted = ScriptedStreamFn([assistant_error("The server said no.")])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    with caplog.at_level(logging.WARNING, logger="piagent"):
        run = agent.prompt("hi")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == ["The agent run failed: The server said no."]
    with pytest.raises(AgentRunError, match=r"^The run failed: The server said no\.$") as caught:
        run.raise_for_error()
    assert caught.value.run is run and caught.value.stop_reason == "error"
    assert isinstance(caught.value, PiAgentError) and isinstance(caught.value, RuntimeError)


def test_raise_for_error_returns_a_good_run_and_names_an_abort() -> None:
    scripted = ScriptedStreamFn([assistant_text("Fine.")])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    assert agent.prompt("hi").raise_for_error().text == "Fine."
    scripted = ScriptedStreamFn([assistant_text("unused")])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    agent.subscribe(lambda event, signal: event.type == "agent_start" and agent.abort("stop"))
    run = agent.prompt("hi")
    with pytest.raises(AgentRunError, match="^The run was aborted: ") as caught:
        run.raise_for_error()
    assert caught.value.stop_reason == "aborted"
