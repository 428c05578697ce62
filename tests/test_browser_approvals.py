"""Approve / Deny in the Flask chat example, in headless Chromium, across two
real gunicorn servers that share one SQLite file (docs/approvals.md).

The run is started through one server: the scripted model calls ``delete_note``, which is
marked ``needs_approval``, so the run ends waiting and the page shows Approve and Deny.
That server is then stopped (a deploy); the browser opens the page on the other server
(same host, so the same session cookie), which shows the waiting call from the store; the
Approve click is served by that server's worker, whose process runs the tool: the page
shows the tool's result and the answer. The access logs prove which process served what.
A Deny gives the model the reason; a decision whose digest does not match the call's
arguments is answered 409 with the error's text. Skips without chromium/chromedriver or
gunicorn.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import CHAT_COOKIE, SLOW_WAIT, WAIT, gunicorn_server, headless_chromium

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("headless browser test needs chromium and chromedriver on PATH "
                "(run .ci/install-browser.sh)", allow_module_level=True)
if sys.platform == "win32" or importlib.util.find_spec("gunicorn") is None:
    pytest.skip("the approvals browser test needs gunicorn (not on Windows)",
                allow_module_level=True)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# the Django example's approvals: tests/test_browser_django.py
APPS = {"flask": (ROOT / "examples" / "flask_chat", "app:create_app()")}
PAGE_WAIT = 2 * WAIT
ACCESS_FORMAT = "%(p)s %(m)s %(U)s %(s)s"  # <pid>, method, path, status


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver


def _status(driver: Any) -> str:
    return driver.find_element(By.ID, "status").get_attribute("data-state")


def _texts(driver: Any, selector: str) -> list[str]:
    return [e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def _app(kind: str, tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    """The example app ``kind``: its folder, its gunicorn
    app and the environment that keeps its chat in ``tmp_path``."""
    folder, app = APPS[kind]
    return folder, app, {"PIAGENT_CHAT_DB": str(tmp_path / "chat.db"),
                         "PIAGENT_CHAT_STEP_S": "0.05"}


def _open_fresh(driver: Any, wait: Any, url: str) -> None:
    """The chat page at ``url`` in a session of its own (no cookies), idle."""
    driver.get(url + "/")
    driver.delete_all_cookies()
    driver.get(url + "/")
    wait.until(lambda d: _status(d) == "idle")


def _send_until_waiting(driver: Any, wait: Any, message: str) -> None:
    """Send ``message`` from the page; return when its run waits for approval."""
    driver.find_element(By.ID, "message").send_keys(message)
    driver.find_element(By.ID, "send").click()
    wait.until(lambda d: _status(d) == "waiting")


def _served(log: Path, method: str, path: str) -> list[int]:
    """The pids that served ``method path`` in an access log."""
    rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [int(row[0].strip("<>")) for row in rows if row[1:3] == [method, path]]


@pytest.mark.parametrize("kind", sorted(APPS, reverse=True))
def test_approve_on_another_server_runs_the_tool_there(browser: Any, kind: str,
                                                       tmp_path: Path) -> None:
    folder, app, env = _app(kind, tmp_path)
    logs = {name: tmp_path / f"access-{name}.log" for name in ("first", "second")}

    def serve(name: str) -> Any:
        return gunicorn_server(folder, app, env, workers=1,
                               args=("--access-logfile", str(logs[name]),
                                     "--access-logformat", ACCESS_FORMAT))

    driver = browser
    wait = WebDriverWait(driver, PAGE_WAIT)
    with serve("second") as second:
        with serve("first") as first:
            _open_fresh(driver, wait, first.url)
            _send_until_waiting(driver, wait, "delete note shopping")
            tool = driver.find_element(By.CSS_SELECTOR, ".tool")
            assert tool.get_attribute("data-state") == "waiting"
            assert "delete_note" in tool.text and "waiting for your approval" in tool.text
            assert _texts(driver, ".msg.assistant") == [
                "I will delete the note \u201cshopping\u201d once you approve."]
        # the first server is gone (a deploy); the waiting call lives in the SQLite file
        driver.get(second.url + "/")  # same host: the same session cookie
        wait.until(lambda d: _status(d) == "waiting")
        assert _texts(driver, ".msg.user") == ["delete note shopping"]
        tool = driver.find_element(By.CSS_SELECTOR, ".tool")
        assert tool.get_attribute("data-state") == "waiting"
        tool.find_element(By.CSS_SELECTOR, ".decide .approve").click()
        wait.until(lambda d: _status(d) == "done")
        assert tool.get_attribute("data-state") == "done"
        assert "Deleted the note \u201cshopping\u201d." in tool.text
        assert _texts(driver, ".msg.assistant")[-1] == \
            "Done: Deleted the note \u201cshopping\u201d. Anything else?"
        assert not driver.find_elements(By.CSS_SELECTOR, ".decide")

        [starter] = _served(logs["first"], "POST", "/chat")
        [approver] = _served(logs["second"], "POST", "/approve")
        assert starter in first.pids and approver in second.pids
        assert starter != approver  # started by one process, approved (and run) by another

        driver.refresh()  # after the run: all of it from the store
        wait.until(lambda d: _status(d) == "idle")
        assert _texts(driver, ".msg.assistant")[-1] == \
            "Done: Deleted the note \u201cshopping\u201d. Anything else?"


def test_deny_and_a_changed_digest(browser: Any, tmp_path: Path) -> None:
    folder, app, env = _app("flask", tmp_path)
    driver = browser
    wait = WebDriverWait(driver, PAGE_WAIT)
    with gunicorn_server(folder, app, env, workers=2) as server:
        _open_fresh(driver, wait, server.url)
        _send_until_waiting(driver, wait, "delete note taxes")

        # the same browser session from a script: a digest the call does not have is refused
        http = requests.Session()
        http.cookies.set(CHAT_COOKIE, driver.get_cookie(CHAT_COOKIE)["value"])
        [pending] = http.get(f"{server.url}/history", timeout=SLOW_WAIT).json()["approvals"]
        assert (pending["toolName"], pending["args"], pending["decision"]) == (
            "delete_note", {"title": "taxes"}, None)
        refused = http.post(f"{server.url}/approve", timeout=SLOW_WAIT,
                            json={"tool_call_id": pending["toolCallId"], "digest": "0" * 64})
        assert refused.status_code == 409
        assert pending["toolCallId"] in refused.json()["error"]
        unknown = http.post(f"{server.url}/deny", timeout=SLOW_WAIT,
                            json={"tool_call_id": "no-such-call"})
        assert unknown.status_code == 409 and "no-such-call" in unknown.json()["error"]
        busy = http.post(f"{server.url}/chat", json={"message": "hello"}, timeout=SLOW_WAIT)
        assert busy.status_code == 409 and "waiting for approval" in busy.json()["error"]

        tool = driver.find_element(By.CSS_SELECTOR, ".tool")
        tool.find_element(By.CSS_SELECTOR, ".decide .deny").click()
        wait.until(lambda d: _status(d) == "done")
        assert tool.get_attribute("data-state") == "error"
        reply = _texts(driver, ".msg.assistant")[-1]
        assert reply.startswith("I left the note alone.") and "the user clicked Deny" in reply
        http.close()


@pytest.mark.parametrize("kind", sorted(APPS, reverse=True))
def test_a_repeated_call_id_is_approved_each_time(browser: Any, kind: str,
                                                 tmp_path: Path) -> None:
    # the scripted model numbers its calls call_1, ... in every reply: each delete_note
    # call of the session has the id call_1, and each is a new call to approve
    folder, app, env = _app(kind, tmp_path)
    driver = browser
    wait = WebDriverWait(driver, PAGE_WAIT)
    with gunicorn_server(folder, app, env, workers=2) as server:
        _open_fresh(driver, wait, server.url)
        for title in ("shopping", "taxes", "chores"):
            _send_until_waiting(driver, wait, f"delete note {title}")
            if title == "taxes":  # a reload while it waits: the stored call, still waiting
                driver.refresh()
                wait.until(lambda d: _status(d) == "waiting")
            tool = driver.find_elements(By.CSS_SELECTOR, ".tool")[-1]
            assert tool.get_attribute("data-state") == "waiting"
            assert title in tool.text
            tool.find_element(By.CSS_SELECTOR, ".decide .approve").click()
            wait.until(lambda d: _status(d) == "done")
            assert tool.get_attribute("data-state") == "done"
            assert _texts(driver, ".msg.assistant")[-1] == \
                f"Done: Deleted the note \u201c{title}\u201d. Anything else?"
        assert not _texts(driver, ".msg.note")  # no "(could not approve: ...)"
        driver.refresh()  # after the runs: all of it from the store
        wait.until(lambda d: _status(d) == "idle")
        tools = driver.find_elements(By.CSS_SELECTOR, ".tool")
        assert [t.get_attribute("data-state") for t in tools] == ["done"] * 3
        assert [t.find_element(By.CSS_SELECTOR, ".progress").text for t in tools] == [
            f"Deleted the note \u201c{t}\u201d." for t in ("shopping", "taxes", "chores")]
