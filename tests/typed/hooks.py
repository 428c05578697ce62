"""Hook and listener patterns a user's code would contain (checked by mypy --strict)."""

from __future__ import annotations

from collections.abc import Callable

from piagent import (
    AbortSignal,
    AfterToolCallContext,
    AfterToolCallResult,
    Agent,
    AgentEvent,
    AgentMessage,
    AgentTurnContext,
    AssistantMessage,
    BeforeToolCallContext,
    BeforeToolCallResult,
    SystemMessage,
    TextContent,
    ToolResultMessage,
    TurnDecision,
)
from piagent.testing import ScriptedStreamFn, assistant_text

FinishTurn = Callable[[AgentTurnContext, AbortSignal], TurnDecision | None]


def show(event: AgentEvent, signal: AbortSignal) -> None:
    if event.type == "message_update":
        update = event.assistant_message_event
        if update.type == "text_delta":
            print(update.delta, end="")


def approve(ctx: BeforeToolCallContext, signal: AbortSignal) -> BeforeToolCallResult | None:
    command = ctx.args.get("command", "")
    return None if str(command).startswith("ls") else BeforeToolCallResult(block=True)


def redact(ctx: AfterToolCallContext, signal: AbortSignal) -> AfterToolCallResult | None:
    text = "".join(b.text for b in ctx.result.content if isinstance(b, TextContent))
    return AfterToolCallResult(content=[TextContent(text.replace("secret", "***"))])


def at_most(turns: int) -> FinishTurn:
    def finish_turn(turn: AgentTurnContext, signal: AbortSignal) -> TurnDecision | None:
        done = sum(1 for m in turn.new_messages if isinstance(m, AssistantMessage))
        return "end" if done >= turns else None
    return finish_turn


def keep_system(messages: list[AgentMessage], signal: AbortSignal) -> list[AgentMessage]:
    return [m for m in messages if isinstance(m, SystemMessage)] + messages[-4:]


def main() -> list[ToolResultMessage]:
    scripted = ScriptedStreamFn([assistant_text("hi")])
    agent = Agent(model=scripted.model, stream_fn=scripted, before_tool_call=approve,
                  after_tool_call=redact, finish_turn=at_most(3), transform_context=keep_system)
    agent.subscribe(show)
    run = agent.prompt("Hello")
    return [m for m in run.messages if isinstance(m, ToolResultMessage)]
