"""Stop and steering in the web examples act on the browser's live run from any worker: a
second app on the same SQLite file (another worker process, in effect) steers and stops a
run the first one started, the run ends as aborted, and a steering message the stopped run
had not taken yet goes to the session's next run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CHAT_COOKIE, WAIT, load_example

pytestmark = pytest.mark.usefixtures("no_piagent_threads")


def _wait_in_tool(service: Any, run_id: str) -> None:
    """Return once the run's (slow) counting tool is executing."""
    for item in service.runner.events(run_id, timeout=WAIT):
        assert item is not None, "no event in time"
        if item.type == "tool_execution_start":
            return
    raise AssertionError("the run ended before its tool started")


def _check_aborted(service: Any, session_id: str, run_id: str) -> None:
    assert service.runner.status(run_id).state == "aborted"
    history = service.history(session_id)
    assert history["run"] == {"id": run_id, "state": "aborted"}
    last = history["messages"][-1]
    assert last["role"] == "assistant" and last["stopReason"] == "aborted"
    assert last["errorMessage"] == "Stopped by the user"


def test_flask_steer_and_stop_from_another_worker(tmp_path: Path) -> None:
    pytest.importorskip("flask")
    module = load_example("flask_chat/app.py", "flask_chat_app_stop")
    factory = module.agent_factory(step_s=5.0, chunk_delay=0.0)
    first = module.create_app(factory, db=tmp_path / "chat.db")
    fast = module.agent_factory(step_s=0.0, chunk_delay=0.0)
    second = module.create_app(fast, db=tmp_path / "chat.db")
    browser = first.test_client()
    run_id = browser.post("/chat", json={"message": "count to 3"}).get_json()["run_id"]
    session_id = browser.get_cookie(CHAT_COOKIE).value
    _wait_in_tool(first.config["CHAT"], run_id)
    elsewhere = second.test_client()
    elsewhere.set_cookie(CHAT_COOKIE, session_id)  # the same browser, served by another worker
    assert elsewhere.get("/history").get_json()["run"] == {"id": run_id, "state": "running"}
    assert elsewhere.post("/steer", json={"text": "only even numbers"}).status_code == 200
    body = elsewhere.post("/stop").get_json()
    assert body == {"ok": True, "settled": True}
    _check_aborted(second.config["CHAT"], session_id, run_id)
    assert first.config["CHAT"].runner.wait(run_id, WAIT)
    assert browser.post("/steer", json={"text": "late"}).status_code == 409  # nothing live
    # the steering that Stop overtook was not lost: the session's next run takes it
    next_run = elsewhere.post("/chat", json={"message": "count to 1"}).get_json()["run_id"]
    assert second.config["CHAT"].runner.wait(next_run, WAIT)
    messages = elsewhere.get("/history").get_json()["messages"]
    users = [m["content"][0]["text"] for m in messages if m["role"] == "user"]
    assert users == ["count to 3", "count to 1", "only even numbers"]
