"""Save a conversation and resume it later, in a new process or a new ``Agent``.

``messages_to_json`` writes pi's JSON (camelCase keys, the same as the TypeScript pi
writes); ``messages_from_json`` reads it back. A listener saves after every run, so
nothing is lost if the program stops. Pass a file path to keep the transcript around:

    python examples/save_resume.py /tmp/chat.json
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from piagent import Agent, messages_from_json, messages_to_json
from piagent.testing import ScriptedStreamFn, assistant_text


def remember(context, options):
    users = [m.content[0].text for m in context.messages if m.role == "user"]
    return assistant_text(f"So far you said: {' | '.join(users)}")


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "chat.json"

    # Session 1: talk, saving after every run.
    scripted = ScriptedStreamFn([remember, remember])
    agent = Agent(system_prompt="You remember things.", model=scripted.model,
                  stream_fn=scripted)

    def save(event, signal):
        if event.type == "agent_end":
            path.write_text(messages_to_json(agent.state.messages, indent=2), encoding="utf-8")

    agent.subscribe(save)
    agent.prompt("My name is Linh.")
    agent.prompt("I like green tea.")
    print(f"saved {len(agent.state.messages)} messages to {path}")

    # Session 2: a fresh Agent picks up where the first one stopped.
    loaded = messages_from_json(path.read_text(encoding="utf-8"))
    scripted2 = ScriptedStreamFn([remember])
    resumed = Agent(model=scripted2.model, messages=loaded, stream_fn=scripted2)
    print("system prompt after loading:", resumed.state.system_prompt)
    run = resumed.prompt("What do you know about me?")
    print(run.messages[-1].text)
    assert "My name is Linh." in run.messages[-1].text
    assert resumed.state.messages[: len(loaded)] == loaded


if __name__ == "__main__":
    main()
