"""A multi-user chat page on Flask: streamed text, tool progress, Stop, steering, Approve/Deny.

Run it offline (a scripted model and a slow counting tool)::

    python examples/flask_chat/app.py            # http://127.0.0.1:5000
    python examples/flask_chat/app.py --model openai/gpt-4o-mini   # needs OPENAI_API_KEY
    python examples/flask_chat/app.py --model ollama/llama3.2 --base-url http://localhost:11434/v1
    cd examples/flask_chat && gunicorn -w 4 -k gthread --threads 8 'app:create_app()'

Each browser has its own conversation (a session id in a cookie); transcripts and runs live
in one SQLite file (``--db``, or ``$PIAGENT_CHAT_DB``, default ``piagent-examples/chat.db`` in the
system's temporary folder), so any worker
process can serve any request. Routes: ``GET /`` the page; ``GET /history`` the stored
conversation and the live run; ``POST /chat {"message"}`` starts a run and answers its
``run_id``; ``GET /events/<run_id>`` streams it as Server-Sent Events with ``id:`` lines
(a reconnect resumes after ``Last-Event-ID``); ``POST /steer {"text"}`` and ``POST /stop``
act on the session's live run; ``POST /approve`` and ``POST /deny {"tool_call_id",
"digest"}`` decide a call waiting for approval (409 with the reason when refused; the last
decision answers the ``run_id`` of the run that goes on); ``GET /whoami`` names the worker
process.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask, Response, g, jsonify, request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_agent import agent_factory, page_html  # noqa: E402 - the shared demo agent, next to this file
from chat_sessions import (  # noqa: E402
    COOKIE,
    COOKIE_MAX_AGE,
    ChatService,
    db_path,
    new_session_id,
    valid_session_id,
)

from piagent.agent import Agent  # noqa: E402
from piagent.errors import AgentBusyError, ApprovalError, ApprovalPendingError  # noqa: E402
from piagent.web import flask_run_response  # noqa: E402


def _from_environment() -> Callable[[str], Agent]:
    """The agent factory gunicorn gets (no flags there): ``$PIAGENT_CHAT_MODEL`` and
    ``$PIAGENT_CHAT_BASE_URL`` choose the model, ``$PIAGENT_CHAT_STEP_S`` the tool's pace."""
    return agent_factory(os.environ.get("PIAGENT_CHAT_MODEL") or None,
                         base_url=os.environ.get("PIAGENT_CHAT_BASE_URL") or None,
                         step_s=float(os.environ.get("PIAGENT_CHAT_STEP_S") or 0.5))


def create_app(make_agent: Callable[[str], Agent] | None = None, *,
               db: str | os.PathLike[str] | None = None) -> Flask:
    """The Flask app: ``make_agent(session_id)`` builds each run's agent (default: the
    offline demo, or what the environment names), ``db`` is the SQLite file."""
    app = Flask(__name__)
    factory = make_agent if make_agent is not None else _from_environment()
    service = ChatService(factory, db if db is not None else db_path())
    app.config["CHAT"] = service
    page = page_html(factory("page"))

    @app.before_request
    def session() -> None:
        cookie = request.cookies.get(COOKIE)
        g.new_session = not valid_session_id(cookie)
        g.session_id = new_session_id() if g.new_session else cookie

    @app.after_request
    def remember(response: Response) -> Response:
        if g.get("new_session"):
            response.set_cookie(COOKIE, g.session_id, max_age=COOKIE_MAX_AGE, httponly=True,
                                samesite="Lax")
        response.headers["X-Worker-Pid"] = str(os.getpid())
        return response

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
        message = (request.get_json(silent=True) or {}).get("message", "")
        if not isinstance(message, str) or not message.strip():
            return jsonify(error="Send {\"message\": \"...\"} with some text."), 400
        try:
            run_id = service.chat(g.session_id, message)
        except (AgentBusyError, ApprovalPendingError) as exc:
            return jsonify(error=str(exc)), 409
        return jsonify(run_id=run_id)

    def decide(approved: bool) -> Any:
        body = request.get_json(silent=True) or {}
        # call_key names the call even when another waiting call has its id
        call_id, digest = body.get("call_key") or body.get("tool_call_id"), body.get("digest")
        if not isinstance(call_id, str) or not call_id or \
                not (digest is None or isinstance(digest, str)):
            return jsonify(error='Send {"call_key": "...", "digest": "..."}.'), 400
        try:
            run_id = service.decide(g.session_id, call_id, digest, approved=approved)
        except (ApprovalError, AgentBusyError) as exc:
            return jsonify(error=str(exc)), 409
        return jsonify(run_id=run_id)

    @app.post("/approve")
    def approve() -> Any:
        return decide(True)

    @app.post("/deny")
    def deny() -> Any:
        return decide(False)

    @app.get("/events/<run_id>")
    def events(run_id: str) -> Any:
        if not service.owns(g.session_id, run_id):
            return Response(f"No run {run_id!r} in this chat session.", status=404,
                            mimetype="text/plain")
        return flask_run_response(service.runner, run_id)

    @app.post("/stop")
    def stop() -> Any:
        return jsonify(service.stop(g.session_id))

    @app.post("/steer")
    def steer() -> Any:
        text = (request.get_json(silent=True) or {}).get("text", "")
        if not isinstance(text, str) or not text.strip():
            return jsonify(error="Send {\"text\": \"...\"} with some text."), 400
        if not service.steer(g.session_id, text):
            return jsonify(error="No run is active; send a chat message instead."), 409
        return jsonify(ok=True)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="provider/model-id for a real model (default: offline)")
    parser.add_argument("--base-url", metavar="URL",
                        help="an OpenAI-compatible server for --model (Ollama, vLLM, ...)")
    parser.add_argument("--db", metavar="FILE",
                        help="the SQLite file of transcripts and runs "
                             "(default: $PIAGENT_CHAT_DB, else piagent-examples/chat.db in the "
                             "temporary folder)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    app = create_app(agent_factory(args.model, base_url=args.base_url), db=db_path(args.db))
    app.run(host=args.host, port=args.port, threaded=True)


if __name__ == "__main__":
    main()
