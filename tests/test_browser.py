"""The Flask chat example in headless Chromium: a typed message streams text, the tool's
progress appears, Stop during the long tool ends the run as aborted, and a steering
message typed mid-tool reaches the model. Skips when chromium or chromedriver is missing
(CI installs them with ``.ci/install-browser.sh``)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import WAIT

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("headless browser test needs chromium and chromedriver on PATH "
                "(run .ci/install-browser.sh)", allow_module_level=True)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "flask_chat"
PAGE_WAIT = 2 * WAIT  # a headless browser starts and renders slower than a thread


@pytest.fixture(scope="module")
def chat_app():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import app as flask_chat
    finally:
        sys.path.remove(str(EXAMPLE))
    agent = flask_chat.make_agent(step_s=0.15, chunk_delay=0.005)
    return flask_chat.create_app(agent), agent


@pytest.fixture(scope="module")
def base_url(chat_app) -> Iterator[str]:
    app, agent = chat_app
    server = make_server("127.0.0.1", 0, app, threaded=True)
    # owner: this fixture; stopped by server.shutdown() and joined below
    thread = threading.Thread(target=server.serve_forever, name="test-flask-chat",
                              kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        agent.abort()
        assert agent.wait_for_idle(PAGE_WAIT)
        server.shutdown()
        thread.join(PAGE_WAIT)
        server.server_close()
        assert not thread.is_alive()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="piagent-chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _status(driver) -> str:
    return driver.find_element(By.ID, "status").get_attribute("data-state")


def _send(driver, text: str) -> None:
    box = driver.find_element(By.ID, "message")
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def test_chat_streams_text_and_tool_progress_then_stop_aborts(browser, base_url):
    driver = browser
    driver.get(base_url)
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
    driver.get(base_url)
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
