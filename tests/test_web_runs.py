"""``piagent.web`` for runs addressed by id (docs/web.md): frames carry ``id:`` lines,
a client that reconnects with ``Last-Event-ID`` gets every later event exactly once (over a
real HTTP server), an idle run gets keep-alive comments, a departed reader leaves the run
running, and an unknown run id is a 404 saying so, in Flask and in Django."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import sseclient

from piagent.agent import Agent
from piagent.runs import LocalRunner, RunEvent
from piagent.sessions import SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.web import (
    LAST_EVENT_ID,
    SSE_HEADERS,
    django_run_response,
    encode_sse,
    flask_run_response,
    run_sse_events,
)
from tests.conftest import WAIT, Gate, configure_django, serving_wsgi

# every run a test starts has settled, and its threads are gone, when it ends
pytestmark = pytest.mark.usefixtures("no_piagent_threads")


def test_encode_sse_writes_an_id_line_first() -> None:
    assert encode_sse({"type": "agent_start"}, id="000042") == \
        b'id: 000042\ndata: {"type":"agent_start"}\n\n'
    assert encode_sse({"a": 1}, "update", id="7") == b'id: 7\nevent: update\ndata: {"a":1}\n\n'
    assert encode_sse({"a": 1}) == b'data: {"a":1}\n\n'


@pytest.mark.parametrize("bad", ["1\n2", "1\r", "a\0"])
def test_encode_sse_refuses_an_id_that_would_split_the_frame(bad: str) -> None:
    with pytest.raises(ValueError, match="id must not contain a newline"):
        encode_sse({}, id=bad)


def test_encode_sse_refuses_a_non_str_id() -> None:
    with pytest.raises(TypeError, match="id must be a str, got int"):
        encode_sse({}, id=7)  # type: ignore[arg-type]


# --- a run of a real LocalRunner ------------------------------------------------------------



@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def runner(tmp_path: Path, gate: Gate) -> Iterator[LocalRunner]:
    def make_agent(session_id: str) -> Agent:
        fn = ScriptedStreamFn([assistant_tool_calls(("gate", {})),
                               assistant_text("After the gate, all is well.")],
                              chunk_delay=0.0)
        return Agent(model=fn.model, stream_fn=fn, tools=[gate.tool])

    store = SQLiteStore(tmp_path / "runs.db")
    yield LocalRunner(store, make_agent)
    gate.opened.set()
    store.close()


def _frames(data: bytes) -> list[tuple[str | None, Any]]:
    """(id, data) of every frame that has data; comments are left out."""
    out = []
    for frame in data.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.split("\n") if ": " in line
                      and not line.startswith(":"))
        if "data" in fields:
            out.append((fields.get("id"), json.loads(fields["data"])))
    return out


def _all_events(runner: LocalRunner, run_id: str) -> list[RunEvent]:
    assert runner.wait(run_id, WAIT)
    return [e for e in runner.events(run_id, timeout=WAIT) if e is not None]


def test_run_sse_events_frames_every_event_with_its_id(runner: LocalRunner,
                                                       gate: Gate) -> None:
    gate.opened.set()
    run_id = runner.start("s-frames", "go")
    frames = _frames(b"".join(run_sse_events(runner, run_id)))
    expected = _all_events(runner, run_id)
    assert frames == [(e.id, e.event) for e in expected]
    assert frames[0][1] == {"type": "agent_start"} and frames[-1][1]["type"] == "agent_end"
    ids = [i for i, _ in frames]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_run_sse_events_resumes_after_an_id(runner: LocalRunner, gate: Gate) -> None:
    gate.opened.set()
    run_id = runner.start("s-after", "go")
    expected = _all_events(runner, run_id)
    middle = expected[4].id
    frames = _frames(b"".join(run_sse_events(runner, run_id, middle)))
    assert frames == [(e.id, e.event) for e in expected[5:]]


def test_an_idle_run_gets_keep_alives_and_a_reader_leaving_does_not_stop_it(
        runner: LocalRunner, gate: Gate) -> None:
    run_id = runner.start("s-idle", "go")
    frames = run_sse_events(runner, run_id, heartbeat_s=0.02)
    keep_alives = 0
    for frame in frames:
        if frame == b": keep-alive\n\n" and gate.started.is_set():
            keep_alives += 1
            if keep_alives == 2:
                break
    frames.close()  # the reader went away
    assert runner.status(run_id).state == "running"
    gate.opened.set()
    assert runner.wait(run_id, WAIT)
    assert runner.status(run_id).state == "done"
    final = _all_events(runner, run_id)[-1].event
    assert final["messages"][-1]["content"][0]["text"] == "After the gate, all is well."


def test_run_sse_events_checks_its_arguments(runner: LocalRunner) -> None:
    with pytest.raises(ValueError, match="heartbeat_s must be a number of seconds > 0"):
        run_sse_events(runner, "x", heartbeat_s=0)
    with pytest.raises(TypeError, match="last_event_id must be a str or None, got int"):
        run_sse_events(runner, "x", 3)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="No run 'nope'"):
        run_sse_events(runner, "nope")


# --- over a real HTTP server: disconnect, then resume with Last-Event-ID --------------------

flask = pytest.importorskip("flask")


def _flask_app(runner: LocalRunner) -> Any:
    app = flask.Flask(__name__)

    @app.get("/events/<run_id>")
    def events(run_id: str) -> Any:
        return flask_run_response(runner, run_id, heartbeat_s=0.5)

    return app


@pytest.fixture
def server(runner: LocalRunner) -> Iterator[str]:
    with serving_wsgi(_flask_app(runner), "test-web-runs-server") as url:
        yield url


def test_a_client_that_reconnects_with_last_event_id_gets_every_event_exactly_once(
        runner: LocalRunner, gate: Gate, server: str) -> None:
    run_id = runner.start("s-resume", "go")
    seen: list[tuple[str, Any]] = []
    with requests.get(f"{server}/events/{run_id}", stream=True, timeout=WAIT) as first:
        assert first.status_code == 200
        assert first.headers["Content-Type"].startswith("text/event-stream")
        for name, value in SSE_HEADERS.items():
            assert first.headers[name] == value
        for message in sseclient.SSEClient(first).events():
            seen.append((message.id, json.loads(message.data)))
            if seen[-1][1]["type"] == "tool_execution_start":
                break
    # the connection is closed: the run goes on without a reader, and gets through the gate
    assert gate.started.wait(WAIT)
    assert runner.status(run_id).state == "running"
    gate.opened.set()
    assert runner.wait(run_id, WAIT)
    last_id = seen[-1][0]
    with requests.get(f"{server}/events/{run_id}", headers={LAST_EVENT_ID: last_id},
                      stream=True, timeout=WAIT) as second:
        assert second.status_code == 200
        resumed = [(m.id, json.loads(m.data)) for m in sseclient.SSEClient(second).events()]
    assert resumed[0][0] > last_id
    expected = [(e.id, e.event) for e in _all_events(runner, run_id)]
    assert seen + resumed == expected  # every event, exactly once, in order
    assert resumed[-1][1]["type"] == "agent_end"


def test_flask_run_response_unknown_run_is_404_and_a_bad_last_event_id_400(
        runner: LocalRunner, gate: Gate) -> None:
    gate.opened.set()
    client = _flask_app(runner).test_client()
    missing = client.get("/events/no-such-run")
    assert missing.status_code == 404
    assert missing.mimetype == "text/plain"
    assert missing.data.decode().startswith("No run with id 'no-such-run': it never started")
    run_id = runner.start("s-bad-id", "go")
    assert runner.wait(run_id, WAIT)
    bad = client.get(f"/events/{run_id}", headers={LAST_EVENT_ID: "yesterday"})
    assert bad.status_code == 400
    assert bad.data.decode().startswith("Bad Last-Event-ID header 'yesterday': ")
    done = client.get(f"/events/{run_id}")
    assert [f[1]["type"] for f in _frames(done.data)][-1] == "agent_end"


# --- Django --------------------------------------------------------------------------------


def test_django_run_response_reads_last_event_id_and_404s(runner: LocalRunner,
                                                          gate: Gate) -> None:
    configure_django()
    from django.test import RequestFactory

    gate.opened.set()
    run_id = runner.start("s-django", "go")
    expected = _all_events(runner, run_id)
    request = RequestFactory().get(f"/events/{run_id}", HTTP_LAST_EVENT_ID=expected[2].id)
    response = django_run_response(runner, run_id, request)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    frames = _frames(b"".join(response.streaming_content))
    assert frames == [(e.id, e.event) for e in expected[3:]]
    whole = django_run_response(runner, run_id)
    assert len(_frames(b"".join(whole.streaming_content))) == len(expected)
    missing = django_run_response(runner, "nope", request)
    assert missing.status_code == 404
    assert missing.content.decode().startswith("No run with id 'nope'")
