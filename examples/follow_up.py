"""Follow-up messages: queued work the agent takes on only when it would otherwise stop.

A steering message goes in after the current tool batch; a follow-up waits until the agent
has nothing left to do, then starts another turn in the same run. ``continue_()`` picks
up a follow-up queued while the agent was idle. Offline.
"""

from __future__ import annotations

from piagent import Agent
from piagent.testing import ScriptedStreamFn, assistant_text


def echo(context, options):
    last_user = [m for m in context.messages if m.role == "user"][-1]
    return assistant_text(f"Done: {last_user.content[0].text}")


def main() -> None:
    scripted = ScriptedStreamFn([echo, echo, echo])
    agent = Agent(model=scripted.model, stream_fn=scripted)

    def queue_follow_up(event, signal):
        # Runs on the run's worker thread, while the first answer streams.
        if event.type == "message_start" and event.message.role == "assistant" \
                and scripted.call_count == 1:
            agent.follow_up("Now write the summary.")

    unsubscribe = agent.subscribe(queue_follow_up)
    run = agent.prompt("Outline the report.")
    unsubscribe()
    for message in run.messages:
        print(f"{message.role:>9}: {message.content[0].text}")
    assert [m.role for m in run.messages] == ["user", "assistant", "user", "assistant"]

    # Queued while idle: continue_() runs it (the transcript ends with an assistant message).
    agent.follow_up("And a title, please.")
    run = agent.continue_()
    print(f"{'continue':>9}: {run.messages[-1].content[0].text}")
    assert run.messages[-1].content[0].text == "Done: And a title, please."
    print(f"{scripted.call_count} model calls in 2 runs")


if __name__ == "__main__":
    main()
