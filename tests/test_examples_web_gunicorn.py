"""The Flask chat example under a real gunicorn with four worker processes
(docs/web.md), on SQLite, MariaDB and PostgreSQL (its ``$PIAGENT_CHAT_DB`` a
URL, docs/flask.md).

One browser's requests land on different workers (each response names its worker in
``X-Worker-Pid``, and the test holds a keep-alive connection to each worker): a run is
started in one worker, streamed from a second, steered from a third; the stream is dropped
mid-run and resumed with ``Last-Event-ID`` from a fourth, which gets every event exactly
once; a second run is stopped from another worker than the one running it. The run itself
executes on threads of the worker that started it; they meet in the database. Skips
when gunicorn is not installed (``pip install -e .[test]`` has it)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import sseclient

from tests.conftest import CHAT_COOKIE, SLOW_WAIT, Gunicorn, gunicorn_server
from tests.contrib.conftest import _mariadb, _postgresql

if sys.platform == "win32" or importlib.util.find_spec("gunicorn") is None:
    pytest.skip("the gunicorn test needs gunicorn (pip install gunicorn; not on Windows)",
                allow_module_level=True)

pytest.importorskip("flask")

ROOT = Path(__file__).resolve().parent.parent
# the Django example under gunicorn: tests/test_browser_django.py
APPS = {"flask": (ROOT / "examples" / "flask_chat", "app:create_app()")}
SERVERS = [("flask", "sqlite"), ("flask", "mariadb"), ("flask", "postgresql")]
WORKERS = 4


@pytest.fixture(scope="module", params=SERVERS, ids=lambda p: "-".join(p))
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gunicorn]:
    kind, database = request.param
    example, app = APPS[kind]
    with contextlib.ExitStack() as stack:
        if database == "sqlite":
            db = str(tmp_path_factory.mktemp("gunicorn") / "chat.db")
        else:  # a database of this module's own, dropped after it
            own = _mariadb() if database == "mariadb" else _postgresql()
            db = next(own).url
            stack.callback(own.close)
        env = {"PIAGENT_CHAT_DB": db, "PIAGENT_CHAT_STEP_S": "0.25"}
        with gunicorn_server(example, app, env, workers=WORKERS,
                             args=("--keep-alive", "60")) as started:
            yield started


CONNECT_WITHIN_S = 60.0  # seconds: how long connect() tries to reach another worker


class Workers:
    """Keep-alive connections of one browser (one cookie), one per worker process."""

    def __init__(self, server: Gunicorn) -> None:
        self.server = server
        self.cookie = f"gunicorn-test-{uuid.uuid4().hex}"  # a new browser for each test
        self.sessions: dict[int, requests.Session] = {}

    def connect(self, exclude: set[int]) -> int:
        """A connection to a worker not in ``exclude``; its pid."""
        # which worker accepts a new connection is the kernel's choice; on a loaded machine
        # one worker can lose hundreds of races in a row, so the bound is time, not tries
        deadline, tries = time.monotonic() + CONNECT_WITHIN_S, 0
        while time.monotonic() < deadline:
            tries += 1
            session = requests.Session()
            adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=1)
            session.mount("http://", adapter)
            session.cookies.set(CHAT_COOKIE, self.cookie)
            pid = int(session.get(f"{self.server.url}/whoami", timeout=SLOW_WAIT).json()["pid"])
            if pid not in exclude and pid not in self.sessions:
                self.sessions[pid] = session
                return pid
            session.close()
        pytest.fail(f"{tries} connections in {CONNECT_WITHIN_S:g} s never reached a worker "
                    f"outside {exclude}")

    def request(self, pid: int, method: str, path: str, **kwargs: Any) -> requests.Response:
        response = self.sessions[pid].request(method, f"{self.server.url}{path}",
                                              timeout=SLOW_WAIT, **kwargs)
        assert int(response.headers["X-Worker-Pid"]) == pid, "the request changed workers"
        return response

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()


@pytest.fixture
def workers(server: Gunicorn) -> Iterator[Workers]:
    found = Workers(server)
    yield found
    found.close()


def _events(response: requests.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    for message in sseclient.SSEClient(response).events():
        yield message.id, json.loads(message.data)


def test_start_stream_steer_and_resume_on_four_different_workers(server: Gunicorn,
                                                                 workers: Workers) -> None:
    starter = workers.connect(set())
    streamer = workers.connect({starter})
    steerer = workers.connect({starter, streamer})
    resumer = workers.connect({starter, streamer, steerer})
    assert {starter, streamer, steerer, resumer} == server.pids  # four processes, one each

    started = workers.request(starter, "POST", "/chat", json={"message": "count to 12"})
    assert started.status_code == 200
    run_id = started.json()["run_id"]
    seen: list[tuple[str, dict[str, Any]]] = []
    with workers.request(streamer, "GET", f"/events/{run_id}", stream=True) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        for item in _events(stream):
            seen.append(item)
            if item[1]["type"] == "tool_execution_update":
                break  # the tool is counting: drop the connection mid-run
    steered = workers.request(steerer, "POST", "/steer", json={"text": "also say hello"})
    assert steered.status_code == 200, steered.text

    last_id = seen[-1][0]
    with workers.request(resumer, "GET", f"/events/{run_id}", stream=True,
                         headers={"Last-Event-ID": last_id}) as stream:
        resumed = list(_events(stream))
    assert resumed[0][0] > last_id
    with workers.request(starter, "GET", f"/events/{run_id}", stream=True) as stream:
        whole = list(_events(stream))
    assert seen + resumed == whole  # every event exactly once, in order, across workers
    assert len({i for i, _ in whole}) == len(whole)

    types = [e["type"] for _, e in whole]
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    steering = [e["message"] for _, e in whole if e["type"] == "message_start"
                and e["message"]["role"] == "user"][1:]
    assert [m["content"][0]["text"] for m in steering] == ["also say hello"]
    final = whole[-1][1]["messages"][-1]
    assert final["content"][0]["text"].startswith("You steered me: \u201calso say hello\u201d")

    history = workers.request(steerer, "GET", "/history").json()
    assert history["run"] == {"id": run_id, "state": "done"}
    assert [m["role"] for m in history["messages"]] == [
        "user", "assistant", "toolResult", "user", "assistant"]


def test_a_run_started_in_one_worker_is_stopped_from_another(server: Gunicorn,
                                                             workers: Workers) -> None:
    starter = workers.connect(set())
    streamer = workers.connect({starter})
    stopper = workers.connect({starter, streamer})
    run_id = workers.request(starter, "POST", "/chat",
                             json={"message": "count to 100"}).json()["run_id"]
    types = []
    with workers.request(streamer, "GET", f"/events/{run_id}", stream=True) as stream:
        for _, event in _events(stream):
            types.append(event["type"])
            if event["type"] == "tool_execution_update" and "stop" not in types:
                types.append("stop")
                stopped = workers.request(stopper, "POST", "/stop")
                assert stopped.json() == {"ok": True, "settled": True}
            if event["type"] == "agent_end":
                last = event["messages"][-1]
    assert types[-1] == "agent_end"
    assert last["stopReason"] == "aborted" and last["errorMessage"] == "Stopped by the user"
    history = workers.request(streamer, "GET", "/history").json()
    assert history["run"] == {"id": run_id, "state": "aborted"}
    busy = workers.request(stopper, "POST", "/steer", json={"text": "late"})
    assert busy.status_code == 409
