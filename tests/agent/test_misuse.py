"""Silent misuse of the Agent fails at once, with a message that says what is accepted."""

from __future__ import annotations

from typing import Any

import pytest

from piagent import Agent, UserMessage
from piagent.testing import ScriptedStreamFn, assistant_text


def _agent() -> Agent:
    fn = ScriptedStreamFn([assistant_text("ok")])
    return Agent(model=fn.model, stream_fn=fn)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"role": "user", "content": "hi"}, "pass the text as a str, or UserMessage(content=...)"),
        (123, "prompt() got int 123; it accepts a str, a message"),
        (None, "prompt() got NoneType None; it accepts a str"),
        (["hi", "there"], "prompt() got a list containing the str 'hi'"),
        ([{"role": "user", "content": "hi"}], "prompt() got a dict"),
    ],
)
def test_prompt_refuses_what_is_not_a_message(value: Any, words: str) -> None:
    agent = _agent()
    with pytest.raises(TypeError) as info:
        agent.prompt(value)
    assert words in str(info.value)
    assert agent.state.messages == []  # nothing reached the transcript


def test_steer_and_follow_up_refuse_a_list() -> None:
    agent = _agent()
    with pytest.raises(TypeError, match=r"steer\(\) got list \['a'\]; it accepts a str"):
        agent.steer(["a"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"follow_up\(\) got a dict"):
        agent.follow_up({"role": "user", "content": "x"})  # type: ignore[arg-type]
    assert not agent.has_queued_messages()


def test_prompt_still_takes_str_message_and_list() -> None:
    fn = ScriptedStreamFn([assistant_text("a"), assistant_text("b"), assistant_text("c")])
    agent = Agent(model=fn.model, stream_fn=fn)
    agent.prompt("one")
    agent.prompt(UserMessage(content="two"))
    agent.prompt([UserMessage(content="three")])
    assert [m.role for m in agent.state.messages] == ["user", "assistant"] * 3


def test_one_parameter_listener_is_refused_at_subscribe() -> None:
    agent = _agent()
    with pytest.raises(TypeError) as info:
        agent.subscribe(lambda event: None)  # type: ignore[arg-type,misc]
    text = str(info.value)
    assert "must take two arguments, (event, signal)" in text
    assert "lambda event, signal: ..." in text
    with pytest.raises(TypeError, match="takes a callable listener"):
        agent.subscribe("print")  # type: ignore[arg-type]


def test_listeners_that_take_two_or_varargs_are_accepted() -> None:
    agent = _agent()
    seen: list[str] = []
    agent.subscribe(lambda event, signal: seen.append(event.type))
    agent.subscribe(lambda *args: None)
    agent.subscribe(print)
    agent.prompt("hi")
    assert seen[0] == "agent_start"


def test_scripted_response_misuse_is_refused_when_scripted() -> None:
    with pytest.raises(TypeError, match=r"for text write assistant_text\('hello'\)"):
        ScriptedStreamFn(["hello"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"must take two arguments \(context, options\)"):
        ScriptedStreamFn([lambda context: assistant_text("x")])  # type: ignore[list-item,misc]
    fn = ScriptedStreamFn()
    with pytest.raises(TypeError, match="add_response.*assistant_text"):
        fn.add_response("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wrap the one you have"):
        fn.set_responses(assistant_text("x"))  # type: ignore[arg-type]
    fn.add_response(lambda context, options: assistant_text("ok"))
    assert fn.remaining == 1


def test_scripted_stream_fn_keeps_a_bounded_record() -> None:
    fn = ScriptedStreamFn([assistant_text(str(i)) for i in range(5)], keep_calls=2)
    agent = Agent(model=fn.model, stream_fn=fn)
    for i in range(5):
        agent.prompt(f"q{i}")
    assert fn.call_count == 5
    assert len(fn.calls) == 2
    assert fn.calls[-1].context.messages[-1].text == "q4"
    assert repr(fn) == "ScriptedStreamFn(calls=5, remaining=0, keep_calls=2)"
    with pytest.raises(ValueError, match="keep_calls must be None"):
        ScriptedStreamFn(keep_calls=-1)
