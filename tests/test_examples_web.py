"""The web chat examples work offline through their framework's test client: the page is
served and sets a session cookie, ``/chat`` starts a run and answers its id,
``/events/<run_id>`` streams the whole run (text, tool progress, the final answer) with
``id:`` lines, ``/history`` has the stored conversation, another browser sees none of it,
``/steer`` and ``/stop`` answer, and bad input gets a 400. The browser test drives the same
Flask app in Chromium (``tests/test_browser.py``); ``tests/test_examples_web_gunicorn.py``
runs it under gunicorn with four workers."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import CHAT_COOKIE, WAIT, load_example

# every run a test starts has settled, and its threads are gone, when it ends
pytestmark = pytest.mark.usefixtures("no_piagent_threads")


def _frames(data: bytes) -> list[dict[str, Any]]:
    out = []
    for frame in data.decode().split("\n\n"):
        lines = frame.split("\n")
        if len(lines) == 2 and lines[0].startswith("id: ") and lines[1].startswith("data: "):
            out.append(json.loads(lines[1][len("data: "):]))
    return out


def _check_run(frames: list[dict[str, Any]]) -> None:
    types = [f["type"] for f in frames]
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    updates = [f["partialResult"]["details"] for f in frames
               if f["type"] == "tool_execution_update"]
    assert updates == [{"step": 1, "of": 3}, {"step": 2, "of": 3}, {"step": 3, "of": 3}]
    final = frames[-1]["messages"][-1]
    assert final["content"][0]["text"] == "Done: Counted to 3. Anything else?"


def _check_history(history: dict[str, Any], run_id: str) -> None:
    roles = [m["role"] for m in history["messages"]]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    assert history["messages"][0]["content"][0]["text"] == "count to 3"
    assert history["messages"][-1]["content"][0]["text"] == "Done: Counted to 3. Anything else?"
    assert history["run"] == {"id": run_id, "state": "done"}


@pytest.fixture(scope="module")
def flask_chat() -> ModuleType:
    pytest.importorskip("flask")
    return load_example("flask_chat/app.py", "flask_chat_app")


def test_flask_chat_streams_a_run_and_keeps_it_per_browser(flask_chat, tmp_path):
    factory = flask_chat.agent_factory(step_s=0.0, chunk_delay=0.0)
    app = flask_chat.create_app(factory, db=tmp_path / "chat.db")
    service = app.config["CHAT"]
    client = app.test_client()
    page = client.get("/")
    assert page.status_code == 200
    assert b'id="stop"' in page.data and b'id="steer-text"' in page.data
    assert client.get_cookie(CHAT_COOKIE) is not None
    assert client.get("/history").get_json() == {"messages": [], "run": None,
                                                  "approvals": []}
    started = client.post("/chat", json={"message": "count to 3"})
    assert started.status_code == 200
    run_id = started.get_json()["run_id"]
    response = client.get(f"/events/{run_id}")
    assert response.mimetype == "text/event-stream"
    _check_run(_frames(response.data))
    assert service.runner.wait(run_id, WAIT)
    _check_history(client.get("/history").get_json(), run_id)
    # another browser (no cookie yet) has its own, empty conversation and cannot read this run
    other = app.test_client()
    assert other.get("/history").get_json() == {"messages": [], "run": None,
                                                  "approvals": []}
    assert other.get(f"/events/{run_id}").status_code == 404
    assert int(client.get("/whoami").get_json()["pid"]) > 0
    # a new app on the same file (another worker, a restart) has the conversation
    again = flask_chat.create_app(factory, db=tmp_path / "chat.db").test_client()
    again.set_cookie(CHAT_COOKIE, client.get_cookie(CHAT_COOKIE).value)
    _check_history(again.get("/history").get_json(), run_id)


def test_flask_chat_bad_input_and_idle_controls(flask_chat, tmp_path):
    app = flask_chat.create_app(db=tmp_path / "chat.db")
    client = app.test_client()
    assert client.post("/chat", json={}).status_code == 400
    assert client.post("/steer", json={"text": "x"}).status_code == 409
    assert client.post("/steer", json={}).status_code == 400
    assert client.post("/stop").get_json() == {"ok": True, "settled": True}
    missing = client.get("/events/no-such-run")
    assert missing.status_code == 404
    assert missing.data == b"No run 'no-such-run' in this chat session."


def test_flask_chat_a_long_chat_is_compacted_with_a_note(flask_chat, tmp_path):
    """The offline model's small window fills after a dozen exchanges: the run's events
    carry the compaction, the history keeps the summary, the page draws both as notes."""
    factory = flask_chat.agent_factory(step_s=0.0, chunk_delay=0.0)
    app = flask_chat.create_app(factory, db=tmp_path / "chat.db")
    service = app.config["CHAT"]
    client = app.test_client()
    page = client.get("/").data
    assert b'case "compaction_end"' in page and b'"compactionSummary"' in page
    compacted = []
    for n in range(40):
        run_id = client.post("/chat", json={"message": f"count to {n % 3 + 1}"}).get_json()[
            "run_id"]
        assert service.runner.wait(run_id, WAIT)
        frames = _frames(client.get(f"/events/{run_id}").data)
        compacted += [f for f in frames if f.get("type") == "compaction_end"]
        if compacted:
            break
    assert compacted and compacted[0]["result"]["estimatedTokensAfter"] < \
        compacted[0]["result"]["tokensBefore"]
    roles = [m["role"] for m in client.get("/history").get_json()["messages"]]
    assert roles.count("compactionSummary") == 1 and roles[0] == "user"
