"""The Flask streaming pattern of docs/web.md (checked by mypy --strict)."""

from __future__ import annotations

from flask import Flask, Response, request

from piagent import Agent
from piagent.testing import ScriptedStreamFn, assistant_text
from piagent.web import flask_response

fn = ScriptedStreamFn([assistant_text("Hello from Flask!")])
agent = Agent(model=fn.model, stream_fn=fn)
app = Flask(__name__)


@app.post("/chat")
def chat() -> Response:
    return flask_response(agent, request.get_json()["message"])


@app.post("/stop")
def stop() -> dict[str, bool]:
    agent.abort("Stopped by the user")
    return {"ok": True}
