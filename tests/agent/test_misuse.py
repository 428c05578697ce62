"""Silent misuse of the Agent fails at once, with a message that says what is accepted.

``MISUSE`` is the table of every front-door check (issue 27): the call, the exception type
and the exact message. Each check runs at the call (a constructor, an assignment, a
method), never per turn.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from piagent import (
    Agent,
    AgentContext,
    AgentLoopConfig,
    StreamOptions,
    UserMessage,
    default_convert_to_llm,
    tool,
)
from piagent.providers import get_model, get_providers, resolve_model
from piagent.testing import ScriptedStreamFn, assistant_text


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def plain(text: str) -> str:  # a tool function without @tool
    return text


def _agent() -> Agent:
    fn = ScriptedStreamFn([assistant_text("ok")])
    return Agent(model=fn.model, stream_fn=fn)


def _set(attribute: str, value: Any) -> Callable[[], object]:
    """An assignment to ``agent.state.<attribute>``."""
    return lambda: setattr(_agent().state, attribute, value)


def _config(**options: Any) -> AgentLoopConfig:
    return AgentLoopConfig(**{"model": None, "convert_to_llm": default_convert_to_llm, **options})


def _run_wait(timeout: Any) -> object:
    return _agent().prompt("hi").wait(timeout)


def _row(ident: str, kind: type[Exception], call: Callable[[], object], message: str) -> Any:
    return pytest.param(call, kind, message, id=ident)


MISUSE = [
    _row("model-bare-id", ValueError, lambda: Agent(model="gpt-4o-mini"),
         "model: 'gpt-4o-mini' is not PROVIDER/MODEL: write one of "
         "'azure/gpt-4o-mini', 'cloudflare-ai-gateway/gpt-4o-mini', 'openai/gpt-4o-mini'."),
    _row("model-unknown-bare", ValueError, lambda: Agent(model="llama3"),
         "model: 'llama3' is not PROVIDER/MODEL (for example 'openai/gpt-4o-mini'); for a "
         "model the catalogue does not list, use get_model(provider, model_id, base_url=...) "
         "or build Model(id=..., api=..., provider=..., base_url=...)."),
    _row("model-int", TypeError, lambda: Agent(model=42),
         "model must be a Model (piagent.providers.get_model('openai', 'gpt-4o-mini')), a "
         "'PROVIDER/MODEL' str or None, got int 42."),
    _row("model-unknown-provider", LookupError, lambda: Agent(model="nosuch/x"),
         f"model: Unknown provider 'nosuch'. Known providers: {', '.join(get_providers())}. "
         "For any other server build Model(id=..., api=..., provider=..., base_url=...)."),
    _row("tools-plain-function", TypeError, lambda: Agent(tools=[plain]),
         "tools[0] is the function 'plain', not an AgentTool: decorate it with @tool (from "
         "piagent import tool), or pass tool(plain)."),
    _row("tools-one-tool", TypeError, lambda: Agent(tools=ping),
         "tools must be a list of AgentTool, got one AgentTool ('ping'): wrap it in a list, "
         "tools=[ping]."),
    _row("tools-one-function", TypeError, lambda: Agent(tools=plain),
         "tools must be a list of AgentTool, got the function 'plain': decorate it with @tool "
         "and wrap it in a list, tools=[plain]."),
    _row("tools-str", TypeError, lambda: Agent(tools="ping"),
         "tools must be a list of AgentTool (functions decorated with @tool), got str 'ping'."),
    _row("tools-not-a-tool", TypeError, lambda: Agent(tools=[ping, 3]),
         'tools[1] is int 3, not an AgentTool: build tools with @tool, or AgentTool(name=..., '
         'description=..., parameters=..., execute=...).'),
    _row("tools-duplicate", ValueError, lambda: Agent(tools=[ping, ping]),
         "tools has two tools named 'ping' (tools[0] and tools[1]): the model calls a tool by "
         "its name, so each needs its own; rename one (@tool(name=...))."),
    _row("messages-dict", TypeError, lambda: Agent(messages=[{"role": "user", "content": "hi"}]),
         "messages[0] is a dict, not a message: build it (UserMessage(content='...'), "
         "AssistantMessage(...)) or load pi's JSON with message_from_dict()."),
    _row("messages-str-item", TypeError, lambda: Agent(messages=["hi"]),
         "messages[0] is the str 'hi', not a message: write UserMessage(content='hi')."),
    _row("messages-str", TypeError, lambda: Agent(messages="hi"),
         "messages must be a list of messages, got str 'hi': a first prompt goes to "
         "agent.prompt('hi')."),
    _row("messages-one", TypeError, lambda: Agent(messages=UserMessage(content="hi")),
         'messages must be a list of messages, got one UserMessage: wrap it in a list, '
         'messages=[message].'),
    _row("messages-int-item", TypeError, lambda: Agent(messages=[UserMessage(content="hi"), 5]),
         'messages[1] is int 5, not a message; a transcript holds UserMessage, '
         'AssistantMessage, ToolResultMessage, SystemMessage, or a dataclass with a role '
         'registered with register_message_type.'),
    _row("system-prompt-int", TypeError, lambda: Agent(system_prompt=123),
         'system_prompt must be a str, got int 123.'),
    _row("tool-execution-typo", ValueError, lambda: Agent(tool_execution="paralel"),
         "tool_execution must be 'parallel' or 'sequential', got 'paralel'."),
    _row("thinking-level-typo", ValueError, lambda: Agent(thinking_level="hight"),
         "thinking_level must be one of 'off', 'minimal', 'low', 'medium', 'high', 'xhigh', "
         "'max', got 'hight'."),
    _row("steering-mode-typo", ValueError, lambda: Agent(steering_mode="one"),
         "steering_mode must be 'one-at-a-time' or 'all', got 'one'."),
    _row("temperature-str", TypeError, lambda: Agent(temperature="0.2"),
         "temperature must be a number from 0 to 2, or None, got str '0.2'."),
    _row("temperature-high", ValueError, lambda: Agent(temperature=7),
         'temperature must be from 0 to 2, got 7.'),
    _row("temperature-nan", ValueError, lambda: Agent(temperature=math.nan),
         'temperature must be from 0 to 2, got nan.'),
    # issue 49 item 6: another library's name for an option says piagent's
    _row("max-turns", TypeError, lambda: Agent(max_turns=3),
         "Agent() got an unexpected keyword argument 'max_turns'; use "
         "limits=Limits(max_requests=...) (one request per turn) instead."),
    _row("instructions", TypeError, lambda: Agent(instructions="Be brief."),
         "Agent() got an unexpected keyword argument 'instructions'; use system_prompt=... "
         "instead."),
    _row("keyword-typo", TypeError, lambda: Agent(modle="openai/gpt-4o"),
         "Agent() got an unexpected keyword argument 'modle'; use model=... instead."),
    _row("keyword-unknown", TypeError, lambda: Agent(zzz=1),
         "Agent() got an unexpected keyword argument 'zzz' (help(Agent) lists the options)."),
    _row("positional", TypeError, lambda: Agent("openai/gpt-4o"),
         "Agent() takes keyword arguments only (Agent(model=..., tools=...)), got 1 "
         "positional."),
    _row("max-tokens-zero", ValueError, lambda: Agent(max_tokens=0),
         'max_tokens must be an int >= 1 or None, got 0.'),
    _row("max-tokens-float", TypeError, lambda: Agent(max_tokens=1.5),
         'max_tokens must be an int >= 1 or None, got float 1.5.'),
    _row("max-parallel-tools-zero", ValueError, lambda: Agent(max_parallel_tools=0),
         'max_parallel_tools must be an int >= 1 or None (no cap), got 0.'),
    _row("max-retry-delay-negative", ValueError, lambda: Agent(max_retry_delay_ms=-5),
         'max_retry_delay_ms must be a number of milliseconds >= 0, got -5.'),
    _row("hook-not-callable", TypeError, lambda: Agent(before_tool_call="log"),
         "before_tool_call must be a callable or None, got str 'log'."),
    _row("stream-fn-not-callable", TypeError, lambda: Agent(stream_fn="openai"),
         "stream_fn must be a callable or None, got str 'openai'."),
    _row("api-key-int", TypeError, lambda: Agent(api_key=123),
         'api_key must be a str or None, got int 123.'),
    _row("timeout-ms-negative", ValueError, lambda: Agent(timeout_ms=-1),
         'StreamOptions.timeout_ms must be a positive, finite number of milliseconds, got -1.'),
    _row("tool-executor-str", TypeError, lambda: Agent(tool_executor="pool"),
         'tool_executor must be a concurrent.futures.Executor (a ThreadPoolExecutor, say) or '
         'None, not str.'),
    _row("state-messages-dict", TypeError, _set("messages", [{"role": "user", "content": "hi"}]),
         "state.messages[0] is a dict, not a message: build it (UserMessage(content='...'), "
         "AssistantMessage(...)) or load pi's JSON with message_from_dict()."),
    _row("state-tools-plain", TypeError, _set("tools", [plain]),
         "state.tools[0] is the function 'plain', not an AgentTool: decorate it with @tool "
         "(from piagent import tool), or pass tool(plain)."),
    _row("state-tools-duplicate", ValueError, _set("tools", [ping, ping]),
         "state.tools has two tools named 'ping' (state.tools[0] and state.tools[1]): the "
         "model calls a tool by its name, so each needs its own; rename one (@tool(name=...))."),
    _row("state-model-bare-id", ValueError, _set("model", "gpt-4o-mini"),
         "state.model: 'gpt-4o-mini' is not PROVIDER/MODEL: write one of "
         "'azure/gpt-4o-mini', 'cloudflare-ai-gateway/gpt-4o-mini', 'openai/gpt-4o-mini'."),
    _row("state-thinking-level", ValueError, _set("thinking_level", "hi"),
         "state.thinking_level must be one of 'off', 'minimal', 'low', 'medium', 'high', "
         "'xhigh', 'max', got 'hi'."),
    _row("options-temperature-str", TypeError, lambda: StreamOptions(temperature="0.2"),
         "temperature must be a number from 0 to 2, or None, got str '0.2'."),
    _row("options-temperature-high", ValueError, lambda: StreamOptions(temperature=2.5),
         'temperature must be from 0 to 2, got 2.5.'),
    _row("options-max-tokens-zero", ValueError, lambda: StreamOptions(max_tokens=0),
         'max_tokens must be an int >= 1 or None, got 0.'),
    _row("options-max-retries-negative", ValueError, lambda: StreamOptions(max_retries=-1),
         'max_retries must be an int >= 0 or None, got -1.'),
    _row("options-reasoning-typo", ValueError, lambda: StreamOptions(reasoning="hight"),
         "reasoning must be one of 'off', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max', "
         "or None, got 'hight'."),
    _row("config-model-str", TypeError, lambda: _config(model="openai/gpt-4o-mini"),
         "model must be a Model or None, got str 'openai/gpt-4o-mini': resolve a "
         "'PROVIDER/MODEL' name first, piagent.providers.resolve_model('openai/gpt-4o-mini')."),
    _row("config-convert-none", TypeError, lambda: _config(convert_to_llm=None),
         'convert_to_llm must be a callable (messages -> messages), e.g. '
         'piagent.default_convert_to_llm, got NoneType None.'),
    _row("config-tool-execution", ValueError, lambda: _config(tool_execution="paralel"),
         "tool_execution must be 'parallel' or 'sequential', got 'paralel'."),
    _row("config-max-parallel-bool", TypeError, lambda: _config(max_parallel_tools=True),
         'max_parallel_tools must be an int >= 1 or None (no cap), got bool True.'),
    _row("config-hook", TypeError, lambda: _config(finish_turn="end"),
         "finish_turn must be a callable or None, got str 'end'."),
    _row("context-duplicate-tools", ValueError, lambda: AgentContext(tools=[ping, ping]),
         "AgentContext.tools has two tools named 'ping' (AgentContext.tools[0] and "
         "AgentContext.tools[1]): the model calls a tool by its name, so each needs its own; "
         "rename one (@tool(name=...))."),
    _row("prompt-dict", TypeError, lambda: _agent().prompt({"role": "user", "content": "hi"}),
         "prompt() got a dict {'role': 'user', 'content': 'hi'}, not a message; for {'role': "
         "'user', 'content': ...} pass the text as a str, or UserMessage(content=...)."),
    _row("prompt-image-path", TypeError, lambda: _agent().prompt("What is this?", images=["cat.png"]),
         "prompt(): images[0] is str 'cat.png', not an ImageContent: read the file and pass "
         "ImageContent(data=base64.b64encode(data).decode(), mime_type='image/png')."),
    _row("prompt-images-str", TypeError, lambda: _agent().prompt("What is this?", images="cat.png"),
         "prompt(): images= must be a list of ImageContent, got str 'cat.png'."),
    _row("prompt-timeout-str", TypeError, lambda: _agent().prompt("hi", timeout="10"),
         "timeout must be a number of seconds or None, got str '10'."),
    _row("prompt-timeout-negative", ValueError, lambda: _agent().prompt("hi", timeout=-1),
         'timeout must be a number of seconds >= 0 or None, got -1.'),
    _row("prompt-timeout-nan", ValueError, lambda: _agent().prompt("hi", timeout=math.nan),
         'timeout must be a number of seconds >= 0 or None, got nan.'),
    _row("continue-timeout-str", TypeError, lambda: _agent().continue_(timeout="10"),
         "timeout must be a number of seconds or None, got str '10'."),
    _row("wait-for-idle-negative", ValueError, lambda: _agent().wait_for_idle(-1),
         'timeout must be a number of seconds >= 0 or None, got -1.'),
    _row("run-wait-str", TypeError, lambda: _run_wait("1"),
         "timeout must be a number of seconds or None, got str '1'."),
    _row("steer-list", TypeError, lambda: _agent().steer(["a"]),
         "steer() got list ['a']; it accepts a str, a message (UserMessage, AssistantMessage, "
         "ToolResultMessage, SystemMessage, or a dataclass with a role registered with "
         "register_message_type)."),
    _row("steer-dict", TypeError, lambda: _agent().steer({"role": "user", "content": "x"}),
         "steer() got a dict {'role': 'user', 'content': 'x'}, not a message; for {'role': "
         "'user', 'content': ...} pass the text as a str, or UserMessage(content=...)."),
    _row("follow-up-int", TypeError, lambda: _agent().follow_up(5),
         'follow_up() got int 5; it accepts a str, a message (UserMessage, AssistantMessage, '
         'ToolResultMessage, SystemMessage, or a dataclass with a role registered with '
         'register_message_type).'),
    _row("resolve-model-bare", ValueError, lambda: resolve_model("gpt-4o-mini"),
         "'gpt-4o-mini' is not PROVIDER/MODEL: write one of "
         "'azure/gpt-4o-mini', 'cloudflare-ai-gateway/gpt-4o-mini', 'openai/gpt-4o-mini'."),
    _row("resolve-model-int", TypeError, lambda: resolve_model(5),
         "resolve_model() takes a 'PROVIDER/MODEL' str, got int."),
]


@pytest.mark.parametrize(("call", "kind", "message"), MISUSE)
def test_misuse_fails_at_the_call_with_the_exact_message(
        call: Callable[[], object], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind) as caught:
        call()
    assert type(caught.value) is kind
    assert str(caught.value) == message


def test_what_the_checks_accept() -> None:
    agent = Agent(model="openai/gpt-4o-mini", system_prompt=None, tools=(ping,),
                  temperature=0, max_tokens=1, max_parallel_tools=1, max_retry_delay_ms=0)
    assert agent.state.model == get_model("openai", "gpt-4o-mini")
    assert resolve_model("openrouter/openai/gpt-4o-mini").id == "openai/gpt-4o-mini"
    local = resolve_model("openai/gpt-4o-mini", base_url="http://127.0.0.1:8765/v1")
    assert (local.api, local.base_url) == ("openai-completions", "http://127.0.0.1:8765/v1")
    agent.state.model = "openai/gpt-4o"
    assert agent.state.model is not None and agent.state.model.id == "gpt-4o"
    agent.state.tools = iter([ping])
    assert agent.state.tools == [ping]
    agent.state.messages = (UserMessage(content="hi"),)
    assert [m.role for m in agent.state.messages] == ["user"]
    StreamOptions(temperature=2.0, max_retries=0, reasoning="off", max_retry_delay_ms=1.5)


def test_an_infinite_timeout_waits_without_limit() -> None:
    agent = _agent()
    run = agent.prompt("hi", timeout=math.inf)
    assert run.text == "ok"
    assert run.wait(math.inf) and agent.wait_for_idle(math.inf)


def test_a_refused_assignment_leaves_the_state_as_it_was() -> None:
    agent = _agent()
    agent.state.tools = [ping]
    agent.prompt("hi")
    before = list(agent.state.messages)
    with pytest.raises(TypeError):
        agent.state.messages = [*before, {"role": "user", "content": "again"}]  # type: ignore[list-item]
    with pytest.raises(ValueError):
        agent.state.tools = [ping, ping]
    assert agent.state.messages == before and agent.state.tools == [ping]


def test_a_tool_without_a_docstring_is_built_with_a_warning() -> None:
    with pytest.warns(UserWarning, match=r"^@tool 'plain': the function has no docstring, so "
                                         r"the model gets an empty description"):
        built = tool(plain)
    assert built.description == ""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tool(plain, description="Echo the text.")  # a description given: no warning


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
