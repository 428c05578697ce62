"""The piagent side of the request differential: ``pi_request_driver.mjs``'s mirror.

One conversation (``request_conversations``) runs through piagent's ``Agent`` with its real
adapters: the model is ``get_model(provider, id, base_url=..., api=...)`` at the capture
server, which records the requests.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from piagent import (
    AbortSignal,
    Agent,
    AgentEvent,
    AgentMessage,
    AgentTool,
    AgentToolResult,
    ImageContent,
    SystemMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
    message_from_dict,
)
from piagent.models import Model
from piagent.providers import get_model, stream_simple
from piagent.stream import AssistantMessageEventStream, Context, StreamOptions
from tests.conftest import WAIT

KEY = "sk-request-differential"
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJ"
       "RU5ErkJggg==")
_clock = [1700000000000]


def _now() -> int:
    _clock[0] += 1
    return _clock[0]


def _weather(args: dict[str, Any]) -> AgentToolResult:
    return AgentToolResult([TextContent(f"Sunny in {args['city']}")], {})


def _fail(args: dict[str, Any]) -> AgentToolResult:
    raise RuntimeError("boom")


_EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
DEFS_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "required": ["p"],
    "additionalProperties": False,
    "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
TOOLS: dict[str, tuple[str, dict[str, Any], Any]] = {
    "weather": ("Weather of a city", {"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"]}, _weather),
    "noargs": ("Takes nothing", _EMPTY, lambda a: AgentToolResult([TextContent("pong")], {})),
    "fail": ("Always fails", _EMPTY, _fail),
    "image": ("Returns an image", _EMPTY, lambda a: AgentToolResult(
        [TextContent("here"), ImageContent(PNG, "image/png")], {})),
    "defs": ("Takes a point (a schema with $defs, as MCP servers send)", DEFS_SCHEMA,
             lambda a: AgentToolResult([TextContent("ok")], {})),
    "lookup": ("Looks a number up", {"type": "object", "properties": {"n": {"type": "integer"}}},
               lambda a: AgentToolResult([TextContent(f"found {a['n']}")], {})),
    "titled": ("A Pydantic-style schema (root title and description)", {
        "title": "Point", "description": "A point", "type": "object",
        "properties": {"x": {"title": "X", "type": "integer", "minimum": 0}},
        "required": ["x"]}, lambda a: AgentToolResult([TextContent("ok")], {})),
}


def tool(name: str) -> AgentTool:
    description, parameters, run = TOOLS[name]

    def execute(call_id: str, args: Any, signal: AbortSignal, on_update: Any) -> AgentToolResult:
        result: AgentToolResult = run(args)
        return result

    return AgentTool(name=name, description=description, parameters=parameters,
                     execute=execute, label=name)


def _user(step: dict[str, Any]) -> UserMessage:
    content: list[Any] = [TextContent(step["prompt"])]
    content += [ImageContent(PNG, "image/png") for _ in range(step.get("images", 0))]
    return UserMessage(content=content, timestamp=_now())


def _edit(agent: Agent, kind: str) -> None:
    messages = agent.state.messages
    target = next((m for m in messages if isinstance(m, ToolResultMessage)), None)
    if kind == "delete":
        index = next(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
        del messages[index:index + 2]
        return
    assert target is not None, "the edit needs a tool result"
    if kind == "mutate":
        target.content[0].text = "[compacted]"  # type: ignore[union-attr]
    elif kind == "reassign":
        target.content = [TextContent("[compacted]")]
    elif kind == "replace":
        agent.state.messages = [dataclasses.replace(m, content=[TextContent("[compacted]")])
                                if m is target else m for m in messages]
    else:
        raise ValueError(kind)


def _transform(kind: str | None) -> Any:
    if kind is None:
        return None

    def transform(messages: list[AgentMessage], signal: AbortSignal) -> list[AgentMessage]:
        results = [m for m in messages if isinstance(m, ToolResultMessage)]
        for message in results[:-1]:
            if kind == "mutate":
                message.content[0].text = "[compacted]"  # type: ignore[union-attr]
            else:
                message.content = [TextContent("[compacted]")]
        return messages

    return transform


def _mark(payload: Any, model: Any) -> None:
    items = payload.get("messages") or payload.get("input") or payload.get("contents")
    last = items[-1]
    if isinstance(last.get("content"), list):
        last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    elif isinstance(last.get("parts"), list):
        last["parts"][-1]["x_marker"] = True
    else:
        last["x_marker"] = True


def run(conv: dict[str, Any], spec: dict[str, str]) -> None:
    """Run ``conv`` against the model ``spec`` (provider, id, api, baseUrl)."""
    with warnings.catch_warnings():  # "outside": the guessed limits are the point of the run
        warnings.simplefilter("ignore", UserWarning)
        model = get_model(spec["provider"], spec["id"], base_url=spec["baseUrl"], api=spec["api"])
    if conv.get("compat"):
        model = dataclasses.replace(model, compat={**(model.compat or {}), **conv["compat"]})
    retention = conv.get("retention")

    def stream_fn(model: Model | None, context: Context,
                  options: StreamOptions | None = None) -> AssistantMessageEventStream:
        if retention is not None and options is not None:
            options = dataclasses.replace(options, cache_retention=retention)
        return stream_simple(model, context, options)

    tools = [tool(n) for n in conv["tools"]]
    for t in tools:  # pi's constrainedSampling: an attribute to_tool_declaration reads
        if conv.get("constrained"):
            t.constrained_sampling = conv["constrained"]  # type: ignore[attr-defined]
    agent = Agent(system_prompt=conv["system"], model=model,
                  thinking_level=conv.get("thinking", "off"),
                  tools=tools, get_api_key=lambda provider: KEY,
                  transform_context=_transform(conv.get("transform")),
                  on_payload=_mark if conv.get("payload") == "mark" else None,
                  session_id=conv.get("session"), stream_fn=stream_fn)
    pending: dict[str, Any] = {}

    def listen(event: AgentEvent, signal: AbortSignal | None) -> None:
        if pending.get("steer") and event.type == "tool_execution_end":
            agent.steer(UserMessage(content=[TextContent(pending.pop("steer"))],
                                    timestamp=_now()))
        if pending.get("abort") and event.type == "message_update" \
                and getattr(event.assistant_message_event, "type", None) == "text_delta":
            pending.pop("abort")
            agent.abort()

    agent.subscribe(listen)
    for step in conv["steps"]:
        if "prompt" in step:
            pending.update(steer=step.get("steer"), abort=step.get("abort", False))
            agent.prompt(_user(step), timeout=WAIT * 3)
        elif "follow_up" in step:
            agent.follow_up(UserMessage(content=[TextContent(step["follow_up"])],
                                        timestamp=_now()))
            agent.continue_(timeout=WAIT * 3)
        elif "continue" in step:
            agent.continue_(timeout=WAIT * 3)
        elif "system" in step:
            agent.state.messages.append(SystemMessage(content=step["system"], timestamp=_now()))
        elif "set_tools" in step:
            agent.state.tools = [tool(n) for n in step["set_tools"]]
        elif "thinking" in step:
            agent.state.thinking_level = step["thinking"]
        elif "edit" in step:
            _edit(agent, step["edit"])
        elif "append" in step:
            agent.state.messages.extend(message_from_dict(m) for m in step["append"])
        else:
            raise ValueError(f"unknown step {step}")
