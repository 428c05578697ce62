"""A multi-user chat page on Flask: streamed text, tool progress, Stop, steering, Approve/Deny.

Run it offline (a scripted model and a slow counting tool; ``pip install
'piagent[sqlalchemy]' flask``, and a driver for a database server: psycopg, PyMySQL)::

    python examples/flask_chat/app.py            # http://127.0.0.1:5000
    python examples/flask_chat/app.py --model openai/gpt-4o-mini   # needs OPENAI_API_KEY
    python examples/flask_chat/app.py --db postgresql+psycopg://postgres@127.0.0.1/test
    cd examples/flask_chat && gunicorn -w 4 -k gthread --threads 8 'app:create_app()'

Each browser has its own conversation (a session id in a cookie). Transcripts, runs and
their events live in one database through SQLAlchemy (``SQLAlchemyStore`` and a
``LocalRunner`` on it): ``--db`` or ``$PIAGENT_CHAT_DB``, a SQLAlchemy URL (PostgreSQL,
MariaDB/MySQL, SQLite) or a SQLite file, by default ``piagent-examples/chat.db`` in the
system's temporary folder. Every worker process sees every run; a run executes on threads of
the worker that started it. Routes: ``GET /`` the page; ``GET /history`` the stored
conversation and the live run; ``POST /chat {"message"}`` starts a run and answers its
``run_id``; ``GET /events/<run_id>`` streams it as Server-Sent Events (a reconnect resumes
after ``Last-Event-ID``); ``POST /steer {"text"}`` and ``POST /stop`` act on the live run;
``POST /approve`` and ``POST /deny {"call_key", "digest"}`` decide a call waiting for
approval (409 with the reason when refused; the last decision answers the ``run_id`` of the
run that goes on); ``GET /whoami`` names the worker process. docs/flask.md explains it.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from flask import Flask, Response, g, jsonify, request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_agent import agent_factory, page_html  # noqa: E402 - the demo agent, next to this file

from piagent.agent import Agent  # noqa: E402
from piagent.contrib.sqlalchemy import SQLAlchemyStore  # noqa: E402
from piagent.errors import AgentBusyError, ApprovalError, ApprovalPendingError  # noqa: E402
from piagent.messages import message_to_dict  # noqa: E402
from piagent.runs import LocalRunner, RunInfo, RunNotFoundError  # noqa: E402
from piagent.web import flask_run_response  # noqa: E402

COOKIE = "piagent_chat_session"
COOKIE_MAX_AGE = 30 * 24 * 3600  # a month
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")  # what new_session_id makes
DEFAULT_DB = os.path.join(tempfile.gettempdir(), "piagent-examples", "chat.db")
STOP_WAIT_S = 5.0  # how long Stop waits for the run to settle before answering

# The example's own table, beside the store's: each browser's latest run and how many stored
# messages came before it. A reloaded page shows those messages and replays the live run's
# events from its start, so nothing is shown twice or left out.
tables = sa.MetaData()
LATEST = sa.Table("chat_latest_run", tables,
                  sa.Column("session_id", sa.String(64), primary_key=True),
                  sa.Column("run_id", sa.String(64), nullable=False),
                  sa.Column("messages_before", sa.Integer, nullable=False))


def database_url(db: str | os.PathLike[str] | None = None) -> str:
    """``db``, else ``$PIAGENT_CHAT_DB``, else ``DEFAULT_DB``: a URL, or a SQLite file."""
    value = os.fspath(db or os.environ.get("PIAGENT_CHAT_DB") or DEFAULT_DB)
    if "://" in value:
        return value
    path = Path(value).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def make_engine(url: str) -> sa.Engine:
    """The engine on ``url``; a SQLite file in WAL mode, so workers read while one writes."""
    engine = sa.create_engine(url)
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect",
                        lambda connection, _: connection.execute("PRAGMA journal_mode=WAL"))
    return engine


class ChatService:
    """The chat of every browser, for one process (each gunicorn worker makes its own)."""

    def __init__(self, make_agent: Callable[[str], Agent], engine: sa.Engine) -> None:
        self.store = SQLAlchemyStore(engine)  # creates its tables if they are missing
        try:
            tables.create_all(engine)
        except sa.exc.DatabaseError:  # another worker created it at the same moment
            tables.create_all(engine)
        self.runner = LocalRunner(self.store, make_agent)

    def _latest(self, session_id: str) -> tuple[RunInfo | None, int]:
        with self.store.engine.connect() as conn:
            row = conn.execute(sa.select(LATEST.c.run_id, LATEST.c.messages_before)
                               .where(LATEST.c.session_id == session_id)).first()
        return (self.status(row.run_id), row.messages_before) if row else (None, 0)

    def _remember(self, session_id: str, run_id: str, before: int) -> None:
        with self.store.engine.begin() as conn:  # a session starts one run at a time
            values = {"run_id": run_id, "messages_before": before}
            if not conn.execute(sa.update(LATEST).where(LATEST.c.session_id == session_id)
                                .values(values)).rowcount:
                conn.execute(sa.insert(LATEST).values(session_id=session_id, **values))

    def status(self, run_id: str) -> RunInfo | None:
        """The run, or ``None`` for an id the database does not have."""
        try:
            return self.runner.status(run_id)
        except RunNotFoundError:  # purged, or a new database
            return None

    def history(self, session_id: str) -> dict[str, Any]:
        """What a (re)loaded page shows: the stored messages, and the run to attach to.
        While a run is live, ``messages`` stops where it began: the page replays its events."""
        info, before = self._latest(session_id)  # before the load: see above
        messages = self.store.load(session_id)
        if info is not None and info.live:
            messages = messages[:before]
        approvals = [{"toolCallId": p.tool_call_id, "callKey": p.call_key,
                      "toolName": p.tool_name, "args": p.args, "digest": p.digest,
                      "decision": None if p.decision is None else
                      ("approved" if p.decision.approved else "denied")}
                     for p in self.runner.pending_approvals(session_id)]
        return {"messages": [message_to_dict(m) for m in messages if m.role != "system"],
                "run": None if info is None else {"id": info.run_id, "state": info.state},
                "approvals": approvals}

    def chat(self, session_id: str, text: str) -> str:
        """Start a run (``AgentBusyError`` while one is live in any worker); its id."""
        before = len(self.store.load(session_id))
        run_id = self.runner.start(session_id, text)
        self._remember(session_id, run_id, before)
        return run_id

    def decide(self, session_id: str, call_key: str, digest: str | None, *,
               approved: bool) -> str | None:
        """Approve or deny a waiting call (``ApprovalError`` if it is unknown, decided, or
        its arguments changed since the page showed them: ``digest``). When this completed
        the batch, the next run starts here: its id."""
        before = len(self.store.load(session_id))
        decide = self.runner.approve if approved else self.runner.deny
        reason = None if approved else "the user clicked Deny"
        run_id = decide(session_id, call_key, reason=reason, digest=digest)
        if run_id is not None:
            self._remember(session_id, run_id, before)
        return run_id

    def live_run(self, session_id: str) -> str | None:
        info, _ = self._latest(session_id)
        return info.run_id if info is not None and info.live else None

    def stop(self, session_id: str) -> dict[str, Any]:
        """Abort the live run, if any, and wait (bounded) for it to settle. A steering
        message it had not taken yet stays queued for the session's next run."""
        run_id = self.live_run(session_id)
        if run_id is None:
            return {"ok": True, "settled": True}
        self.runner.abort(run_id, "Stopped by the user")
        return {"ok": True, "settled": self.runner.wait(run_id, STOP_WAIT_S)}

    def close(self) -> None:
        self.store.engine.dispose()


def create_app(make_agent: Callable[[str], Agent] | None = None, *,
               db: str | os.PathLike[str] | None = None) -> Flask:
    """The Flask app: ``make_agent(session_id)`` builds each run's agent (default: the
    offline demo, or what ``$PIAGENT_CHAT_MODEL``, ``$PIAGENT_CHAT_BASE_URL`` and
    ``$PIAGENT_CHAT_STEP_S`` name: gunicorn passes no flags), ``db`` as ``database_url``."""
    app = Flask(__name__)
    factory = make_agent or agent_factory(
        os.environ.get("PIAGENT_CHAT_MODEL") or None,
        base_url=os.environ.get("PIAGENT_CHAT_BASE_URL") or None,
        step_s=float(os.environ.get("PIAGENT_CHAT_STEP_S") or 0.5))
    service = app.config["CHAT"] = ChatService(factory, make_engine(database_url(db)))
    page = page_html(factory("page"))

    @app.before_request
    def session() -> None:
        cookie = request.cookies.get(COOKIE)
        g.new_session = cookie is None or not _SESSION_ID.fullmatch(cookie)
        # unguessable: the cookie is the only key to a conversation
        g.session_id = secrets.token_urlsafe(18) if g.new_session else cookie

    @app.after_request
    def remember(response: Response) -> Response:
        if g.get("new_session"):
            response.set_cookie(COOKIE, g.session_id, max_age=COOKIE_MAX_AGE, httponly=True,
                                samesite="Lax")
        response.headers["X-Worker-Pid"] = str(os.getpid())
        return response

    def refused(message: str, status: int = 400) -> tuple[Response, int]:
        return jsonify(error=message), status

    def text_field(name: str) -> str | None:
        value = (request.get_json(silent=True) or {}).get(name)
        return value if isinstance(value, str) and value.strip() else None

    @app.get("/")
    def index() -> Response:
        return Response(page, mimetype="text/html")

    @app.get("/whoami")
    def whoami() -> Any:
        return jsonify(pid=os.getpid())

    @app.get("/history")
    def history() -> Any:
        return jsonify(service.history(g.session_id))

    @app.post("/chat")
    def chat() -> Any:
        if (message := text_field("message")) is None:
            return refused('Send {"message": "..."} with some text.')
        try:
            return jsonify(run_id=service.chat(g.session_id, message))
        except (AgentBusyError, ApprovalPendingError) as exc:
            return refused(str(exc), 409)

    def decide(approved: bool) -> Any:
        body = request.get_json(silent=True) or {}
        # call_key names the call even when another waiting call has its id
        call_key, digest = body.get("call_key") or body.get("tool_call_id"), body.get("digest")
        if not isinstance(call_key, str) or not call_key or \
                not (digest is None or isinstance(digest, str)):
            return refused('Send {"call_key": "...", "digest": "..."}.')
        try:
            return jsonify(run_id=service.decide(g.session_id, call_key, digest,
                                                 approved=approved))
        except (ApprovalError, AgentBusyError) as exc:
            return refused(str(exc), 409)

    app.post("/approve", endpoint="approve")(lambda: decide(True))
    app.post("/deny", endpoint="deny")(lambda: decide(False))

    @app.get("/events/<run_id>")
    def events(run_id: str) -> Any:
        info = service.status(run_id)
        if info is None or info.session_id != g.session_id:  # a browser streams its own only
            return Response(f"No run {run_id!r} in this chat session.", status=404,
                            mimetype="text/plain")
        return flask_run_response(service.runner, run_id)

    @app.post("/stop")
    def stop() -> Any:
        return jsonify(service.stop(g.session_id))

    @app.post("/steer")
    def steer() -> Any:
        if (text := text_field("text")) is None:
            return refused('Send {"text": "..."} with some text.')
        if service.live_run(g.session_id) is None:
            return refused("No run is active; send a chat message instead.", 409)
        service.runner.steer(g.session_id, text)
        return jsonify(ok=True)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="provider/model-id for a real model (default: offline)")
    parser.add_argument("--base-url", metavar="URL",
                        help="an OpenAI-compatible server for --model (Ollama, vLLM, ...)")
    parser.add_argument("--db", metavar="URL_OR_FILE",
                        help="a SQLAlchemy database URL or a SQLite file (default: "
                             "$PIAGENT_CHAT_DB, else piagent-examples/chat.db in the "
                             "temporary folder)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    app = create_app(agent_factory(args.model, base_url=args.base_url), db=args.db)
    app.run(host=args.host, port=args.port, threaded=True)


if __name__ == "__main__":
    main()
