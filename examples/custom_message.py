"""An application message type: kept in the transcript, shown to the model your way.

``NoteMessage`` has its own role. ``register_message_type`` makes it save and load with
the rest of the transcript; ``convert_to_llm`` decides what the model sees of it (here a
user message; notes marked private are left out). Offline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from piagent import (
    Agent,
    SystemMessage,
    TextContent,
    UserMessage,
    message_to_dict,
    messages_from_json,
    messages_to_json,
    register_message_type,
)
from piagent.messages import now_ms
from piagent.testing import ScriptedStreamFn, assistant_text


@dataclass
class NoteMessage:
    """A note the application attaches to the conversation."""

    text: str
    private: bool = False
    timestamp: int = field(default_factory=now_ms)
    role: ClassVar[str] = "note"


register_message_type("note", NoteMessage)


def convert_to_llm(messages):
    out = []
    for m in messages:
        if isinstance(m, NoteMessage):
            if not m.private:
                out.append(UserMessage([TextContent(f"[note from the app] {m.text}")],
                                       timestamp=m.timestamp))
        elif m.role in ("system", "user", "assistant", "toolResult"):
            out.append(m)
    return out


def answer(context, options):
    seen = [m.content[0].text for m in context.messages if m.role == "user"]
    return assistant_text(f"I see {len(seen)} user messages: {seen}")


def main() -> None:
    scripted = ScriptedStreamFn([answer])
    agent = Agent(system_prompt="Be brief.", model=scripted.model, stream_fn=scripted,
                  convert_to_llm=convert_to_llm)
    agent.state.messages.append(NoteMessage("The user is on the free plan."))
    agent.state.messages.append(NoteMessage("Internal id 4711.", private=True))
    run = agent.prompt("Which plan am I on?")
    print(run.messages[-1].text)

    sent = scripted.calls[0].context.messages
    print("roles sent to the model:", [m.role for m in sent])
    assert [m.role for m in sent] == ["system", "user", "user"]
    assert all(not isinstance(m, NoteMessage) for m in sent)

    text = messages_to_json(agent.state.messages, indent=2)
    loaded = messages_from_json(text)
    assert loaded == agent.state.messages
    notes = [m for m in loaded if isinstance(m, NoteMessage)]
    assert isinstance(loaded[0], SystemMessage)
    print(f"round trip ok: {len(loaded)} messages, {len(notes)} of them notes")
    print("a note in JSON:", message_to_dict(notes[0]))


if __name__ == "__main__":
    main()
