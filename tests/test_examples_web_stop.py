"""Stop in the web examples does not carry the stopped run's steering into the next run."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from piagent import Agent, ToolExecutionStartEvent, UserMessage
from tests.conftest import configure_django

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WAIT = 10.0


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _start_run_in_tool(agent: Agent) -> None:
    """Start a run and return once its (slow) counting tool is executing."""
    in_tool = threading.Event()
    agent.subscribe(lambda e, s: in_tool.set() if isinstance(e, ToolExecutionStartEvent)
                    else None)
    agent.prompt("count to 3", block=False)
    assert in_tool.wait(WAIT)


def _next_prompt_is_alone(agent: Agent, module: ModuleType) -> None:
    shared = sys.modules[module.make_agent.__module__]  # chat_agent.py, beside the app
    agent.state.tools = [shared.make_count_tool(0.0)]  # the next run counts at once
    run = agent.prompt("count to 2", block=False)
    assert run.wait(WAIT)
    users = [m.text for m in run.messages if isinstance(m, UserMessage)]
    assert users == ["count to 2"]  # the stopped run's steering did not ride along


def test_flask_stop_drops_the_stopped_runs_steering() -> None:
    pytest.importorskip("flask")
    app_module = _load(EXAMPLES / "flask_chat" / "app.py", "flask_chat_app_stop")
    agent = app_module.make_agent(step_s=5.0, chunk_delay=0.0)
    client = app_module.create_app(agent).test_client()
    _start_run_in_tool(agent)
    assert client.post("/steer", json={"text": "only even numbers"}).status_code == 200
    body: dict[str, Any] = client.post("/stop").get_json()
    assert body == {"ok": True, "settled": True, "dropped": ["only even numbers"]}
    assert not agent.has_queued_messages()
    _next_prompt_is_alone(agent, app_module)


def test_django_stop_drops_the_stopped_runs_steering() -> None:
    configure_django()
    from django.test import Client, override_settings

    module = _load(EXAMPLES / "django_chat" / "app.py", "django_chat_app_stop")
    agent = module.make_agent(step_s=5.0, chunk_delay=0.0)
    module.set_agent(agent)
    with override_settings(ROOT_URLCONF=module):
        client = Client()
        _start_run_in_tool(agent)
        assert client.post("/steer", data={"text": "stop at 2"},
                           content_type="application/json").status_code == 200
        body = client.post("/stop").json()
    assert body == {"ok": True, "settled": True, "dropped": ["stop at 2"]}
    _next_prompt_is_alone(agent, module)
