"""The Flask chat example in headless Chromium: a typed message streams text, the tool's
progress appears, Stop during the long tool ends the run as aborted, a steering message
typed mid-tool reaches the model, a page reloaded mid-run shows the stored conversation
and re-attaches to the live run (each shown once), and a stream dropped mid-run is resumed
by the browser's ``EventSource`` with ``Last-Event-ID``. Skips when chromium or
chromedriver is missing (CI installs them with ``.ci/install-browser.sh``)."""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WAIT, headless_chromium, serving_wsgi

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("headless browser test needs chromium and chromedriver on PATH "
                "(run .ci/install-browser.sh)", allow_module_level=True)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "flask_chat"
PAGE_WAIT = 2 * WAIT  # a headless browser starts and renders slower than a thread


class _CutOnce:
    """WSGI middleware, a network fault: when armed, the next ``/events/`` stream that has no
    ``Last-Event-ID`` ends after the tool's second progress event, as a dropped connection
    would. It records the ``Last-Event-ID`` of every stream request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.armed = threading.Event()
        self.resumed_from: list[str] = []  # appended by server threads, read by the test

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        body = self.app(environ, start_response)
        if not environ.get("PATH_INFO", "").startswith("/events/"):
            return body
        last = environ.get("HTTP_LAST_EVENT_ID")
        if last:
            self.resumed_from.append(last)
        elif self.armed.is_set():
            self.armed.clear()
            return self._cut(body)
        return body

    @staticmethod
    def _cut(body: Any) -> Iterator[bytes]:
        updates = 0
        try:
            for chunk in body:
                yield chunk
                updates += chunk.count(b'"type":"tool_execution_update"')
                if updates >= 2:
                    return
        finally:
            body.close()


@pytest.fixture(scope="module")
def chat_app(tmp_path_factory):
    sys.path.insert(0, str(EXAMPLE))
    try:
        import app as flask_chat
    finally:
        sys.path.remove(str(EXAMPLE))
    factory = flask_chat.agent_factory(step_s=0.15, chunk_delay=0.005)
    app = flask_chat.create_app(factory, db=tmp_path_factory.mktemp("browser") / "chat.db")
    app.wsgi_app = _CutOnce(app.wsgi_app)
    return app, app.config["CHAT"]


@pytest.fixture(scope="module")
def base_url(chat_app) -> Iterator[str]:
    app, service = chat_app
    with serving_wsgi(app, "test-flask-chat") as url:
        try:
            yield url + "/"
        finally:
            for session_id in service.store.session_ids():
                assert service.stop(session_id)["settled"]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with headless_chromium() as driver:
        yield driver


def _status(driver) -> str:
    return driver.find_element(By.ID, "status").get_attribute("data-state")


def _new_browser_session(driver, base_url: str) -> None:
    """Forget the cookie: the next page load is a new conversation."""
    driver.get(base_url)
    driver.delete_all_cookies()
    driver.get(base_url)
    WebDriverWait(driver, PAGE_WAIT).until(lambda d: _status(d) == "idle")


def _texts(driver, selector: str) -> list[str]:
    return [e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def _send(driver, text: str) -> None:
    box = driver.find_element(By.ID, "message")
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def test_chat_streams_text_and_tool_progress_then_stop_aborts(browser, base_url):
    driver = browser
    _new_browser_session(driver, base_url)
    wait = WebDriverWait(driver, PAGE_WAIT)
    _send(driver, "please count to 40")

    wait.until(lambda d: "Counting to 40" in d.find_element(By.CSS_SELECTOR,
                                                              ".msg.assistant").text)
    progress = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".tool .progress"))
    wait.until(lambda d: progress.text.startswith("Counted "))
    tool = driver.find_element(By.CSS_SELECTOR, ".tool")
    assert tool.get_attribute("data-state") == "running"
    assert "count_slowly" in tool.text

    driver.find_element(By.ID, "stop").click()
    wait.until(lambda d: _status(d) == "aborted")
    assert driver.find_element(By.ID, "status").text == "Run aborted"
    assert tool.get_attribute("data-state") == "error"
    assert "Stopped at" in progress.text
    assert driver.find_element(By.ID, "send").is_enabled()
    # the aborted run said nothing more: no empty reply box, only the note saying why
    replies = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")]
    assert "" not in replies, replies
    assert "(aborted: Stopped by the user)" in driver.find_element(By.ID, "log").text


def test_steering_message_reaches_the_running_agent(browser, base_url):
    driver = browser
    _new_browser_session(driver, base_url)
    wait = WebDriverWait(driver, PAGE_WAIT)
    _send(driver, "count to 16")  # 16 steps of 0.15 s: the steer lands while it runs
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".tool .progress").text
               .startswith("Counted "))
    steer = driver.find_element(By.ID, "steer-text")
    steer.send_keys("also say hello")
    driver.find_element(By.ID, "steer-send").click()
    wait.until(lambda d: "steering queued" in d.find_element(By.ID, "log").text)
    assert driver.find_element(By.CSS_SELECTOR, ".tool").get_attribute("data-state") == \
        "running", "the tool ended before the steering message was queued"
    wait.until(lambda d: _status(d) == "done")
    replies = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")]
    assert any("You steered me: \u201calso say hello\u201d" in r for r in replies), replies
    assert driver.find_element(By.CSS_SELECTOR, ".tool").get_attribute("data-state") == "done"


def test_a_reload_mid_run_shows_the_conversation_and_the_live_run(browser, base_url):
    driver = browser
    _new_browser_session(driver, base_url)
    wait = WebDriverWait(driver, PAGE_WAIT)
    _send(driver, "count to 2")
    wait.until(lambda d: _status(d) == "done")
    _send(driver, "count to 24")  # 24 steps of 0.15 s: the reload lands while it counts
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".tool")) == 2
               and d.find_elements(By.CSS_SELECTOR, ".tool")[1]
               .find_element(By.CLASS_NAME, "progress").text.startswith("Counted "))

    driver.refresh()
    wait.until(lambda d: _status(d) == "running")
    # the stored conversation, then the live run replayed from its start: each part once
    wait.until(lambda d: len(_texts(d, ".tool")) == 2)
    assert _texts(driver, ".msg.user") == ["count to 2", "count to 24"]
    replies = _texts(driver, ".msg.assistant")
    assert replies[:2] == ["Sure! Counting to 2 slowly, watch the progress.",
                           "Done: Counted to 2. Anything else?"], replies
    assert replies[2].startswith("Sure! Counting to 24"), replies
    tools = driver.find_elements(By.CSS_SELECTOR, ".tool")
    assert tools[0].get_attribute("data-state") == "done"
    assert "Counted to 2." in tools[0].text
    assert driver.find_element(By.ID, "stop").is_enabled()
    assert not driver.find_element(By.ID, "send").is_enabled()
    wait.until(lambda d: _status(d) == "done")
    assert tools[1].get_attribute("data-state") == "done"
    assert _texts(driver, ".msg.assistant")[-1] == "Done: Counted to 24. Anything else?"
    assert len(_texts(driver, ".msg.assistant")) == 4

    driver.refresh()  # after the run: all of it from the store, nothing live
    wait.until(lambda d: _status(d) == "idle")
    assert _texts(driver, ".msg.user") == ["count to 2", "count to 24"]
    assert _texts(driver, ".msg.assistant")[-1] == "Done: Counted to 24. Anything else?"
    assert driver.find_element(By.ID, "send").is_enabled()


def test_a_dropped_stream_resumes_after_the_last_event_it_got(browser, base_url, chat_app):
    app, _ = chat_app
    cutter = app.wsgi_app
    driver = browser
    _new_browser_session(driver, base_url)
    wait = WebDriverWait(driver, 2 * PAGE_WAIT)  # EventSource waits ~3 s before reconnecting
    cutter.armed.set()
    _send(driver, "count to 12")
    wait.until(lambda d: _status(d) == "done")
    assert not cutter.armed.is_set(), "the stream was never cut"
    assert len(cutter.resumed_from) == 1, cutter.resumed_from  # EventSource sent Last-Event-ID
    # the resumed stream went on from there: nothing shown twice, nothing missing
    assert _texts(driver, ".msg.user") == ["count to 12"]
    assert _texts(driver, ".msg.assistant") == ["Sure! Counting to 12 slowly, watch the progress.",
                                                "Done: Counted to 12. Anything else?"]
    [tool] = driver.find_elements(By.CSS_SELECTOR, ".tool")
    assert tool.get_attribute("data-state") == "done"
    assert tool.find_element(By.CLASS_NAME, "progress").text == "Counted to 12."
