"""The Flask app of the end-to-end figure: one conversation per request, two ways.

``GET /floor`` runs the hand-written requests + SSE loop (``_floor.py``; a
``requests.Session`` per worker thread, so its connection is reused across requests);
``GET /piagent`` makes an ``Agent`` and calls ``prompt(...)``, blocking until the run
settles (the run executes on the request thread); ``GET /piagent_worker`` does the same
with ``prompt(..., timeout=120)`` (the run gets its own worker thread). All run ``BENCH_ROUNDS`` rounds × ``BENCH_TOOLS`` instant tools (default 5 × 2)
against the scripted server at ``BENCH_LLM_URL`` and answer with the final text.
Served by ``gunicorn -k gthread`` in ``_web_bench.py``.
"""

from __future__ import annotations

import os
import threading

import requests
from flask import Flask

from ._common import PROMPT, SYSTEM, floor_tools, piagent_tool, tool_specs
from ._floor import run_floor

__all__ = ["app"]

_URL = os.environ.get("BENCH_LLM_URL", "http://127.0.0.1:1/v1")
_ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
_TOOLS = int(os.environ.get("BENCH_TOOLS", "2"))
_MODEL = f"script:{_ROUNDS}:{_TOOLS}:instant"
_TIMEOUT_S = 120.0

app = Flask(__name__)
_local = threading.local()  # each worker thread's requests.Session (the floor's)
_specs, _fns = tool_specs("instant"), floor_tools("instant")
_tool = piagent_tool("instant")


@app.get("/floor")
def floor_view() -> tuple[str, int]:
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
    result = run_floor(session, _URL, _MODEL, SYSTEM, PROMPT, _specs, _fns,
                       max_rounds=_ROUNDS + 1, timeout_s=_TIMEOUT_S)
    answer = result.messages[-1].get("content") or ""
    return answer, 200


@app.get("/piagent")
def piagent_view() -> tuple[str, int]:
    from piagent import Agent, Model

    model = Model(id=_MODEL, api="openai-completions", provider="local", base_url=_URL)
    agent = Agent(system_prompt=SYSTEM, model=model, tools=[_tool])
    run = agent.prompt(PROMPT)
    if run.error_message:
        return run.error_message, 500
    return run.text, 200


@app.get("/piagent_worker")
def piagent_worker_view() -> tuple[str, int]:
    from piagent import Agent, Model

    model = Model(id=_MODEL, api="openai-completions", provider="local", base_url=_URL)
    agent = Agent(system_prompt=SYSTEM, model=model, tools=[_tool])
    run = agent.prompt(PROMPT, timeout=_TIMEOUT_S)
    if run.error_message:
        return run.error_message, 500
    return run.text, 200
