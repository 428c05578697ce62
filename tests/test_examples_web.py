"""The web chat examples work offline through their framework's test client: the page is
served, ``/chat`` streams a whole run (text, tool progress, the final answer), ``/steer``
and ``/stop`` answer, and bad input gets a 400. The browser test drives the same Flask
app in Chromium (``tests/test_browser.py``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import WAIT, configure_django

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# every run a test starts has settled, and its threads are gone, when it ends
pytestmark = pytest.mark.usefixtures("no_piagent_threads")


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _frames(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(f[len("data: "):]) for f in data.decode().split("\n\n")
            if f.startswith("data: ")]


def _check_run(frames: list[dict[str, Any]]) -> None:
    types = [f["type"] for f in frames]
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    updates = [f["partialResult"]["details"] for f in frames
               if f["type"] == "tool_execution_update"]
    assert updates == [{"step": 1, "of": 3}, {"step": 2, "of": 3}, {"step": 3, "of": 3}]
    final = frames[-1]["messages"][-1]
    assert final["content"][0]["text"] == "Done: Counted to 3. Anything else?"


@pytest.fixture(scope="module")
def flask_chat() -> ModuleType:
    pytest.importorskip("flask")
    return _load(EXAMPLES / "flask_chat" / "app.py", "flask_chat_app")


def test_flask_chat_streams_a_run(flask_chat):
    agent = flask_chat.make_agent(step_s=0.0, chunk_delay=0.0)
    client = flask_chat.create_app(agent).test_client()
    page = client.get("/")
    assert page.status_code == 200
    assert b'id="stop"' in page.data and b'id="steer-text"' in page.data
    response = client.post("/chat", json={"message": "count to 3"})
    assert response.mimetype == "text/event-stream"
    _check_run(_frames(response.data))
    assert agent.wait_for_idle(WAIT)


def test_flask_chat_bad_input_and_idle_controls(flask_chat):
    client = flask_chat.create_app(flask_chat.make_agent()).test_client()
    assert client.post("/chat", json={}).status_code == 400
    assert client.post("/steer", json={"text": "x"}).status_code == 409
    assert client.post("/steer", json={}).status_code == 400
    assert client.post("/stop").get_json() == {"ok": True, "settled": True, "dropped": []}


@pytest.fixture(scope="module")
def django_chat() -> ModuleType:
    configure_django()
    return _load(EXAMPLES / "django_chat" / "app.py", "django_chat_app")


def test_django_chat_streams_a_run(django_chat):
    from django.test import Client, override_settings

    agent = django_chat.make_agent(step_s=0.0, chunk_delay=0.0)
    django_chat.set_agent(agent)
    with override_settings(ROOT_URLCONF=django_chat):
        client = Client()
        page = client.get("/")
        assert page.status_code == 200
        assert b'id="stop"' in page.content
        response = client.post("/chat", data={"message": "count to 3"},
                               content_type="application/json")
        assert response["Content-Type"] == "text/event-stream"
        _check_run(_frames(b"".join(response.streaming_content)))
        assert agent.wait_for_idle(WAIT)
        assert client.post("/chat", data={}, content_type="application/json").status_code == 400
        assert client.post("/steer", data={"text": "x"},
                           content_type="application/json").status_code == 409
        assert client.post("/stop").json() == {"ok": True, "settled": True, "dropped": []}
        assert client.get("/chat").status_code == 405
