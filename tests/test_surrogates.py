"""No lone surrogate in an event, a stored record or an SSE frame (issue 43 part 4).

A model (the real ``openai-completions`` adapter against a local server) that splits each
astral character of its thinking, text and tool arguments between two chunks; a tool whose
result holds every code-unit prefix of that text (lone high surrogates among them); a user
who types the same. For every store (Memory, SQLite, Jsonl, PostgreSQL), through an Agent's
``sse_events`` and a ``LocalRunner``'s stored run events and ``run_sse_events``: every event
and record can be written as UTF-8, unpaired halves are removed as pi-ai's
``sanitizeSurrogates`` does, and the model's text arrives whole.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from piagent import Agent, AgentToolResult, TextContent, event_to_dict, tool
from piagent.messages import (
    has_surrogates,
    message_to_dict,
    sanitize_surrogates,
    sanitize_surrogates_in,
)
from piagent.models import Model
from piagent.runs import LocalRunner
from piagent.sessions import JsonlStore, MemoryStore, SessionStore, SQLiteStore
from piagent.web import encode_sse, run_sse_events, sse_events
from tests.conftest import ASTRAL_TEXT, WAIT, assert_utf8, every_prefix, js_sanitized, store_of
from tests.providers.sse_script import Reply, ScriptedServer, completions_body

ONCE = settings(max_examples=8, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    """Every store."""
    with store_of(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def run_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    """Every store that keeps runs (a JsonlStore keeps none)."""
    with store_of(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer()
    yield scripted
    scripted.close()


def _script(server: ScriptedServer, text: str) -> None:
    """One turn: thinking, text and two calls of ``echo`` split in halves; then ``text``."""
    server.add(Reply(body=completions_body(text)))
    final = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    server.add(Reply(body=[b"data: " + json.dumps(final).encode() + b"\n\n",
                           b"data: [DONE]\n\n"]))


def _agent(server: ScriptedServer, result: str) -> Agent:
    @tool
    def echo(a: str) -> AgentToolResult:
        """Echo.

        Args:
            a: anything
        """
        return AgentToolResult(content=[TextContent(result)])

    model = Model(id="m", api="openai-completions", provider="openai",
                  base_url=server.url + "/v1")
    return Agent(model=model, tools=[echo], api_key="k")


def _check_transcript(store: SessionStore, session_id: str, text: str, clean: str) -> None:
    messages = store.load(session_id)
    for message in messages:
        assert_utf8(message_to_dict(message), f"the stored {message.role} message")
    roles = [m.role for m in messages]
    assert roles == ["system", "user", "assistant", "toolResult", "toolResult", "assistant"]
    user, first, result, _, last = messages[1:]
    assert user.content[0].text == clean  # what the user typed, unpaired halves removed
    assert [b.thinking if b.type == "thinking" else b.text if b.type == "text" else
            b.arguments for b in first.content] == [text, text, {"a": text}, {"a": text}]
    assert result.content[0].text == clean
    assert last.content[0].text == text


def _check_frame(frame: bytes) -> dict[str, Any]:
    body = frame.decode("utf-8").split("data: ", 1)[1]  # strict: a frame is valid UTF-8
    data: dict[str, Any] = json.loads(body)
    assert_utf8(data, "a frame's event")
    return data


@ONCE
@given(text=ASTRAL_TEXT)
def test_agent_events_frames_and_records_hold_no_half_pair(store: SessionStore,
                                                          server: ScriptedServer,
                                                          text: str) -> None:
    typed, clean = every_prefix(text)
    _script(server, text)
    agent = _agent(server, typed)
    session_id = f"s-{uuid.uuid4().hex[:8]}"
    agent.attach_store(store, session_id)
    seen: list[str] = []

    def events() -> Iterator[Any]:
        for event in agent.stream(typed):
            assert_utf8(event_to_dict(event), f"the {event.type} event")  # as it happens
            seen.append(event.type)
            yield event

    frames = list(sse_events(events(), heartbeat_s=None))
    assert seen[-1] == "agent_end"
    assert [_check_frame(f)["type"] for f in frames] == seen
    _check_transcript(store, session_id, text, clean)


@ONCE
@given(text=ASTRAL_TEXT)
def test_stored_run_events_and_their_frames_hold_no_half_pair(run_store: SessionStore,
                                                               server: ScriptedServer,
                                                               text: str) -> None:
    store = run_store
    typed, clean = every_prefix(text)
    _script(server, text)
    runner = LocalRunner(store, lambda session_id: _agent(server, typed))
    session_id = f"r-{uuid.uuid4().hex[:8]}"
    run_id = runner.start(session_id, typed)
    assert runner.wait(run_id, WAIT)
    frames = list(run_sse_events(runner, run_id))
    types = [_check_frame(f)["type"] for f in frames]
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    assert "message_update" in types
    for event in runner.events(run_id, timeout=WAIT):
        assert event is not None
        assert_utf8(event.event, f"the stored {event.type} run event")
        if event.type == "agent_end":
            break
    _check_transcript(store, session_id, text, clean)


def test_details_and_custom_values_are_cleaned_where_written(tmp_path: Path) -> None:
    """What piagent does not look into on the way (a tool's ``details``, an event's own
    fields) is cleaned where it is serialized: an SSE frame, a stored record."""
    frame = encode_sse({"type": "x", "details": {"k\ud83d": ["a\ud83d\ude00b\ude00"]}},
                       id="1")
    assert frame == 'id: 1\ndata: {"type":"x","details":{"k":["a\U0001f600b"]}}\n\n'.encode()
    with SQLiteStore(tmp_path / "s.db") as sqlite:
        for store in (MemoryStore(), sqlite, JsonlStore(tmp_path / "j")):
            agent = _plain_agent(details={"name": "caf\udce9.txt"})
            agent.attach_store(store, "d")
            agent.prompt("go")
            stored = store.load("d")
            assert stored[3].details == {"name": "caf.txt"}, type(store).__name__
            for message in stored:
                assert_utf8(message_to_dict(message))


def _plain_agent(details: Any) -> Agent:
    from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

    @tool
    def look() -> AgentToolResult:
        """Look."""
        return AgentToolResult(content=[TextContent("ok")], details=details)

    fn = ScriptedStreamFn([assistant_tool_calls(("look", {})), assistant_text("done")])
    return Agent(model=fn.model, stream_fn=fn, tools=[look])


def test_a_tool_error_naming_a_file_that_is_not_utf8_reaches_the_model_cleaned() -> None:
    """``os.fsdecode`` keeps bytes that are not UTF-8 as lone low surrogates; a tool that
    raises with such a name in its message gives the model the text without them."""
    from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

    name = os.fsdecode(b"caf\xe9.txt")
    assert name == "caf\udce9.txt"

    @tool
    def read() -> str:
        """Read."""
        raise ValueError(f"cannot read {name}")

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {})), assistant_text("done")])
    agent = Agent(model=fn.model, stream_fn=fn, tools=[read])
    frames = list(sse_events(agent.stream("go"), heartbeat_s=None))
    for frame in frames:
        _check_frame(frame)
    result = agent.state.messages[-2]
    assert result.role == "toolResult" and result.is_error
    assert result.content[0].text == "ValueError: cannot read caf.txt"
    assert_utf8(message_to_dict(fn.calls[1].context.messages[-1]), "what the model got")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "é", "中", "\ud83d", "\ude00", "\udbff", "\udc00",
                                 "\U0001f600"]), max_size=8))
def test_sanitize_surrogates_is_pi_ais(units: list[str]) -> None:
    """A pair side by side is its character; every other surrogate goes (JavaScript's view
    of the string: one UTF-16 code unit each); a clean string comes back as it is."""
    text = "".join(units)
    clean = sanitize_surrogates(text)
    assert clean == js_sanitized(text)
    assert has_surrogates(text) == any("\ud800" <= c <= "\udfff" for c in text)
    assert not has_surrogates(clean)
    if not has_surrogates(text):
        assert clean is text
    assert sanitize_surrogates_in({text: [text, (text, 1)]}) == {clean: [clean, (clean, 1)]}
