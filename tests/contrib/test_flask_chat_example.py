"""``examples/flask_chat`` on each database its ``--db`` URL may name (SQLite, PostgreSQL,
MariaDB), as two apps on one database, two gunicorn workers in effect: a run started by one
is seen live, steered and stopped by the other; a call waiting for approval is decided on
the other with the digest the page showed (a stale digest is refused), the run that goes on
is streamed on the first and resumed after a ``Last-Event-ID``; another browser gets 404."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from ..conftest import CHAT_COOKIE, WAIT, load_example
from .conftest import Database

pytestmark = pytest.mark.usefixtures("no_piagent_threads")


@pytest.fixture(scope="module")
def example() -> ModuleType:
    pytest.importorskip("flask")
    return load_example("flask_chat/app.py", "flask_chat_app_databases")


@pytest.fixture
def workers(example: ModuleType, database: Database) -> Iterator[tuple[Any, Any]]:
    """Two apps on the test's database: the first counts slowly, the second at once."""
    first = example.create_app(example.agent_factory(step_s=5.0, chunk_delay=0.0),
                               db=database.url)
    second = example.create_app(example.agent_factory(step_s=0.0, chunk_delay=0.0),
                                db=database.url)
    try:
        yield first, second
    finally:
        first.config["CHAT"].close()
        second.config["CHAT"].close()


def _frames(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in data.decode().split("\n")
            if line.startswith("data: ")]


def _same_browser(app: Any, cookie: str) -> Any:
    client = app.test_client()
    client.set_cookie(CHAT_COOKIE, cookie)
    return client


def test_steer_and_stop_from_the_other_worker(workers: tuple[Any, Any]) -> None:
    first, second = workers
    browser = first.test_client()
    run_id = browser.post("/chat", json={"message": "count to 3"}).get_json()["run_id"]
    for item in first.config["CHAT"].runner.events(run_id, timeout=WAIT):
        assert item is not None, "no event in time"
        if item.type == "tool_execution_start":
            break
    elsewhere = _same_browser(second, browser.get_cookie(CHAT_COOKIE).value)
    assert elsewhere.get("/history").get_json()["run"] == {"id": run_id, "state": "running"}
    assert elsewhere.post("/chat", json={"message": "again"}).status_code == 409
    assert elsewhere.post("/steer", json={"text": "only even numbers"}).status_code == 200
    assert elsewhere.post("/stop").get_json() == {"ok": True, "settled": True}
    assert first.config["CHAT"].runner.wait(run_id, WAIT)
    history = elsewhere.get("/history").get_json()
    assert history["run"] == {"id": run_id, "state": "aborted"}
    assert history["messages"][-1]["errorMessage"] == "Stopped by the user"
    # the steering Stop overtook goes to the session's next run
    next_run = elsewhere.post("/chat", json={"message": "count to 1"}).get_json()["run_id"]
    assert second.config["CHAT"].runner.wait(next_run, WAIT)
    users = [m["content"][0]["text"] for m in elsewhere.get("/history").get_json()["messages"]
             if m["role"] == "user"]
    assert users == ["count to 3", "count to 1", "only even numbers"]


def test_approve_on_the_other_worker_and_resume_the_stream(workers: tuple[Any, Any]) -> None:
    first, second = workers
    browser = first.test_client()
    run_id = browser.post("/chat", json={"message": "delete note shopping"}).get_json()[
        "run_id"]
    assert _frames(browser.get(f"/events/{run_id}").data)[-1]["type"] == "agent_end"
    elsewhere = _same_browser(second, browser.get_cookie(CHAT_COOKIE).value)
    history = elsewhere.get("/history").get_json()
    assert history["run"] == {"id": run_id, "state": "waiting"}
    [call] = history["approvals"]
    assert (call["toolName"], call["args"], call["decision"]) == (
        "delete_note", {"title": "shopping"}, None)
    stale = elsewhere.post("/approve", json={"call_key": call["callKey"], "digest": "0" * 64})
    assert stale.status_code == 409
    decided = elsewhere.post("/approve", json={"call_key": call["callKey"],
                                               "digest": call["digest"]})
    next_run = decided.get_json()["run_id"]
    assert second.config["CHAT"].runner.wait(next_run, WAIT)
    frames = _frames(browser.get(f"/events/{next_run}").data)  # streamed by the first
    assert frames[-1]["messages"][-1]["content"][0]["text"] == \
        "Done: Deleted the note \u201cshopping\u201d. Anything else?"
    resumed = browser.get(f"/events/{next_run}", headers={"Last-Event-ID": "0000000002"})
    assert _frames(resumed.data) == frames[3:]
    assert first.test_client().get(f"/events/{next_run}").status_code == 404  # another browser
