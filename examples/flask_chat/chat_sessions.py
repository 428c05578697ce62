"""What the Django chat example does per browser, with no web framework in it (the Flask
example has its own, on ``SQLAlchemyStore``: ``app.py``; this file goes when the Django
example moves onto ``piagent.contrib.django``).

One session per browser (a random id in a cookie); transcripts and runs in one SQLite file
(``SQLiteStore`` plus ``LocalRunner``), so every worker process of a gunicorn on this
machine sees the same conversations: a run started by one worker is streamed, steered and
stopped from any other. The run executes on threads of the worker that started it.

Beside the store's tables this keeps one small table of its own, ``chat_runs``: each
session's latest run and how many stored messages came before it. A reloaded page shows
those messages from the transcript and replays the live run's events from its start, so
nothing is shown twice or left out.

A run that stops at a tool call marked ``needs_approval`` ends ``waiting``; its calls live in
the store, so the Approve or Deny button may be served by any worker, even after every
process restarted. The decision that completes the batch starts the next run, in the
deciding worker (docs/approvals.md).
"""

from __future__ import annotations

import os
import re
import secrets
import sqlite3
import tempfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from piagent.agent import Agent
from piagent.messages import message_to_dict
from piagent.runs import LocalRunner, RunInfo, RunNotFoundError
from piagent.sessions import SQLiteStore

COOKIE = "piagent_chat_session"
COOKIE_MAX_AGE = 30 * 24 * 3600  # a month
DB_VARIABLE = "PIAGENT_CHAT_DB"  # where the SQLite file lives, unless --db says otherwise
# outside the checkout (a run from the repository leaves nothing behind), one path for every
# worker process of this machine
DEFAULT_DB = os.path.join(tempfile.gettempdir(), "piagent-examples", "chat.db")
STOP_WAIT_S = 5.0  # how long Stop waits for the run to settle before answering
LIVE = ("queued", "running")


def db_path(flag: str | None = None) -> str:
    """The SQLite file: ``--db``, else ``$PIAGENT_CHAT_DB``, else ``DEFAULT_DB``
    (``piagent-examples/chat.db`` in the system's temporary folder)."""
    return flag or os.environ.get(DB_VARIABLE) or DEFAULT_DB


def new_session_id() -> str:
    return secrets.token_urlsafe(18)  # unguessable: the cookie is the only key to a chat


_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")


def valid_session_id(value: str | None) -> bool:
    """Whether a cookie holds a session id this app would have made (else a new one is)."""
    return value is not None and _SESSION_ID.fullmatch(value) is not None


class ChatService:
    """The chat of every browser, for one process (each gunicorn worker makes its own)."""

    def __init__(self, make_agent: Callable[[str], Agent], path: str | os.PathLike[str], *,
                 lease_s: float = 30.0) -> None:
        self.path = os.fspath(path)
        Path(self.path).resolve().parent.mkdir(parents=True, exist_ok=True)
        self.store = SQLiteStore(self.path)
        self.runner = LocalRunner(self.store, make_agent, lease_s=lease_s)
        with closing(self._connect()) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS chat_runs (session_id TEXT PRIMARY KEY, "
                       "run_id TEXT NOT NULL, before INTEGER NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        # one short-lived connection per call: safe from any thread and any process
        return sqlite3.connect(self.path, timeout=30.0)

    def _latest(self, session_id: str) -> tuple[str, int] | None:
        with closing(self._connect()) as db:
            row = db.execute("SELECT run_id, before FROM chat_runs WHERE session_id = ?",
                             (session_id,)).fetchone()
        return (str(row[0]), int(row[1])) if row else None

    def _status(self, run_id: str) -> RunInfo | None:
        try:
            return self.runner.status(run_id)
        except RunNotFoundError:  # the store no longer has it (a new file, say)
            return None

    def live_run(self, session_id: str) -> str | None:
        """The session's run while it is queued or running, else ``None``."""
        latest = self._latest(session_id)
        info = self._status(latest[0]) if latest else None
        return info.run_id if info is not None and info.state in LIVE else None

    def history(self, session_id: str) -> dict[str, Any]:
        """What a (re)loaded page shows: the stored messages, and the live run to attach to.

        While a run is live, ``messages`` stops where that run began: the page replays the
        run's events from its start (``/events/<run_id>``), its prompt included.
        """
        latest = self._latest(session_id)
        info = self._status(latest[0]) if latest else None  # before the load: see above
        messages = self.store.load(session_id)
        run: dict[str, Any] | None = None
        if latest and info is not None:
            run = {"id": info.run_id, "state": info.state}
            if info.state in LIVE:
                messages = messages[:latest[1]]
        shown = [message_to_dict(m) for m in messages if m.role != "system"]
        approvals = [{"toolCallId": p.tool_call_id, "callKey": p.call_key,
                      "toolName": p.tool_name, "args": p.args, "digest": p.digest,
                      "decision": None if p.decision is None else
                      ("approved" if p.decision.approved else "denied")}
                     for p in self.runner.pending_approvals(session_id)]
        return {"messages": shown, "run": run, "approvals": approvals}

    def chat(self, session_id: str, text: str) -> str:
        """Start a run of the session (``AgentBusyError`` while one is live); its id."""
        before = len(self.store.load(session_id))
        run_id = self.runner.start(session_id, text)
        self._remember(session_id, run_id, before)
        return run_id

    def _remember(self, session_id: str, run_id: str, before: int) -> None:
        with closing(self._connect()) as db, db:
            db.execute("INSERT INTO chat_runs (session_id, run_id, before) VALUES (?, ?, ?) "
                       "ON CONFLICT (session_id) DO UPDATE SET run_id = excluded.run_id, "
                       "before = excluded.before", (session_id, run_id, before))

    def decide(self, session_id: str, tool_call_id: str, digest: str | None, *,
               approved: bool) -> str | None:
        """Approve or deny a waiting call (``ApprovalError`` if it is unknown, decided
        already, or its arguments changed since the page showed them: ``digest``). When this
        completed the batch, the next run starts here: its id, which the page streams."""
        before = len(self.store.load(session_id))
        decide = self.runner.approve if approved else self.runner.deny
        reason = None if approved else "the user clicked Deny"
        run_id = decide(session_id, tool_call_id, reason=reason, digest=digest)
        if run_id is not None:
            self._remember(session_id, run_id, before)
        return run_id

    def owns(self, session_id: str, run_id: str) -> bool:
        """Whether ``run_id`` is a run of this session (a browser streams only its own)."""
        info = self._status(run_id)
        return info is not None and info.session_id == session_id

    def steer(self, session_id: str, text: str) -> bool:
        """Queue a steering message for the live run; False when no run is live."""
        if self.live_run(session_id) is None:
            return False
        self.runner.steer(session_id, text)
        return True

    def stop(self, session_id: str) -> dict[str, Any]:
        """Abort the live run (if any) and wait, bounded, for it to settle.

        A steering message the run had not taken yet stays queued for the session's next
        run (the runner's queues, like an Agent's, outlive a run).
        """
        run_id = self.live_run(session_id)
        if run_id is None:
            return {"ok": True, "settled": True}
        self.runner.abort(run_id, "Stopped by the user")
        settled = self.runner.wait(run_id, STOP_WAIT_S)
        return {"ok": True, "settled": settled}

    def close(self) -> None:
        close = getattr(self.runner, "close", None)
        if callable(close):
            close()
        self.store.close()
