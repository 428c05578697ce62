"""The web examples: --base-url, the key checked at start, and a page that says when the
model is the offline scripted one."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import load_example


@pytest.fixture(scope="module")
def chat_agent() -> ModuleType:
    return load_example("flask_chat/chat_agent.py", "chat_agent_flags")


def test_missing_key_stops_the_server_at_start(chat_agent: ModuleType,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(SystemExit) as info:
        chat_agent.make_agent("openai/gpt-4o-mini")
    assert str(info.value) == (
        "--model openai/gpt-4o-mini: no API key; set OPENAI_API_KEY in the environment "
        "(or pass --base-url URL for a local OpenAI-compatible server).")


def test_base_url_points_the_model_at_a_local_server(chat_agent: ModuleType) -> None:
    agent = chat_agent.make_agent("ollama/llama3.2", base_url="http://127.0.0.1:11434/v1")
    model = agent.state.model
    assert (model.provider, model.id, model.api, model.base_url) == (
        "ollama", "llama3.2", "openai-completions", "http://127.0.0.1:11434/v1")
    assert chat_agent.model_note(agent) == (
        "Model: ollama/llama3.2 at http://127.0.0.1:11434/v1")
    with pytest.raises(SystemExit, match="--base-url needs --model provider/model-id"):
        chat_agent.make_agent(None, base_url="http://127.0.0.1:11434/v1")


def test_flask_page_says_the_model_is_offline(tmp_path: Path) -> None:
    pytest.importorskip("flask")
    app = load_example("flask_chat/app.py", "flask_chat_app_flags")
    page = app.create_app(db=tmp_path / "chat.db").test_client().get("/").data.decode()
    assert '<p id="model-note" class="note">Offline demo: the model is scripted' in page
