"""A chat page on Flask: streamed text, tool progress, Stop and steering.

Run it offline (a scripted model and a slow counting tool)::

    python examples/flask_chat/app.py            # http://127.0.0.1:5000
    python examples/flask_chat/app.py --model openai/gpt-4o-mini   # needs OPENAI_API_KEY
    python examples/flask_chat/app.py --model ollama/llama3.2 --base-url http://localhost:11434/v1

Routes: ``GET /`` the page; ``POST /chat {"message"}`` streams the run as Server-Sent
Events (``piagent.web.flask_response``); ``POST /stop`` aborts it; ``POST /steer
{"text"}`` queues a steering message. One agent serves the whole process: a demo for one
user, not a multi-user server.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flask import Flask, Response, jsonify, request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_agent import make_agent, page_html  # noqa: E402 - the shared demo agent, next to this file

from piagent.agent import Agent  # noqa: E402
from piagent.web import flask_response  # noqa: E402

STOP_WAIT_S = 5.0  # how long Stop waits for the run to settle before answering


def create_app(agent: Agent | None = None) -> Flask:
    """The Flask app serving ``agent`` (default: the offline demo agent)."""
    app = Flask(__name__)
    chat_agent = agent if agent is not None else make_agent()
    app.config["AGENT"] = chat_agent

    @app.get("/")
    def page() -> Response:
        return Response(page_html(chat_agent), mimetype="text/html")

    @app.post("/chat")
    def chat() -> Any:
        message = (request.get_json(silent=True) or {}).get("message", "")
        if not isinstance(message, str) or not message.strip():
            return jsonify(error="Send {\"message\": \"...\"} with some text."), 400
        return flask_response(chat_agent, message)

    @app.post("/stop")
    def stop() -> Any:
        # Stop means stop: what was steered into this run is not carried into the next one.
        # The queues outlive an abort (undelivered input goes back to them when the run
        # settles), so wait for that, then drop what is left.
        chat_agent.abort("Stopped by the user")
        settled = chat_agent.wait_for_idle(STOP_WAIT_S)
        dropped = chat_agent.take_queued_messages(lambda message: True)
        return jsonify(ok=True, settled=settled, dropped=[m.text for m in dropped])

    @app.post("/steer")
    def steer() -> Any:
        text = (request.get_json(silent=True) or {}).get("text", "")
        if not isinstance(text, str) or not text.strip():
            return jsonify(error="Send {\"text\": \"...\"} with some text."), 400
        if not chat_agent.state.is_streaming:
            return jsonify(error="No run is active; send a chat message instead."), 409
        chat_agent.steer(text)
        return jsonify(ok=True)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="provider/model-id for a real model (default: offline)")
    parser.add_argument("--base-url", metavar="URL",
                        help="an OpenAI-compatible server for --model (Ollama, vLLM, ...)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    app = create_app(make_agent(args.model, base_url=args.base_url))
    app.run(host=args.host, port=args.port, threaded=True)


if __name__ == "__main__":
    main()
