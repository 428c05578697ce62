"""Changing the tool set mid-conversation.

``agent.state.tools`` is what the runtime can execute; what the model may call is declared
in the transcript's system messages. Before the next request the loop inserts a system
message with ``tools_added`` / ``tools_removed`` for the difference, so earlier messages
(and the provider's prompt cache) stay untouched. Offline.
"""

from __future__ import annotations

from piagent import Agent, SystemMessage, get_current_tools, tool
from piagent.testing import ScriptedStreamFn, assistant_text


@tool
def search(query: str) -> str:
    """Search the web.

    Args:
        query: What to look for.
    """
    return f"results for {query}"


@tool
def calculator(expression: str) -> str:
    """Do arithmetic.

    Args:
        expression: Like '2 + 2'.
    """
    return "4"


def main() -> None:
    scripted = ScriptedStreamFn([assistant_text("Hi."), assistant_text("Sure, I can compute.")])
    agent = Agent(system_prompt="You help.", model=scripted.model, tools=[search],
                  stream_fn=scripted)
    agent.prompt("Hello")
    print("declared:", [t.name for t in get_current_tools(agent.state.messages)])

    agent.state.tools = [calculator]  # search is gone, calculator is new
    run = agent.prompt("Can you compute now?")
    update = next(m for m in run.messages if isinstance(m, SystemMessage))
    print("tools_added:", [t.name for t in update.tools_added or []])
    print("tools_removed:", update.tools_removed)
    print("declared:", [t.name for t in get_current_tools(agent.state.messages)])
    print("roles of the second request:", [m.role for m in scripted.calls[1].context.messages])
    assert [t.name for t in update.tools_added] == ["calculator"]
    assert update.tools_removed == ["search"]
    first = agent.state.messages[0]
    assert [t.name for t in first.tools_added] == ["search"]  # the first message is untouched


if __name__ == "__main__":
    main()
