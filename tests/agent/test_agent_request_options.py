"""The request options pi-agent-core hands through to pi-ai (``on_payload``, ``on_response``,
``on_provider_stream_event``, ``identity``, ``timeout_ms``, ``env``) go from ``Agent``
keywords (public attributes, replaceable between runs) and from ``AgentLoopConfig``
through the loop to the stream function, unchanged; wrong values fail at construction."""

from __future__ import annotations

from typing import Any

import pytest

from piagent import AgentContext, AgentLoopConfig, run_agent_loop
from piagent.agent import default_convert_to_llm
from piagent.messages import UserMessage
from piagent.stream import ClientIdentity
from piagent.testing import ScriptedStreamFn, assistant_text

from .conftest import make_agent


def on_payload(body: Any, model: Any) -> Any:
    return None


def on_response(response: Any, model: Any) -> None:
    return None


def on_event(data: Any, model: Any) -> None:
    return None


IDENTITY = ClientIdentity(user_agent="short")
ENV = {"OPENAI_API_KEY": "sk-env"}
OPTIONS: dict[str, Any] = {"on_payload": on_payload, "on_response": on_response,
                           "on_provider_stream_event": on_event, "identity": IDENTITY,
                           "timeout_ms": 1500, "env": ENV}


def _forwarded(options: Any) -> dict[str, Any]:
    return {name: getattr(options, name) for name in OPTIONS}


def test_agent_keywords_reach_the_stream_function() -> None:
    agent, fn = make_agent([assistant_text("ok"), assistant_text("again")], **OPTIONS)
    agent.prompt("hi")
    assert _forwarded(fn.calls[0].options) == OPTIONS
    assert all(_forwarded(fn.calls[0].options)[k] is v for k, v in OPTIONS.items())

    agent.timeout_ms = None  # public attributes: replaced between runs
    agent.identity = None
    agent.prompt("again")
    assert (fn.calls[1].options.timeout_ms, fn.calls[1].options.identity) == (None, None)
    assert fn.calls[1].options.on_payload is on_payload


def test_agent_without_them_sends_none() -> None:
    agent, fn = make_agent([assistant_text("ok")])
    agent.prompt("hi")
    assert _forwarded(fn.calls[0].options) == dict.fromkeys(OPTIONS)


def test_the_loop_forwards_them() -> None:
    fn = ScriptedStreamFn([assistant_text("ok")])
    config = AgentLoopConfig(model=fn.model, convert_to_llm=default_convert_to_llm, **OPTIONS)
    run_agent_loop([UserMessage("hi")], AgentContext([], []), config, lambda event: None,
                   stream_fn=fn)
    assert _forwarded(fn.calls[0].options) == OPTIONS


@pytest.mark.parametrize(("name", "value", "text"), [
    ("on_response", "print", "StreamOptions.on_response must be a callable or None, got str."),
    ("timeout_ms", -5, "StreamOptions.timeout_ms must be a positive, finite number of "
                       "milliseconds, got -5."),
])
def test_wrong_values_fail_at_construction(name: str, value: Any, text: str) -> None:
    fn = ScriptedStreamFn([])
    with pytest.raises((TypeError, ValueError)) as caught:
        make_agent([], **{name: value})
    assert str(caught.value) == text
    with pytest.raises((TypeError, ValueError)) as caught:
        AgentLoopConfig(model=fn.model, convert_to_llm=default_convert_to_llm, **{name: value})
    assert str(caught.value) == text
