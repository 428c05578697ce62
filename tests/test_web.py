"""``piagent.web``: agent events as Server-Sent Events. ``sse_events`` frames each event
with ``event_to_dict`` and closes its source when closed (for ``agent.stream`` that aborts
the run, as when a browser goes away); ``flask_response`` and ``django_response`` stream
through the Flask and Django test clients, answer 409 while the agent is busy, and a
client that stops reading mid-tool aborts the run."""

from __future__ import annotations

import json
import threading
from types import ModuleType
from typing import Any

import pytest

from piagent.abort import AbortSignal
from piagent.agent import Agent
from piagent.events import AgentEndEvent, AgentStartEvent
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.tools import tool
from piagent.web import SSE_HEADERS, django_response, flask_response, sse_events
from tests.conftest import WAIT, Gate, configure_django

# every run a test starts has settled, and its threads are gone, when it ends
pytestmark = pytest.mark.usefixtures("no_piagent_threads")


def _frames(data: bytes) -> list[dict[str, Any]]:
    out = []
    for frame in data.decode().split("\n\n"):
        if frame.startswith("data: "):
            out.append(json.loads(frame[len("data: "):]))
    return out


def _text_agent(text: str = "Hello from the agent!") -> Agent:
    fn = ScriptedStreamFn([assistant_text(text)])
    return Agent(model=fn.model, stream_fn=fn)


def _blocking_agent() -> tuple[Agent, Gate]:
    blocking = Gate("wait_here")  # never opened: it waits for the run's abort
    fn = ScriptedStreamFn([assistant_tool_calls(("wait_here", {})), assistant_text("after")])
    return Agent(model=fn.model, stream_fn=fn, tools=[blocking.tool]), blocking


# --- sse_events ---------------------------------------------------------------------------


def test_sse_events_frames_each_event():
    frames = list(sse_events([AgentStartEvent(), AgentEndEvent([])]))
    assert frames == [b'data: {"type":"agent_start"}\n\n',
                      b'data: {"type":"agent_end","messages":[]}\n\n']


def test_sse_events_closes_its_source_when_closed():
    closed = threading.Event()

    def source():
        try:
            yield AgentStartEvent()
            yield AgentStartEvent()
        finally:
            closed.set()

    frames = sse_events(source())
    next(frames)
    frames.close()
    assert closed.is_set()


def test_sse_events_reports_an_unserialisable_event():
    frames = list(sse_events([object()]))
    [frame] = _frames(b"".join(frames))
    assert frame["type"] == "stream_error"
    assert frame["error"].startswith("Could not serialise a object event: AttributeError: ")


def test_agent_stream_as_sse_is_the_whole_run():
    agent = _text_agent()
    frames = _frames(b"".join(sse_events(agent.stream("hi"))))
    types = [f["type"] for f in frames]
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    deltas = [f["assistantMessageEvent"]["delta"] for f in frames
              if f["type"] == "message_update"
              and f["assistantMessageEvent"]["type"] == "text_delta"]
    assert "".join(deltas) == "Hello from the agent!"
    assert frames[-1]["messages"][-1]["stopReason"] == "stop"


def test_closing_the_sse_generator_aborts_the_run():
    agent, blocking = _blocking_agent()
    frames = sse_events(agent.stream("go"))
    for frame in frames:
        if b'"tool_execution_start"' in frame:
            break
    assert blocking.started.wait(WAIT)
    frames.close()  # what a WSGI server does when the client has gone
    assert blocking.aborted.is_set()
    assert agent.wait_for_idle(WAIT)
    assert agent.state.messages[-1].stop_reason == "aborted"


# --- Flask ---------------------------------------------------------------------------------


flask = pytest.importorskip("flask")


def _flask_app(agent: Agent):
    app = flask.Flask(__name__)

    @app.post("/chat")
    def chat():
        return flask_response(agent, flask.request.get_json()["message"])

    return app


def test_flask_response_streams_sse():
    client = _flask_app(_text_agent()).test_client()
    response = client.post("/chat", json={"message": "hi"})
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    for name, value in SSE_HEADERS.items():
        assert response.headers[name] == value
    frames = _frames(response.data)
    assert [f["type"] for f in frames][:2] == ["agent_start", "turn_start"]
    assert frames[-1]["type"] == "agent_end"


def test_flask_response_is_409_while_busy():
    agent, blocking = _blocking_agent()
    client = _flask_app(agent).test_client()
    first = client.post("/chat", json={"message": "go"}, buffered=False)
    try:
        assert blocking.started.wait(WAIT)
        second = client.post("/chat", json={"message": "again"})
        assert second.status_code == 409
        assert second.get_json()["error"].startswith("Agent is already processing a prompt.")
    finally:
        first.close()  # the client goes away: the run is aborted
    assert blocking.aborted.wait(WAIT)
    assert agent.wait_for_idle(WAIT)


def test_flask_client_leaving_mid_tool_aborts_the_run():
    agent, blocking = _blocking_agent()
    client = _flask_app(agent).test_client()
    response = client.post("/chat", json={"message": "go"}, buffered=False)
    chunks = iter(response.response)
    while b"tool_execution_start" not in next(chunks):
        pass
    assert blocking.started.wait(WAIT)
    response.close()
    assert blocking.aborted.wait(WAIT)
    assert agent.wait_for_idle(WAIT)


# --- Django --------------------------------------------------------------------------------


def _django():
    configure_django()
    import django

    return django


def test_django_response_streams_sse():
    _django()
    from django.test import Client, override_settings
    from django.urls import path

    agent = _text_agent("Hi from Django")
    urls = ModuleType("chat_urls")
    urls.urlpatterns = [  # type: ignore[attr-defined]
        path("chat", lambda request: django_response(agent, json.loads(request.body)["message"])),
    ]
    with override_settings(ROOT_URLCONF=urls):
        response = Client().post("/chat", data={"message": "hi"},
                                 content_type="application/json")
        assert response.status_code == 200
        assert response.streaming
        assert response["Content-Type"] == "text/event-stream"
        assert response["Cache-Control"] == "no-cache"
        frames = _frames(b"".join(response.streaming_content))
    assert frames[0]["type"] == "agent_start"
    assert frames[-1]["type"] == "agent_end"
    assert frames[-1]["messages"][-1]["content"][0]["text"] == "Hi from Django"


def test_django_response_closed_early_aborts_and_busy_is_409():
    _django()
    agent, blocking = _blocking_agent()
    response = django_response(agent, "go")
    content = iter(response.streaming_content)
    while b"tool_execution_start" not in next(content):
        pass
    assert blocking.started.wait(WAIT)
    busy = django_response(agent, "again")
    assert busy.status_code == 409
    assert json.loads(busy.content)["error"].startswith("Agent is already processing")
    response.close()  # Django's handler does this when the client goes away
    assert blocking.aborted.wait(WAIT)
    assert agent.wait_for_idle(WAIT)
    assert agent.state.messages[-1].stop_reason == "aborted"


def test_a_silent_tool_gets_keep_alives_and_a_gone_client_aborts_it() -> None:
    """While a tool works without events, comments keep the stream writing, so a client
    that left is noticed (its write fails, the server closes the iterator) and the run
    is aborted while the tool still waits."""
    started = threading.Event()
    aborted: list[bool] = []

    @tool
    def slow(signal: AbortSignal) -> str:
        """Work silently until aborted."""
        started.set()
        aborted.append(signal.wait(WAIT))
        return "stopped"

    fn = ScriptedStreamFn([assistant_tool_calls(("slow", {})), assistant_text("unused")])
    agent = Agent(model=fn.model, tools=[slow], stream_fn=fn)
    frames = sse_events(agent.stream("go"), heartbeat_s=0.02)
    keep_alives = 0
    for frame in frames:
        if frame.startswith(b":") and started.is_set():
            keep_alives += 1
            if keep_alives == 3:
                break  # the client went away
    frames.close()  # what the WSGI server does when its write fails
    assert aborted == [True]
    assert not agent.state.is_streaming
    assert agent.state.messages[-1].stop_reason == "aborted"


def test_heartbeats_can_be_turned_off() -> None:
    fn = ScriptedStreamFn([assistant_text("hi")])
    agent = Agent(model=fn.model, stream_fn=fn)
    frames = list(sse_events(agent.stream("go"), heartbeat_s=None))
    assert frames and not any(f.startswith(b":") for f in frames)
