"""The real ``piagent`` command in a subprocess against a local OpenAI-compatible server:
one-shot questions (argument and stdin) with exit codes, flags reaching the request,
``piagent models``, and the errors for bad flags."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import COMMAND_TIMEOUT, ChatServer, serving

ROOT = Path(__file__).resolve().parents[2]


def _hello(body: dict[str, Any]) -> tuple[str, dict[str, int]]:
    return "Hello there.", {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with serving(_hello) as srv:
        yield srv


def _piagent(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
           "PIAGENT_HISTORY": os.devnull}
    return subprocess.run([sys.executable, "-m", "piagent", *args], capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT, env=env, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def test_one_shot_question_prints_the_answer_and_exits_zero(server: ChatServer) -> None:
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", server.url,
                    "--temperature", "0.2", "--max-tokens", "50", "What", "is", "up?")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Hello there.\n"  # the answer alone: everything else on stderr
    assert proc.stderr == "(12 tokens in, 3 out)\n"
    body = server.bodies[0]
    assert body["messages"][-1]["content"] in ("What is up?",
                                               [{"type": "text", "text": "What is up?"}])
    assert body["temperature"] == 0.2
    assert body.get("max_tokens", body.get("max_completion_tokens")) == 50


def test_one_shot_from_stdin(server: ChatServer) -> None:
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", server.url, "-",
                    stdin="Summarise this\nplease\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Hello there.\n"
    sent = server.bodies[0]["messages"][-1]["content"]
    assert "Summarise this\nplease" in json.dumps(sent).replace("\\n", "\n")


def test_piped_chat_prints_session_totals(server: ChatServer) -> None:
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", server.url,
                    stdin="one\ntwo\n/quit\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("assistant> Hello there.") == 2
    assert "session: 24 tokens in, 6 out" in proc.stdout


def test_one_shot_failure_exits_non_zero() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", f"http://127.0.0.1:{port}/v1",
                    "hello")
    assert proc.returncode == 1
    assert "piagent chat: the run failed: " in proc.stderr
    # in the terminal's words: the flag, not the Python parameter; no urllib3 class names
    # the server named by its address, not by the provider id ("local")
    assert f"Could not connect to the server at 127.0.0.1:{port} (connection refused)" \
        in proc.stderr
    assert "is the server running? Check --base-url." in proc.stderr
    assert "base_url" not in proc.stdout + proc.stderr
    assert "urllib3" not in proc.stdout + proc.stderr
    assert "retrying (1 of 2)" in proc.stdout + proc.stderr
    assert proc.stdout == ""  # no answer: nothing on stdout
    assert proc.stderr.count("connection refused") == 3  # two retry notes, the error once


def test_bad_flag_values_say_what_is_accepted() -> None:
    proc = _piagent("chat", "-m", "local/tiny", "--temperature", "hot", "hi")
    assert proc.returncode == 2
    assert "argument --temperature: expected a number from 0 to 2, got 'hot'" in proc.stderr
    proc = _piagent("chat", "-m", "local/tiny", "--max-tokens", "0", "hi")
    assert "argument --max-tokens: expected a whole number above 0, got 0" in proc.stderr
    proc = _piagent("chat", "-m", "local/tiny", "--thinking", "lots", "hi")
    assert "argument --thinking: invalid choice: 'lots'" in proc.stderr
    proc = _piagent("chat", "-m", "local/tiny", "--base-url", "127.0.0.1:8765/v1", "hi")
    assert proc.returncode == 2
    assert proc.stderr == ("piagent chat: --base-url must be an http:// or https:// URL, not "
                           "'127.0.0.1:8765/v1' (did you mean 'http://127.0.0.1:8765/v1'?).\n")


def test_models_lists_the_catalogue() -> None:
    proc = _piagent("models", "openai")
    assert proc.returncode == 0, proc.stderr
    header, *lines = proc.stdout.splitlines()
    assert header.split() == ["MODEL", "API", "CONTEXT", "$", "IN/1M", "$", "OUT/1M"]
    assert lines and all(line.startswith("openai/") for line in lines)
    assert any(line.split() == ["openai/gpt-4o-mini", "openai-responses", "128,000", "0.15",
                                "0.60"] for line in lines)
    assert len({len(line) for line in [header, *lines]}) == 1  # the columns line up
    assert len({len(line) for line in _piagent("models").stdout.splitlines()}) == 1


def test_models_filters_and_says_why_a_model_is_missing() -> None:
    """Issue 51: filter by API and capability; --all lists the models on other APIs."""
    proc = _piagent("models", "google", "--reasoning", "--images")
    assert proc.returncode == 0, proc.stderr
    assert "google/gemini-3-flash-preview" in proc.stdout.split()
    proc = _piagent("models", "--api", "openai-responses")
    names = {line.split()[0] for line in proc.stdout.splitlines()[1:]}
    assert "xai/grok-4.3" in names and "groq/openai/gpt-oss-120b" not in names
    proc = _piagent("models", "openai-codex")  # mistral's until issue 52 made it spoken
    assert proc.returncode == 2
    assert "openai-codex serves its models on APIs piagent does not speak" in proc.stderr
    proc = _piagent("models", "--all", "openai-codex")
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()[1:]
    assert rows and all(row.split()[1:3] == ["openai-codex-responses", "-"] for row in rows)
    assert all(row.rstrip().endswith("not spoken by piagent") for row in rows)
    proc = _piagent("models", "nosuch")
    assert proc.returncode == 2
    assert "piagent models: no provider 'nosuch' in the catalogue; it has " in proc.stderr
