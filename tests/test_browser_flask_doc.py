"""docs/flask.md's two files, as a reader would save them (``app.py`` without the page's own
checks, ``static/index.html``), served and driven in headless Chromium: a message streams
the model's text, the call waiting for approval shows Approve and Deny, and Approve runs it.
Skips when chromium or chromedriver is missing (CI installs them with
``.ci/install-browser.sh``)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import WAIT, headless_chromium, serving_wsgi

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("no_piagent_threads")]

if (shutil.which("chromium") or shutil.which("chromium-browser")) is None or \
        shutil.which("chromedriver") is None:
    pytest.skip("headless browser test needs chromium and chromedriver on PATH "
                "(run .ci/install-browser.sh)", allow_module_level=True)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "flask.md"


def _block(language: str, containing: str) -> str:
    blocks = re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(encoding="utf-8"),
                        re.MULTILINE | re.DOTALL)
    return next(b for b in blocks if containing in b)


def test_the_guide_s_chat_works_in_a_browser(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("flask")
    folder = tmp_path / "chat"
    (folder / "static").mkdir(parents=True)
    app_py = _block("python", "flask_run_response").split("# --- try it")[0]
    (folder / "app.py").write_text(app_py, encoding="utf-8")
    (folder / "static" / "index.html").write_text(_block("html", "EventSource"),
                                                  encoding="utf-8")
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'chat.db'}")
    spec = importlib.util.spec_from_file_location("flask_doc_app", folder / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "flask_doc_app", module)
    spec.loader.exec_module(module)
    try:
        with serving_wsgi(module.app, "test-flask-doc") as url, headless_chromium() as driver:
            wait = WebDriverWait(driver, 2 * WAIT)
            driver.get(url + "/")
            driver.find_element(By.ID, "text").send_keys("Delete my shopping note.")
            driver.find_element(By.CSS_SELECTOR, "#ask button:not([type])").click()
            wait.until(lambda d: "I will delete your note once you approve." in
                       d.find_element(By.ID, "log").text)
            approve = wait.until(lambda d: d.find_element(By.XPATH,
                                                          "//button[text()='approve']"))
            assert 'delete_note({"title":"shopping"})' in driver.find_element(By.ID, "log").text
            approve.click()
            wait.until(lambda d: "Done: Deleted the note 'shopping'." in
                       d.find_element(By.ID, "log").text)
            assert not driver.find_elements(By.XPATH, "//button[text()='approve']")
    finally:
        module.engine.dispose()
