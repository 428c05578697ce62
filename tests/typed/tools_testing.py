"""@tool, piagent.testing and transcript patterns (checked by mypy --strict)."""

from __future__ import annotations

from piagent import AbortSignal, Agent, AgentEvent, ToolResultMessage, messages_to_json, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls


@tool
def repeat(word: str, times: int, signal: AbortSignal) -> str:
    """Repeat a word.

    Args:
        word: The word.
        times: How many times.
    """
    return " ".join([word] * times)


def test_repeat() -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(("repeat", {"word": "hi", "times": 2})),
                                 assistant_text("done")])
    agent = Agent(model=scripted.model, tools=[repeat], stream_fn=scripted)
    saved: list[str] = []

    def save(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "agent_end":
            saved.append(messages_to_json(agent.state.messages))

    agent.subscribe(save)
    run = agent.prompt("Say hi twice.")
    results = [m for m in run.messages if isinstance(m, ToolResultMessage)]
    assert results[0].text == "hi hi" and not results[0].is_error
    assert run.text == "done" and scripted.call_count == 2 and saved
