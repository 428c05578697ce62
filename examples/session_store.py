"""Keep a conversation in a session store: a SQLite file any process on the machine can read.

``Agent(store=..., session_id=...)`` appends each message to the store as it ends; a later
process (here: a second ``Agent`` on a new store object) loads the session and carries on.
Pass a file path to keep the database:

    python examples/session_store.py /tmp/chat.db
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from piagent import Agent
from piagent.sessions import SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text


def remember(context, options):
    users = [m.content[0].text for m in context.messages if m.role == "user"]
    return assistant_text(f"So far you said: {' | '.join(users)}")


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "chat.db"
    with SQLiteStore(path) as store:
        scripted = ScriptedStreamFn([remember, remember])
        agent = Agent(system_prompt="You remember things.", model=scripted.model,
                      stream_fn=scripted, store=store, session_id="user-42")
        agent.prompt("My name is Linh.")
        agent.prompt("I like green tea.")
        print(f"stored {len(store.load('user-42'))} messages in {path.name}")

    with SQLiteStore(path) as store:  # later, another process
        scripted = ScriptedStreamFn([remember])
        agent = Agent(model=scripted.model, stream_fn=scripted, store=store, session_id="user-42")
        run = agent.prompt("What do you know about me?")
        print(run.text)
        print("sessions:", store.session_ids())


if __name__ == "__main__":
    main()
