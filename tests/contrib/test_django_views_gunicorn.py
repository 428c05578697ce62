"""The app's views under a real gunicorn (two gthread workers) on PostgreSQL and MariaDB (the
site's one database: its users, ``DjangoStore`` and the runs): a run started by one worker is
streamed, stopped and approved from the other (each response's ``X-Piagent-Worker`` says
which served it), another user gets 404, and a worker killed with SIGKILL mid-run has its
run resumed by a surviving worker within the lease + 10 s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from ..conftest import SLOW_WAIT, WAIT, Gunicorn, gunicorn_server
from .conftest import Database, _mariadb, _postgresql, sse_frames

WORKER = "X-Piagent-Worker"
LEASE_S = 2.0

SETTINGS = '''
import json, os
try:
    import pymysql
    pymysql.install_as_MySQLdb()
except ImportError:
    pass
SECRET_KEY = "piagent-gunicorn-tests"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
ROOT_URLCONF = "proj_urls"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth",
                  "piagent.contrib.django"]
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware",
              "django.middleware.csrf.CsrfViewMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware"]
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DATABASES = {"default": json.loads(os.environ["PROJ_DATABASE"])}
USE_TZ = True
PIAGENT_AGENTS = {"default": "proj_agents.build"}
PIAGENT_LEASE_S = float(os.environ["PROJ_LEASE_S"])
PIAGENT_RECOVER_EVERY_S = 0.5
'''

URLS = '''
from django.contrib.auth import authenticate, login
from django.http import HttpResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
def sign_in(request):
    user = authenticate(request, username=request.POST["username"],
                        password=request.POST["password"])
    if user is None:
        return HttpResponse(status=403)
    login(request, user)
    return HttpResponse("ok")


urlpatterns = [path("login/", sign_in), path("agent/", include("piagent.contrib.django.urls"))]
'''

AGENTS = '''
"""A scripted model: "count N" calls count_slowly(N) (one step per 50 ms, run again when a
run is resumed), "delete X" calls delete_note(X), which needs approval."""
import re

from piagent import Agent
from piagent.messages import ToolResultMessage
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.tools import AgentToolResult, tool


@tool(replay="safe")
def count_slowly(n: int, signal, on_update) -> AgentToolResult:
    """Count slowly.

    Args:
        n: how far.
    """
    for i in range(1, n + 1):
        if signal.wait(0.05):
            return AgentToolResult(content=[], details={"stopped": i}, is_error=True)
        on_update(AgentToolResult(content=[], details={"step": i, "of": n}))
    return AgentToolResult(content=[], details={"counted": n})


@tool(needs_approval=True)
def delete_note(title: str) -> str:
    """Delete a note.

    Args:
        title: which.
    """
    return f"deleted {title}"


def reply(context, options):
    last = context.messages[-1]
    if isinstance(last, ToolResultMessage):
        return assistant_text("done: " + last.tool_name)
    text = last.content[0].text
    if (found := re.match(r"count (\\d+)", text)):
        return assistant_tool_calls(("count_slowly", {"n": int(found.group(1))}))
    if (found := re.match(r"delete (\\w+)", text)):
        return assistant_tool_calls(("delete_note", {"title": found.group(1)}))
    return assistant_text("hello")


def build(session_id):
    fn = ScriptedStreamFn([reply] * 10)
    return Agent(model=fn.model, stream_fn=fn, tools=[count_slowly, delete_note])
'''

WSGI = '''
import os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj_settings")
from django.core.wsgi import get_wsgi_application
application = get_wsgi_application()
'''

SETUP = '''
import django
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
call_command("migrate", verbosity=0)
for name in ("alice", "bob"):
    get_user_model().objects.create_user(name, password="secret")
'''


def _django_database(db: Database) -> dict[str, Any]:
    if db.kind == "postgresql":
        return {"ENGINE": "django.db.backends.postgresql", "NAME": db.dbname, "USER": db.user,
                "PASSWORD": db.password, "HOST": db.host, "PORT": str(db.port),
                "OPTIONS": {"options": f"-c search_path={db.name}"}}
    return {"ENGINE": "django.db.backends.mysql", "NAME": db.name, "USER": db.user,
            "PASSWORD": db.password, "HOST": db.host, "PORT": str(db.port),
            "OPTIONS": {"charset": "utf8mb4"}}


@pytest.fixture(params=["postgresql", "mariadb"])
def server_database(request: pytest.FixtureRequest) -> Iterator[Database]:
    yield from (_postgresql() if request.param == "postgresql" else _mariadb())


@pytest.fixture
def project(tmp_path: Path, server_database: Database) -> Iterator[Gunicorn]:
    """A Django project that added the app, migrated, with users alice and bob, served by
    two gunicorn workers."""
    for name, text in (("proj_settings.py", SETTINGS), ("proj_urls.py", URLS),
                       ("proj_agents.py", AGENTS), ("proj_wsgi.py", WSGI)):
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    env = {"PROJ_DATABASE": json.dumps(_django_database(server_database)),
           "PROJ_LEASE_S": str(LEASE_S),
           "DJANGO_SETTINGS_MODULE": "proj_settings"}
    setup = subprocess.run([sys.executable, "-c", SETUP], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120,
                           env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(
                               [str(tmp_path), str(root)])})
    assert setup.returncode == 0, setup.stderr[-3000:]
    with gunicorn_server(tmp_path, "proj_wsgi:application", env, workers=2) as server:
        yield server


class User:
    """A signed-in user's cookies; requests pinned to one worker through a kept connection."""

    def __init__(self, server: Gunicorn, name: str) -> None:
        self.server = server
        with requests.Session() as http:
            signed = http.post(f"{server.url}/login/",
                               data={"username": name, "password": "secret"}, timeout=WAIT)
            assert signed.status_code == 200, signed.text
            page = http.get(f"{server.url}/agent/", timeout=WAIT)
            assert page.status_code == 200
            self.cookies = http.cookies.get_dict()
        self.token = self.cookies["csrftoken"]

    def session(self) -> Any:
        http = requests.Session()
        http.cookies.update(self.cookies)
        http.headers["X-CSRFToken"] = self.token
        return http

    def on_worker(self, probe: str, wanted: Callable[[int], bool]) -> tuple[Any, int]:
        """A session whose kept connection is served by a worker ``wanted`` accepts (found by
        GETting ``probe`` on new connections), and that worker's pid."""
        for _ in range(60):
            http = self.session()
            pid = int(http.get(f"{self.server.url}{probe}", timeout=WAIT).headers[WORKER])
            if wanted(pid):
                return http, pid
            http.close()
        pytest.fail(f"no connection reached the wanted worker of {self.server.pids}")

    def new(self) -> str:
        with self.session() as http:
            made = http.post(f"{self.server.url}/agent/new/", json={}, timeout=WAIT)
            assert made.status_code == 201, made.text
            return str(made.json()["key"])

    def send(self, key: str, text: str) -> tuple[str, int]:
        """Start a run; its id and the pid of the worker that executes it."""
        with self.session() as http:
            sent = http.post(f"{self.server.url}/agent/c/{key}/send/", json={"message": text},
                             timeout=WAIT)
            assert sent.status_code == 200, sent.text
            return str(sent.json()["run_id"]), int(sent.headers[WORKER])


def stream(http: Any, url: str, until: Callable[[dict[str, Any]], bool] | None = None,
           last: str | None = None, pid: int | None = None
           ) -> Iterator[tuple[str, dict[str, Any]]]:
    """The run's events through ``http`` (served by the worker ``pid``, if given), until
    ``agent_end`` (or ``until``: then the connection is closed)."""
    headers = {"Last-Event-ID": last} if last else {}
    with http.get(url, stream=True, timeout=SLOW_WAIT, headers=headers) as response:
        assert response.status_code == 200, response.text
        assert pid is None or int(response.headers[WORKER]) == pid
        for event_id, event in sse_frames(response.iter_content(None)):
            if event_id is None or event is None:
                continue
            yield event_id, event
            if until is not None and until(event):
                return


def test_a_run_is_streamed_stopped_and_approved_from_the_other_worker(
        project: Gunicorn) -> None:
    alice, bob = User(project, "alice"), User(project, "bob")
    key = alice.new()
    run_id, executor = alice.send(key, "count 400")
    history = f"/agent/c/{key}/history/"
    other, pid = alice.on_worker(history, lambda p: p != executor)
    url = f"{project.url}/agent/c/{key}/events/{run_id}/"
    seen = list(stream(other, url, until=lambda e: e["type"] == "tool_execution_update",
                       pid=pid))
    other.close()  # the stream's connection ended mid-stream: pin another one
    other, pid = alice.on_worker(history, lambda p: p != executor)
    stopped = other.post(f"{project.url}/agent/c/{key}/stop/", timeout=WAIT)
    assert int(stopped.headers[WORKER]) == pid != executor
    assert stopped.json() == {"stopped": run_id, "settled": True}
    rest = list(stream(other, url, last=seen[-1][0]))
    assert rest[-1][1]["type"] == "agent_end"
    assert other.get(f"{project.url}{history}", timeout=WAIT).json()["run"]["state"] \
        == "aborted"
    other.close()

    # a call waiting for approval, approved by the worker that did not run it
    waiting, executor = alice.send(key, "delete shopping")
    http, pid = alice.on_worker(history, lambda p: p != executor)
    events = [e for _, e in stream(http, f"{project.url}/agent/c/{key}/events/{waiting}/",
                                   pid=pid)]
    (asked,) = [e for e in events if e["type"] == "tool_approval_request"]
    approved = http.post(f"{project.url}/agent/c/{key}/approve/", timeout=WAIT,
                         json={"tool_call_id": asked["toolCallId"], "digest": asked["digest"]})
    assert approved.status_code == 200, approved.text
    assert int(approved.headers[WORKER]) == pid != executor
    then = approved.json()["run_id"]
    final = [e for _, e in stream(http, f"{project.url}/agent/c/{key}/events/{then}/")]
    assert final[-1]["type"] == "agent_end"
    messages = http.get(f"{project.url}{history}", timeout=WAIT).json()["messages"]
    assert "deleted shopping" in json.dumps(messages)
    http.close()

    # bob sees none of it, on any worker
    with bob.session() as intruder:
        for path in ("", "history/", f"events/{run_id}/"):
            assert intruder.get(f"{project.url}/agent/c/{key}/{path}",
                                timeout=WAIT).status_code == 404
        assert intruder.post(f"{project.url}/agent/c/{key}/stop/",
                             timeout=WAIT).status_code == 404


def test_a_worker_killed_mid_run_has_its_run_resumed_by_another(project: Gunicorn) -> None:
    alice = User(project, "alice")
    key = alice.new()
    run_id, executor = alice.send(key, "count 100")
    history = f"/agent/c/{key}/history/"
    other, pid = alice.on_worker(history, lambda p: p != executor)
    url = f"{project.url}/agent/c/{key}/events/{run_id}/"
    seen = list(stream(other, url, until=lambda e: e["type"] == "tool_execution_update",
                       pid=pid))
    other.close()
    os.kill(executor, signal.SIGKILL)
    killed = time.monotonic()
    resumed_after = None
    rest = []
    other, pid = alice.on_worker(history, lambda p: p != executor)
    for _, event in stream(other, url, last=seen[-1][0], pid=pid):
        rest.append(event)
        if event["type"] == "run_resumed" and resumed_after is None:
            resumed_after = time.monotonic() - killed
    assert resumed_after is not None, [e["type"] for e in rest]
    assert resumed_after <= LEASE_S + 10
    assert rest[-1]["type"] == "agent_end"
    shown = other.get(f"{project.url}{history}", timeout=WAIT).json()
    assert shown["run"] == {"id": run_id, "state": "done"}
    assert shown["messages"][-1]["content"][0]["text"] == "done: count_slowly"
    other.close()
