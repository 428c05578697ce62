"""The app's chat page in headless Chromium: a new conversation, a message that streams text
and a tool's progress, Approve on a call that waits for it, a reload mid-run that re-attaches
to the live run, and Stop. Skips when chromium or chromedriver is missing (CI installs them
with ``.ci/install-browser.sh``)."""

from __future__ import annotations

import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from piagent import Agent
from piagent.messages import ToolResultMessage
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.tools import AgentToolResult, tool

from ..conftest import WAIT, configure_django, headless_chromium, serving_wsgi
from .conftest import VIEW_SETTINGS, prepare_django_database

pytestmark = pytest.mark.browser

if shutil.which("chromium") is None and shutil.which("chromium-browser") is None or \
        shutil.which("chromedriver") is None:
    pytest.skip("headless browser test needs chromium and chromedriver on PATH "
                "(run .ci/install-browser.sh)", allow_module_level=True)

configure_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

PAGE_WAIT = 2 * WAIT  # a headless browser starts and renders slower than a thread


@tool
def count_slowly(n: int, signal: Any, on_update: Any) -> AgentToolResult:
    """Count slowly.

    Args:
        n: how far.
    """
    for i in range(1, n + 1):
        if signal.wait(0.05):
            return AgentToolResult(content=[], details={"step": i, "of": n}, is_error=True)
        on_update(AgentToolResult(content=[], details={"step": i, "of": n}))
    return AgentToolResult(content=[], details={"step": n, "of": n})


@tool(needs_approval=True)
def delete_note(title: str) -> str:
    """Delete a note.

    Args:
        title: which.
    """
    return f"deleted {title}"


def reply(context: Any, options: Any) -> Any:
    last = context.messages[-1]
    if isinstance(last, ToolResultMessage):
        return assistant_text(f"Finished {last.tool_name}.")
    text = last.content[0].text
    if (found := re.match(r"count (\d+)", text)):
        return assistant_tool_calls(("count_slowly", {"n": int(found.group(1))}),
                                    text="Counting. ")
    if (found := re.match(r"delete (\w+)", text)):
        return assistant_tool_calls(("delete_note", {"title": found.group(1)}))
    return assistant_text("Hello.")


@pytest.fixture
def page_url() -> Iterator[str]:
    prepare_django_database("default")  # once per process, shared
    fn = ScriptedStreamFn([reply] * 20, chunk_delay=0.01)

    def build(session_id: str) -> Agent:
        return Agent(model=fn.model, stream_fn=fn, tools=[count_slowly, delete_note])

    with override_settings(**VIEW_SETTINGS, PIAGENT_AGENTS={"default": build}), \
            serving_wsgi(WSGIHandler(), "test-django-page") as url:
        yield url
    for thread in threading.enumerate():
        if thread.name in ("piagent-site-run", "piagent-recovery"):
            thread.join(WAIT)


def _status(driver: Any) -> str:
    return str(driver.find_element(By.ID, "status").get_attribute("data-state"))


def _until(driver: Any, state: str) -> None:
    WebDriverWait(driver, PAGE_WAIT).until(lambda d: _status(d) == state)


def _send(driver: Any, text: str) -> None:
    driver.find_element(By.ID, "message").send_keys(text)
    driver.find_element(By.ID, "send").click()


def test_the_page_chats_approves_reattaches_and_stops(page_url: str) -> None:
    user = get_user_model().objects.create_user(f"u{uuid.uuid4().hex[:12]}")
    client = Client()
    client.force_login(user)
    with headless_chromium() as driver:
        driver.get(f"{page_url}/agent/")
        driver.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value})
        driver.get(f"{page_url}/agent/")
        driver.find_element(By.ID, "new").click()
        _until(driver, "idle")
        assert "/agent/c/" in driver.current_url

        _send(driver, "count 3")
        _until(driver, "done")
        tool_box = driver.find_element(By.CSS_SELECTOR, ".tool")
        assert tool_box.get_attribute("data-state") == "done"
        texts = [e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")]
        assert texts == ["Counting.", "Finished count_slowly."]

        _send(driver, "delete shopping")
        _until(driver, "waiting")
        driver.find_element(By.CSS_SELECTOR, ".tool .decide .approve").click()
        _until(driver, "done")
        assert driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text == \
            "Finished delete_note."

        _send(driver, "count 400")
        WebDriverWait(driver, PAGE_WAIT).until(
            lambda d: "step" in d.page_source and d.find_elements(
                By.CSS_SELECTOR, '.tool[data-state="running"]'))
        driver.refresh()  # the stored conversation, then the live run, each once
        _until(driver, "running")
        expected = ["count 3", "delete shopping", "count 400"]

        def users(d: Any) -> list[str]:
            return [e.text for e in d.find_elements(By.CSS_SELECTOR, ".msg.user")]

        try:  # the live run's replay (its user message among it) may still be arriving
            WebDriverWait(driver, PAGE_WAIT).until(lambda d: users(d) == expected)
        except TimeoutException:
            pass
        assert users(driver) == expected  # each once: not missing, not shown twice
        driver.find_element(By.ID, "stop").click()
        _until(driver, "aborted")
        listed = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#conversations a")]
        assert listed == ["count 3"]  # the title: its first message
