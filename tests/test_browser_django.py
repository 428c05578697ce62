"""The Django example (``examples/django_chat``: a ``startproject`` project that only added
``piagent.contrib.django``) in headless Chromium, under a real gunicorn with two gthread
workers, on PostgreSQL and on MariaDB (a database or schema of its own each, migrated by
``manage.py migrate`` in a subprocess).

A signed-in user chats: the reply streams, the tool's progress shows; Stop and Approve are
served by the worker that is not running the run (each response names its worker in
``X-Piagent-Worker``; the run's lease in the database names the process executing it: the
test sends those two requests with the browser's session cookie and CSRF token on a
connection held to the other worker); a reload mid-run shows the conversation and goes on
streaming; a second user gets 404 for the first one's conversation; the admin shows the
transcript and approves a waiting call. Last, the worker running a chat is killed with
SIGKILL mid-tool: the other worker resumes the run within the lease (3 s here) + 10 s and
the page shows the conversation to its end. Skips (fails in CI) without chromium,
chromedriver, gunicorn or a database server.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from selenium.common.exceptions import TimeoutException

from tests.conftest import (
    DJANGO_EXAMPLE,
    SLOW_WAIT,
    WAIT,
    Gunicorn,
    django_example_env,
    gunicorn_server,
    headless_chromium,
    manage,
    unavailable,
)
from tests.contrib.conftest import Database, open_database

pytestmark = pytest.mark.browser

LEASE_S = 3.0  # the runs' lease here (PIAGENT_LEASE_S; 30 s by default)
RECOVER_EVERY_S = 1.0  # how often each worker looks for lost runs (PIAGENT_RECOVER_EVERY_S)
STEP_S = "0.2"  # the counting tool's pace (CHAT_STEP_S)
PAGE_WAIT = 2 * WAIT  # a headless browser starts and renders slower than a thread
CONNECT_WITHIN_S = 60.0  # how long a new connection tries to reach a given worker
WORKER = "X-Piagent-Worker"
PASSWORD = secrets.token_urlsafe(12)
USERS = """
from django.contrib.auth.models import User
User.objects.create_superuser('ada', 'ada@example.com', {password!r})
User.objects.create_user('bob', 'bob@example.com', {password!r}, is_staff=True)
"""


def _components() -> None:
    if sys.platform == "win32" or importlib.util.find_spec("gunicorn") is None:
        unavailable("the Django browser test needs gunicorn (pip install gunicorn; not on "
                    "Windows)")
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or \
            not shutil.which("chromedriver"):
        unavailable("the Django browser test needs chromium and chromedriver on PATH "
                    "(run .ci/install-browser.sh)")
    for module in ("django", "selenium"):
        if importlib.util.find_spec(module) is None:
            unavailable(f"the Django browser test needs {module} (pip install '.[test]')")


def _database_url(db: Database) -> str:
    """The example's ``DATABASE_URL`` for the test's own database."""
    auth = f"{db.user}:{db.password}@{db.host}:{db.port}"
    if db.kind == "postgresql":
        return f"postgresql://{auth}/{db.dbname}?options=-c%20search_path%3D{db.name}"
    return f"mysql://{auth}/{db.name}?charset=utf8mb4"


@dataclass
class Site:
    """The example under gunicorn on one database, and what the test knows of it."""

    server: Gunicorn
    db: Database
    kind: str
    connections: list[requests.Session] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def owner_pid(self, run_id: str) -> int:
        """The pid of the process whose lease holds the run (``Run.owner``: [...:]host:pid:id)."""
        rows = self.query("SELECT owner FROM piagent_run WHERE run_id = %s", (run_id,))
        assert rows, f"no run {run_id} in the database"
        return int(rows[0][0].rsplit(":", 2)[-2])  # a prefix may say it is queued, recovering

    def query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (``%s`` placeholders) in the site's database."""
        db = self.db
        if db.kind == "postgresql":
            import psycopg

            with psycopg.connect(host=db.host, port=db.port, user=db.user,
                                 password=db.password or None, dbname=db.dbname,
                                 options=f"-c search_path={db.name}", autocommit=True,
                                 connect_timeout=3) as conn:
                return list(conn.execute(sql, params).fetchall())
        import pymysql

        conn = pymysql.connect(host=db.host, port=db.port, user=db.user, password=db.password,
                               database=db.name, autocommit=True, connect_timeout=3)
        with conn, conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def pinned(self, cookies: dict[str, str], exclude: set[int]) -> tuple[int, requests.Session]:
        """A keep-alive connection (with ``cookies``) to a worker outside ``exclude``: its pid
        and session. Which worker accepts a new connection is the kernel's choice, so this
        tries new connections until one lands there (bounded by time)."""
        deadline, tries = time.monotonic() + CONNECT_WITHIN_S, 0
        while time.monotonic() < deadline:
            tries += 1
            session = requests.Session()
            session.mount("http://", requests.adapters.HTTPAdapter(pool_connections=1,
                                                                   pool_maxsize=1))
            session.cookies.update(cookies)
            answer = session.get(f"{self.url}/agent/", timeout=SLOW_WAIT,
                                 allow_redirects=False)
            pid = int(answer.headers[WORKER])
            if pid not in exclude:
                self.connections.append(session)
                return pid, session
            session.close()
        pytest.fail(f"{tries} connections in {CONNECT_WITHIN_S:g} s never reached a worker "
                    f"outside {exclude}")

    def close(self) -> None:
        for session in self.connections:
            session.close()


@pytest.fixture(scope="module", params=["postgresql", "mariadb"])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Site]:
    _components()
    folder = tmp_path_factory.mktemp(f"django-{request.param}")
    databases = open_database(request.param, folder)  # a database of its own, dropped after
    with contextlib.closing(databases):
        db = next(databases)
        env = django_example_env(folder, _database_url(db),
                                 f"PIAGENT_LEASE_S = {LEASE_S}\n"
                                 f"PIAGENT_RECOVER_EVERY_S = {RECOVER_EVERY_S}\n")
        for command in (("migrate", "--noinput"),
                        ("shell", "-c", USERS.format(password=PASSWORD))):
            done = manage(env, *command)
            assert done.returncode == 0, done.stdout + done.stderr
        with gunicorn_server(DJANGO_EXAMPLE, "chatsite.wsgi", {**env, "CHAT_STEP_S": STEP_S},
                             workers=2, args=("--keep-alive", "60")) as server:
            found = Site(server, db, request.param)
            # a request to each worker: each builds its runner, whose ticker recovers lost runs
            warmed: set[int] = set()
            while warmed != server.pids:
                warmed.add(found.pinned({}, warmed)[0])
            try:
                yield found
            finally:
                found.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _components()
    with headless_chromium() as driver:
        yield driver


# --- the page -------------------------------------------------------------------------------


def _by() -> Any:
    from selenium.webdriver.common.by import By

    return By


def _wait(driver: Any, timeout: float = PAGE_WAIT) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout)


def _status(driver: Any) -> str:
    return str(driver.find_element(_by().ID, "status").get_attribute("data-state"))


def _sign_in(driver: Any, site: Site, user: str) -> None:
    """Sign ``user`` in (a fresh browser session) through the admin's login page, the one
    login page a new project has; it goes on to the chat."""
    by = _by()
    driver.get(f"{site.url}/admin/login/")
    driver.delete_all_cookies()
    driver.get(f"{site.url}/admin/login/?next=/agent/")
    driver.find_element(by.ID, "id_username").send_keys(user)
    driver.find_element(by.ID, "id_password").send_keys(PASSWORD)
    driver.find_element(by.CSS_SELECTOR, "input[type=submit]").click()
    _wait(driver).until(lambda d: urlsplit(d.current_url).path == "/agent/")


def _new_conversation(driver: Any, site: Site, user: str = "ada") -> str:
    """Signed in as ``user``, a new conversation open and idle; its key."""
    _sign_in(driver, site, user)
    driver.find_element(_by().ID, "new").click()
    _wait(driver).until(lambda d: "/agent/c/" in d.current_url and _status(d) == "idle")
    found = re.search(r"/agent/c/([\w-]+)/", driver.current_url)
    assert found, driver.current_url
    return found.group(1)


def _send(driver: Any, text: str) -> None:
    by = _by()
    driver.find_element(by.ID, "message").send_keys(text)
    driver.find_element(by.ID, "send").click()


def _texts(driver: Any, selector: str) -> list[str]:
    return [e.text.strip() for e in driver.find_elements(_by().CSS_SELECTOR, selector)]


def _counting(driver: Any, n: int) -> None:
    """Wait until the reply announced the count to ``n`` and the tool reported progress."""
    wait = _wait(driver)
    wait.until(lambda d: any(t.startswith(f"Sure! Counting to {n}")
                             for t in _texts(d, ".msg.assistant")))
    wait.until(lambda d: any(t.startswith("Counted ") for t in _texts(d, ".tool .progress")))


def _cookies(driver: Any) -> dict[str, str]:
    return {c["name"]: c["value"] for c in driver.get_cookies()}


def _csrf(driver: Any) -> dict[str, str]:
    """The headers the page sends with a POST: the CSRF token (the cookie's secret)."""
    return {"X-CSRFToken": _cookies(driver)["csrftoken"]}


def _history(session: requests.Session, site: Site, key: str) -> dict[str, Any]:
    answer = session.get(f"{site.url}/agent/c/{key}/history/", timeout=SLOW_WAIT)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


# --- the tests (the SIGKILL one last: it changes the workers) ----------------------------------


def test_chat_streams_and_stop_is_served_by_the_other_worker(site: Site, browser: Any) -> None:
    driver = browser
    key = _new_conversation(driver, site)
    _send(driver, "please count to 60")
    _counting(driver, 60)
    tool = driver.find_element(_by().CSS_SELECTOR, ".tool")
    assert tool.get_attribute("data-state") == "running"
    assert "count_slowly" in tool.text

    _, anyone = site.pinned(_cookies(driver), set())
    run_id = _history(anyone, site, key)["run"]["id"]
    runner_pid = site.owner_pid(run_id)
    assert runner_pid in site.server.pids
    other, connection = site.pinned(_cookies(driver), {runner_pid})
    stopped = connection.post(f"{site.url}/agent/c/{key}/stop/", json={},
                              headers=_csrf(driver), timeout=SLOW_WAIT)
    assert stopped.status_code == 200, stopped.text
    assert int(stopped.headers[WORKER]) == other != runner_pid
    assert stopped.json() == {"stopped": run_id, "settled": True}

    _wait(driver).until(lambda d: _status(d) == "aborted")  # the page's stream says so
    assert tool.get_attribute("data-state") == "error"
    assert "Stopped at" in tool.find_element(_by().CSS_SELECTOR, ".progress").text
    assert "(aborted: Stopped by the user)" in driver.find_element(_by().ID, "log").text
    assert _history(connection, site, key)["run"] == {"id": run_id, "state": "aborted"}


def test_a_reload_mid_run_resumes_the_stream(site: Site, browser: Any) -> None:
    driver = browser
    _new_conversation(driver, site)
    _send(driver, "count to 20")
    _counting(driver, 20)
    driver.refresh()
    wait = _wait(driver)
    # the reloaded page re-attached to the live run: its progress goes on
    wait.until(lambda d: _status(d) == "running" and any(
        re.fullmatch(r"Counted \d+ of 20", t) for t in _texts(d, ".tool .progress")))
    wait.until(lambda d: _status(d) == "done")
    assert _texts(driver, ".msg.user") == ["count to 20"]  # each message once
    assert _texts(driver, ".msg.assistant") == [
        "Sure! Counting to 20 slowly, watch the progress.",
        "Done: Counted to 20. Anything else?"]
    assert _texts(driver, ".tool .progress") == ["Counted to 20."]


def test_approve_is_served_by_the_other_worker(site: Site, browser: Any) -> None:
    driver = browser
    key = _new_conversation(driver, site)
    _send(driver, "delete note shopping")
    wait = _wait(driver)
    wait.until(lambda d: _status(d) == "waiting")
    assert driver.find_elements(_by().CSS_SELECTOR, ".tool .decide .approve")

    _, anyone = site.pinned(_cookies(driver), set())
    history = _history(anyone, site, key)
    asker = site.owner_pid(history["run"]["id"])
    [waiting] = history["approvals"]
    other, connection = site.pinned(_cookies(driver), {asker})
    approved = connection.post(f"{site.url}/agent/c/{key}/approve/",
                               json={"call_key": waiting["callKey"],
                                     "digest": waiting["digest"]},
                               headers=_csrf(driver), timeout=SLOW_WAIT)
    assert approved.status_code == 200, approved.text
    assert int(approved.headers[WORKER]) == other != asker
    going_on = approved.json()["run_id"]
    assert site.owner_pid(going_on) == other  # the approving worker runs the tool

    driver.refresh()  # the page shows the run that went on, to its end
    wait.until(lambda d: "Done: Deleted the note" in d.find_element(_by().ID, "log").text)
    assert _texts(driver, ".tool .progress") == ['Deleted the note "shopping".']


def test_a_second_user_gets_404_for_the_first_users_conversation(site: Site,
                                                                browser: Any) -> None:
    driver = browser
    key = _new_conversation(driver, site, "ada")
    _send(driver, "count to 1")
    _wait(driver).until(lambda d: _status(d) == "done")
    _, ada = site.pinned(_cookies(driver), set())
    run_id = _history(ada, site, key)["run"]["id"]

    _sign_in(driver, site, "bob")
    _, bob = site.pinned(_cookies(driver), set())
    for path in (f"c/{key}/", f"c/{key}/history/", f"c/{key}/events/{run_id}/"):
        assert bob.get(f"{site.url}/agent/{path}", timeout=SLOW_WAIT).status_code == 404
    for path in ("send", "stop", "steer", "approve"):
        refused = bob.post(f"{site.url}/agent/c/{key}/{path}/", json={"message": "hi"},
                           headers=_csrf(driver), timeout=SLOW_WAIT)
        assert refused.status_code == 404, (path, refused.status_code)
    driver.get(f"{site.url}/agent/c/{key}/")  # in the browser too
    assert "count to 1" not in driver.page_source
    assert driver.find_elements(_by().ID, "log") == []
    assert bob.get(f"{site.url}/agent/", timeout=SLOW_WAIT).status_code == 200  # bob's own page


def test_the_admin_shows_the_transcript_and_approves_a_call(site: Site, browser: Any) -> None:
    driver = browser
    by = _by()
    key = _new_conversation(driver, site)
    _send(driver, "delete note groceries")
    wait = _wait(driver)
    wait.until(lambda d: _status(d) == "waiting")

    driver.get(f"{site.url}/admin/piagent/approval/")
    wait.until(lambda d: "groceries" in d.find_element(by.ID, "result_list").text)
    row = next(r for r in driver.find_elements(by.CSS_SELECTOR, "#result_list tbody tr")
               if "groceries" in r.text)
    assert "delete_note" in row.text
    row.find_element(by.LINK_TEXT, "Approve or deny…").click()
    wait.until(lambda d: d.find_elements(by.CSS_SELECTOR, "form.piagent-decide"))
    assert "groceries" in driver.find_element(by.CSS_SELECTOR, ".piagent-arguments").text
    driver.find_element(by.CSS_SELECTOR, "input[name=approve]").click()
    wait.until(lambda d: urlsplit(d.current_url).path == "/admin/piagent/approval/")
    assert "groceries" not in driver.find_element(by.ID, "content").text

    # the chat page shows the call approved and run, and the model's answer
    driver.get(f"{site.url}/agent/c/{key}/")
    wait.until(lambda d: "Done: Deleted the note" in d.find_element(by.ID, "log").text)
    # the admin's transcript of the conversation: the request, the call, its result
    driver.get(f"{site.url}/admin/piagent/session/")
    row = next(r for r in driver.find_elements(by.CSS_SELECTOR, "#result_list tbody tr")
               if "delete note groceries" in r.text)
    row.find_element(by.CSS_SELECTOR, "a").click()
    transcript = wait.until(lambda d: d.find_element(by.ID, "content").text)
    for shown in ("delete note groceries", "delete_note", 'Deleted the note "groceries".',
                  "Done: Deleted the note"):
        assert shown in transcript, shown


def test_a_worker_killed_mid_run_is_resumed_by_the_other(site: Site, browser: Any) -> None:
    driver = browser
    key = _new_conversation(driver, site)
    _send(driver, "count to 15")
    _counting(driver, 15)
    _, anyone = site.pinned(_cookies(driver), set())
    run_id = _history(anyone, site, key)["run"]["id"]
    victim = site.owner_pid(run_id)
    assert victim in site.server.pids
    assert site.query("SELECT state FROM piagent_run WHERE run_id = %s", (run_id,)) == [
        ("running",)]  # killed mid-tool, not after
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()

    # the page goes on to the model's final text within the lease + 10 s
    try:
        _wait(driver, LEASE_S + 10).until(
            lambda d: "Done: Counted to 15. Anything else?" in _texts(d, ".msg.assistant"))
    except TimeoutException:
        row = site.query("SELECT owner, state, lease_expires_at FROM piagent_run "
                         "WHERE run_id = %s", (run_id,))
        pytest.fail(f"the page after {LEASE_S + 10:g} s: {_status(driver)}, "
                    f"{driver.find_element(_by().ID, 'log').text!r}; the run: {row} at "
                    f"{time.time():.1f}; gunicorn: " + "\n".join(site.server.log[-20:]))
    assert time.monotonic() - killed_at < LEASE_S + 10
    _wait(driver).until(lambda d: _status(d) == "done")
    assert "another one resumed it" in driver.find_element(_by().ID, "log").text
    assert site.owner_pid(run_id) != victim  # the survivor, or the worker started in its place
    _, survivor = site.pinned(_cookies(driver), {victim})
    assert _history(survivor, site, key)["run"] == {"id": run_id, "state": "done"}
