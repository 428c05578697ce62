"""The databases the contrib stores are tested on, each test in a database (MariaDB) or
schema (PostgreSQL) or file (SQLite) of its own, dropped after it.

``PIAGENT_TEST_MARIADB`` (``user:password@host:port``; default ``piagent:piagent@127.0.0.1:3306``,
the user ``.ci/mariadb-setup.sh`` makes) and ``PIAGENT_TEST_POSTGRES`` name the servers; an
unreachable one skips, and fails in CI (``PIAGENT_REQUIRE_ALL=1``).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..conftest import configure_django, unavailable

MARIADB = os.environ.get("PIAGENT_TEST_MARIADB", "piagent:piagent@127.0.0.1:3306")
POSTGRES = os.environ.get("PIAGENT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DATABASES = ["sqlite", "postgresql", "mariadb"]


@dataclass(frozen=True)
class Database:
    """One test's own database: its kind, a SQLAlchemy URL, and the parts Django needs."""

    kind: str
    url: str
    name: str  # the SQLite file, MariaDB database or PostgreSQL schema
    user: str = ""
    password: str = ""
    host: str = ""
    port: int = 0
    dbname: str = ""  # PostgreSQL's database (name is the schema in it)


def _unique() -> str:
    return f"piagent_t_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def _mariadb() -> Iterator[Database]:
    try:
        import pymysql
    except ImportError:
        unavailable("PyMySQL is not installed (pip install 'piagent[sqlalchemy]' pymysql)")
    credentials, _, address = MARIADB.rpartition("@")
    user, _, password = credentials.partition(":")
    host, _, port = address.partition(":")
    name = _unique()
    try:
        conn = pymysql.connect(host=host, port=int(port or 3306), user=user, password=password,
                               connect_timeout=3, autocommit=True)
    except pymysql.Error as exc:
        unavailable(f"MariaDB at {address} (PIAGENT_TEST_MARIADB; .ci/mariadb-setup.sh makes "
                    f"the user) is unreachable: {exc}")
    with conn:
        conn.cursor().execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    try:
        yield Database("mariadb", f"mysql+pymysql://{user}:{password}@{host}:{port or 3306}/"
                       f"{name}?charset=utf8mb4", name, user, password, host, int(port or 3306))
    finally:
        conn = pymysql.connect(host=host, port=int(port or 3306), user=user, password=password,
                               connect_timeout=3, autocommit=True)
        with conn:
            conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")


def _postgresql() -> Iterator[Database]:
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install 'piagent[postgres]')")
    name = _unique()
    try:
        with psycopg.connect(POSTGRES, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
            info = conn.info
            parts = (info.user, info.password or "", info.host, info.port, info.dbname)
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {POSTGRES} (PIAGENT_TEST_POSTGRES) is unreachable: {exc}")
    user, password, host, port, dbname = parts
    auth = f"{user}:{password}" if password else user
    try:
        yield Database("postgresql", f"postgresql+psycopg://{auth}@{host}:{port}/{dbname}"
                       f"?options=-csearch_path%3D{name}", name, user, password, host, port,
                       dbname)
    finally:
        with psycopg.connect(POSTGRES, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def open_database(kind: str, tmp_path: Path) -> Iterator[Database]:
    """A database of its own of ``kind`` (one of ``DATABASES``), dropped after it."""
    if kind == "sqlite":
        path = tmp_path / "store.db"
        yield Database("sqlite", f"sqlite:///{path}", str(path))
    elif kind == "mariadb":
        yield from _mariadb()
    else:
        yield from _postgresql()


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A database of the test's own, of each kind in turn."""
    yield from open_database(request.param, tmp_path)


def sqlalchemy_store(kind: str, tmp_path: Path) -> Iterator[Any]:
    """A ``SQLAlchemyStore`` on a database of its own of ``kind`` (one of ``DATABASES``):
    its engine disposed and the database dropped after it (``tests/runs``' store kinds
    ``sqlalchemy-sqlite``, ``-postgresql``, ``-mariadb``)."""
    try:
        from sqlalchemy import create_engine

        from piagent.contrib.sqlalchemy import SQLAlchemyStore
    except ImportError as exc:
        unavailable(f"SQLAlchemy is not installed (pip install 'piagent[sqlalchemy]'): {exc}")
    for database in open_database(kind, tmp_path):
        engine = create_engine(database.url, pool_size=10, max_overflow=20)
        if kind == "sqlite":  # as docs/sessions.md advises: SQLiteStore's speed
            from sqlalchemy import event

            @event.listens_for(engine, "connect")
            def _fast(conn: Any, record: Any) -> None:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
        try:
            yield SQLAlchemyStore(engine)
        finally:
            engine.dispose()


def run_agent_twice(make_store: Callable[[], Any]) -> None:
    """An Agent keeps a conversation with tool calls in a store; a second Agent on a new
    store object over the same database goes on from it (the contrib stores' end to end)."""
    from piagent import Agent, AgentTool, AgentToolResult, TextContent
    from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

    def echo(call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        return AgentToolResult(content=[TextContent(f"echo {params['x']}")])

    tool = AgentTool(name="echo", description="Echoes x.", parameters={
        "type": "object", "properties": {"x": {"type": "integer"}}}, execute=echo)
    sid = f"agent-{uuid.uuid4().hex}"
    fn = ScriptedStreamFn([assistant_tool_calls(("echo", {"x": 1}), ("echo", {"x": 2})),
                           assistant_text("done"), assistant_text("again")])
    first = Agent(model=fn.model, stream_fn=fn, tools=[tool], store=make_store(),
                  session_id=sid)
    first.prompt("go")
    assert first.state.error_message is None
    second = Agent(model=fn.model, stream_fn=fn, tools=[tool], store=make_store(),
                   session_id=sid)
    assert [m.role for m in second.state.messages if m.role != "system"] == [
        "user", "assistant", "toolResult", "toolResult", "assistant"]
    second.prompt("more")
    assert [m.role for m in make_store().load(sid)][-2:] == ["user", "assistant"]
    assert make_store().started(sid) == set()


# --- Django: the databases of django_settings.py -----------------------------------------


def _create(alias: str) -> None:
    """The alias's database (MariaDB) or schema (PostgreSQL), made by a connection of its own."""
    from django.conf import settings

    config = settings.DATABASES[alias]
    if alias == "default":
        return  # SQLite makes its file
    name = config["NAME"] if alias == "mariadb" else \
        config["OPTIONS"]["options"].split("=", 1)[1]
    try:
        if alias == "mariadb":
            import pymysql

            with pymysql.connect(host=config["HOST"], port=int(config["PORT"]),
                                 user=config["USER"], password=config["PASSWORD"],
                                 connect_timeout=3, autocommit=True) as conn:
                conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET "
                                      "utf8mb4")
        elif alias == "postgresql":
            import psycopg

            with psycopg.connect(dbname=config["NAME"], user=config["USER"],
                                 password=config["PASSWORD"] or None, host=config["HOST"],
                                 port=config["PORT"] or None, autocommit=True,
                                 connect_timeout=3) as conn:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {name}")
    except ImportError as exc:
        unavailable(f"the driver for {alias} is not installed: {exc}")
    except Exception as exc:  # noqa: BLE001 - the server is not there
        unavailable(f"{alias} at {config['HOST']}:{config['PORT']} is unreachable "
                    f"(PIAGENT_TEST_{alias.upper()}; .ci/mariadb-setup.sh): {exc}")


def _drop(alias: str) -> None:
    from django.conf import settings
    from django.db import connections

    config = settings.DATABASES[alias]
    if alias == "default":  # the file goes with its directory at exit (django_settings.py)
        return
    with connections[alias].cursor() as cursor:
        if alias == "mariadb":
            cursor.execute(f"DROP DATABASE IF EXISTS {config['NAME']}")
        else:
            name = config["OPTIONS"]["options"].split("=", 1)[1]
            cursor.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture(scope="session", params=["default", "postgresql", "mariadb"],
                ids=["sqlite", "postgresql", "mariadb"])
def alias(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database alias of ``django_settings.py`` (Django configured), its database created
    and the app's tables migrated; dropped at the end of the tests."""
    name = request.param
    prepare_django_database(name)  # once per process: other fixtures may use it too
    yield name
    drop_django_database(name)


_PREPARED: set[str] = set()  # the aliases prepare_django_database made in this process
DJANGO_ALIASES = {"sqlite": "default", "postgresql": "postgresql", "mariadb": "mariadb"}


def prepare_django_database(alias: str) -> None:
    """Configure Django, create and migrate the alias's database, once per process (the
    ``alias`` fixture, tests/runs/conftest.py's Django stores)."""
    configure_django()
    if alias in _PREPARED:
        return
    from django.core.management import call_command

    _create(alias)
    call_command("migrate", database=alias, verbosity=0)
    _PREPARED.add(alias)


def drop_django_database(alias: str) -> None:
    """Drop what ``prepare_django_database`` made (the SQLite file goes at exit)."""
    if alias in _PREPARED:
        from django.db import connections

        _PREPARED.discard(alias)
        _drop(alias)
        connections[alias].close()


def clear_django_database(alias: str) -> None:
    """Delete every row of the app's tables (between tests that reuse session ids)."""
    from piagent.contrib.django import models

    for model in (models.RunEvent, models.RunControl, models.Run, models.Approval,
                  models.Record, models.Budget, models.Conversation, models.Session):
        model.objects.using(alias).all().delete()


# --- the app's views (test_django_views*.py) ---------------------------------------------------

VIEW_SETTINGS: dict[str, Any] = {
    "ROOT_URLCONF": "tests.contrib.django_urls",
    "MIDDLEWARE": ["django.contrib.sessions.middleware.SessionMiddleware",
                   "django.middleware.csrf.CsrfViewMiddleware",
                   "django.contrib.auth.middleware.AuthenticationMiddleware"],
    # sessions in a signed cookie: no sessions app, no table
    "SESSION_ENGINE": "django.contrib.sessions.backends.signed_cookies",
    "TEMPLATES": [{"BACKEND": "django.template.backends.django.DjangoTemplates",
                   "APP_DIRS": True, "OPTIONS": {}}],
    "LOGIN_URL": "/login/",
}
"""What the views need beside ``django_settings.py`` (``override_settings``)."""


def sse_frames(chunks: Any) -> Iterator[tuple[str | None, dict[str, Any] | None]]:
    """``(id, event)`` per SSE frame of ``chunks`` (bytes; a comment is ``(None, None)``)."""
    import json

    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            event_id, data = None, None
            for line in frame.decode().split("\n"):
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
            yield event_id, data


class Browser:
    """A signed-in user's ``Client`` that enforces CSRF and sends the token as the page
    does (``X-CSRFToken``)."""

    def __init__(self, user: Any) -> None:
        from django.test import Client

        self.user = user
        self.client = Client(enforce_csrf_checks=True)
        self.client.force_login(user)
        page = self.client.get("/agent/")
        assert page.status_code == 200
        self.token = page.cookies["csrftoken"].value

    def post(self, url: str, body: dict[str, Any] | None = None) -> Any:
        import json

        return self.client.post(url, json.dumps(body or {}), content_type="application/json",
                                headers={"X-CSRFToken": self.token})

    def new(self) -> str:
        """A new conversation; its key."""
        response = self.client.post("/agent/new/", {"csrfmiddlewaretoken": self.token})
        assert response.status_code == 303, response.content
        return str(response["Location"].split("/")[-2])

    def send(self, key: str, text: str) -> str:
        response = self.post(f"/agent/c/{key}/send/", {"message": text})
        assert response.status_code == 200, response.content
        return str(response.json()["run_id"])

    def events(self, key: str, run_id: str, last: str | None = None
               ) -> list[tuple[str, dict[str, Any]]]:
        headers = {"Last-Event-ID": last} if last else {}
        response = self.client.get(f"/agent/c/{key}/events/{run_id}/", headers=headers)
        assert response.status_code == 200, response.content
        assert response.streaming and response["Content-Type"] == "text/event-stream"
        try:
            return [(i, e) for i, e in sse_frames(response.streaming_content)
                    if i is not None and e is not None]
        finally:
            response.close()

    def history(self, key: str) -> dict[str, Any]:
        response = self.client.get(f"/agent/c/{key}/history/")
        assert response.status_code == 200, response.content
        return dict(response.json())


class Site:
    """The site's settings for one test (its agent scripted), and its browsers."""

    def __init__(self, tmp_path: Path, stack: ExitStack) -> None:
        self.tmp_path = tmp_path
        self.stack = stack

    def use(self, responses: Sequence[Any], tools: Sequence[Any] = (), *,
            chunk_delay: float = 0.0, sqlite_store: bool = False) -> Any:
        """Serve an agent scripted with ``responses``, with ``tools``; the site's store a
        ``DjangoStore`` on the default database, or (``sqlite_store``) an ``SQLiteStore``
        named by ``PIAGENT_STORE``."""
        from django.test import override_settings

        from piagent import Agent
        from piagent.sessions import SQLiteStore
        from piagent.testing import ScriptedStreamFn

        fn = ScriptedStreamFn(list(responses), chunk_delay=chunk_delay)

        def build(session_id: str) -> Agent:
            return Agent(model=fn.model, stream_fn=fn, tools=list(tools))

        path = self.tmp_path / "site.db"
        store = {"PIAGENT_STORE": lambda: SQLiteStore(path)} if sqlite_store else {}
        self.stack.enter_context(override_settings(
            **VIEW_SETTINGS, PIAGENT_AGENTS={"default": build}, **store))
        return fn

    def browser(self) -> Browser:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:12]}", password="x")
        return Browser(user)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """The site's settings for the test (``Site.use``), on the default database (migrated
    once per process); the runs' threads joined after it."""
    import threading

    from ..conftest import WAIT

    prepare_django_database("default")
    with ExitStack() as stack:
        yield Site(tmp_path, stack)
    for thread in threading.enumerate():  # the runs' threads end with their runs
        if thread.name in ("piagent-site-run", "piagent-recovery"):
            thread.join(WAIT)
            assert not thread.is_alive(), thread.name


# --- the admin (test_django_admin*.py) -----------------------------------------------------------
# Users, sessions and the admin's history live in ``default`` (SQLite); the app's rows in
# ``PIAGENT_DATABASE``, the database under test. The site's agent asks to ``delete`` a name
# (a call that needs approval), then reports the results.

ADMIN = "/admin/piagent"  # the app's admin pages under tests/contrib/django_admin_urls.py
# guards ADMIN_DELETED: the names the admin tests' tool deleted (run threads append)
_admin_lock = threading.Lock()
ADMIN_DELETED: list[str] = []


def _admin_answer(context: Any, options: Any) -> Any:
    from piagent.messages import ToolResultMessage, UserMessage
    from piagent.testing import assistant_text, assistant_tool_calls

    last = context.messages[-1]
    if isinstance(last, UserMessage):
        return assistant_tool_calls(("delete", {"name": "<b>report</b>"}, "c-delete"))
    results = [m for m in context.messages if isinstance(m, ToolResultMessage)]
    return assistant_text("results: " + "; ".join(
        f"{m.tool_name}={' '.join(getattr(c, 'text', '') for c in m.content)}"
        for m in results))


def admin_agent(session_id: str) -> Any:
    """``PIAGENT_AGENTS["default"]`` of the admin tests: an ``Agent`` on a scripted model
    with the tool ``delete`` (``needs_approval=True``)."""
    from piagent import Agent
    from piagent.testing import ScriptedStreamFn
    from piagent.tools import tool

    @tool(needs_approval=True)
    def delete(name: str) -> str:
        """Delete a thing."""
        with _admin_lock:
            ADMIN_DELETED.append(name)
        return f"deleted {name}"

    scripted = ScriptedStreamFn([_admin_answer] * 5)
    return Agent(model=scripted.model, stream_fn=scripted, tools=[delete],
                 system_prompt="admin tests")


def _admin_settings(alias: str) -> Any:
    from django.test import override_settings

    return override_settings(ROOT_URLCONF="tests.contrib.django_admin_urls",
                             PIAGENT_DATABASE=alias, PIAGENT_AGENTS={"default": admin_agent},
                             PIAGENT_LEASE_S=30, PIAGENT_RECOVER_EVERY_S=60)


@pytest.fixture
def admin_tables() -> None:
    """Every app's tables in ``default`` (once per process)."""
    prepare_django_database("default")


@pytest.fixture
def admin_sqlite(admin_tables: None) -> Iterator[str]:
    """The admin on SQLite (``default``): the alias."""
    with _admin_settings("default"):
        yield "default"


@pytest.fixture
def admin_db(admin_tables: None, alias: str) -> Iterator[str]:
    """The admin on each database in turn: the alias."""
    with _admin_settings(alias):
        yield alias


@pytest.fixture
def superuser(admin_tables: None) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model()._default_manager.create_superuser(
        f"admin-{uuid.uuid4().hex[:12]}", password="x")


@pytest.fixture
def admin_client(superuser: Any) -> Any:
    """Django's test client, signed in as a superuser."""
    from django.test import Client

    client = Client()
    client.force_login(superuser)
    return client


def new_session_id() -> str:
    return f"admin-{uuid.uuid4().hex}"


def key_of(session_id: str) -> str:
    """The app's lookup key of a session id (``Session.key``, ``Run.session_key``)."""
    import hashlib

    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def admin_messages(response: Any) -> list[str]:
    """The admin messages a followed response shows, as text."""
    import html
    import re

    assert response.status_code == 200, (response.redirect_chain, response.content[:300])
    found = re.findall(r'<li class="(?:success|error|warning|info)">(.*?)</li>',
                       response.content.decode(), re.DOTALL)
    return [html.unescape(re.sub(r"<[^>]+>", "", m)) for m in found]
