"""The quickstart pattern, as a user's code would write it (checked by mypy --strict)."""

from __future__ import annotations

from piagent import Agent, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def main() -> str:
    scripted = ScriptedStreamFn([
        assistant_tool_calls(("add", {"a": 2, "b": 40})),
        assistant_text("42"),
    ])
    agent = Agent(system_prompt="You are a careful calculator.", model=scripted.model,
                  tools=[add], stream_fn=scripted)
    run = agent.prompt("What is 2 + 40?")
    return run.text
