"""Hello, agent: one prompt, one tool call, streamed text.

Runs offline on a scripted model. With ``--model PROVIDER/MODEL`` (and the provider's key
in the environment, e.g. OPENAI_API_KEY) the same code talks to a real model:

    python examples/hello.py
    python examples/hello.py --model openai/gpt-4o-mini
"""

from __future__ import annotations

import argparse

from piagent import Agent, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls


@tool
def greet(name: str) -> str:
    """Make a greeting for someone.

    Args:
        name: Who to greet.
    """
    return f"Hello, {name}! Welcome to piagent."


def show(event, signal):
    """A listener: print the assistant's text as it streams, and each tool call."""
    if event.type == "message_update":
        update = event.assistant_message_event
        if update.type == "text_delta":
            print(update.delta, end="", flush=True)
        elif update.type == "text_end":
            print()
    elif event.type == "tool_execution_start":
        print(f"[tool] {event.tool_name}({event.args})")
    elif event.type == "tool_execution_end":
        print(f"[tool] {event.tool_name} -> {event.result.content[0].text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="PROVIDER/MODEL for a real provider (default: offline)")
    args = parser.parse_args()

    if args.model:
        from piagent.providers import get_model

        provider, _, model_id = args.model.partition("/")
        agent = Agent(system_prompt="You are friendly and brief.",
                      model=get_model(provider, model_id), tools=[greet])
    else:
        # The scripted model calls the tool, then answers with what the tool returned.
        scripted = ScriptedStreamFn([
            assistant_tool_calls(("greet", {"name": "Ada"}), text="Let me greet Ada."),
            lambda context, options: assistant_text(
                f"The greet tool says: {context.messages[-1].text}"),
        ], chunk_delay=0.01)
        agent = Agent(system_prompt="You are friendly and brief.", model=scripted.model,
                      tools=[greet], stream_fn=scripted)

    agent.subscribe(show)
    run = agent.prompt("Please greet Ada using the greet tool.")
    if run.error_message:
        print("error:", run.error_message)
        raise SystemExit(1)
    print("final answer:", run.messages[-1].text)


if __name__ == "__main__":
    main()
