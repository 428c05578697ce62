"""Steering: a message typed while a tool runs, delivered after the tool batch.

The main thread starts the run without blocking (``block=False``), waits until the tool is
running, and calls ``agent.steer(...)``. The message waits in the queue until the batch
is done (no tool is interrupted), then goes in before the next model call. Offline.
"""

from __future__ import annotations

import threading

from piagent import Agent, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

started = threading.Event()
release = threading.Event()


@tool
def survey(topic: str) -> str:
    """Survey the literature on a topic (takes a while).

    Args:
        topic: What to survey.
    """
    started.set()
    release.wait(5)  # stands in for slow work
    return f"Found 12 papers on {topic}; 3 are from this year."


def answer(context, options):
    last_user = [m for m in context.messages if m.role == "user"][-1]
    steer = last_user.content[0].text
    return assistant_text(f"Survey done. As you asked ({steer!r}): the 3 papers from this year.")


def main() -> None:
    scripted = ScriptedStreamFn([
        assistant_tool_calls(("survey", {"topic": "agent loops"})),
        answer,
    ])
    agent = Agent(model=scripted.model, tools=[survey], stream_fn=scripted)
    agent.subscribe(lambda event, signal: print("event:", event.type)
                    if event.type in ("tool_execution_start", "tool_execution_end", "turn_end",
                                      "agent_end") else None)

    run = agent.prompt("Survey agent loops for me.", block=False)
    assert started.wait(5), "the tool did not start"
    agent.steer("Only list the ones from this year.")  # from the main thread, mid-tool
    print("steered while the tool was running")
    release.set()
    assert run.wait(10), "the run did not finish"

    roles = [m.role for m in run.messages]
    print("transcript:", " -> ".join(roles))
    print(run.messages[-1].text)
    assert roles == ["user", "assistant", "toolResult", "user", "assistant"], roles
    assert scripted.call_count == 2  # the steer rode along with the call that was due anyway


if __name__ == "__main__":
    main()
