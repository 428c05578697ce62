"""Replay real recorded provider responses through piagent's adapters.

Each ``data/<name>.meta.json`` names a recorded body (``.sse`` or, for an HTTP error,
``.body``), its API, provider, model and provenance (``SOURCES.md``). The body is served by
a ``ScriptedServer`` on 127.0.0.1 twice: in one write, and in 7-byte writes (so events,
lines and UTF-8 sequences are split). The final ``AssistantMessage`` must equal what
``reference.expect`` reads from the bytes on its own: text, thinking, signatures, tool calls
(ids, names, parsed arguments), usage and stop reason; errors end with ``stop_reason
"error"`` and a message carrying the provider's own text (and the HTTP status). The deltas
streamed for every block must add up to the block's final content.

A recording that shows a defect in piagent has ``"xfail": "<the defect>"`` in its meta file:
it runs as ``xfail(strict=True)``, so fixing the defect turns it into a failure that asks
for the marker to be removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from piagent.messages import AssistantMessage, TextContent, ThinkingContent, UserMessage
from piagent.models import Model
from piagent.providers import stream_simple
from piagent.stream import Context, StreamOptions

from ..sse_script import WAIT, Reply, ScriptedServer
from .reference import Expected, expect

DATA = Path(__file__).parent / "data"
KEY = "sk-recorded-replay-0000"
CHUNK = 7
_BASE = {"openai-completions": "/v1", "openai-responses": "/v1", "anthropic-messages": "",
         "google-generative-ai": "/v1beta"}
_RETRIED = {408, 409, 429, 500, 502, 503, 504, 529}


def _recordings() -> list[Any]:
    params = []
    for path in sorted(DATA.glob("*.meta.json")):
        name = path.name[: -len(".meta.json")]
        meta = json.loads(path.read_text())
        marks = []
        if meta.get("xfail"):
            marks.append(pytest.mark.xfail(strict=True, reason=meta["xfail"]))
        for mode in ("whole", "chunks"):
            params.append(pytest.param(name, mode, marks=marks, id=f"{name}-{mode}"))
    return params


def _load(name: str) -> tuple[dict[str, Any], bytes]:
    meta = json.loads((DATA / f"{name}.meta.json").read_text())
    return meta, (DATA / meta["body"]).read_bytes()


def _replay(server: ScriptedServer, meta: dict[str, Any], body: bytes, mode: str
            ) -> tuple[list[Any], AssistantMessage]:
    pieces: list[Any] = [body] if mode == "whole" else [
        body[i:i + CHUNK] for i in range(0, len(body), CHUNK)]
    reply = Reply(status=meta["status"], body=pieces, content_type=meta["content_type"])
    # a retryable HTTP error is answered the same way on every retry
    server.add(*([reply] * (3 if meta["status"] in _RETRIED else 1)))
    model = Model(id=meta["model"], api=meta["api"], provider=meta["provider"],
                  base_url=server.url + _BASE[meta["api"]])
    stream = stream_simple(model, Context([UserMessage(content="Hi")]),
                           StreamOptions(api_key=KEY, max_retry_delay_ms=1))
    events = list(stream)
    return events, stream.result(WAIT)


def _usage(message: AssistantMessage) -> dict[str, int]:
    u = message.usage
    return {"input": u.input, "output": u.output, "cache_read": u.cache_read,
            "cache_write": u.cache_write, "total_tokens": u.total_tokens}


def _signatures(meta: dict[str, Any], message: AssistantMessage) -> list[str]:
    if meta["api"] == "anthropic-messages":
        return [b.thinking_signature or "" for b in message.content
                if isinstance(b, ThinkingContent)]
    if meta["api"] == "google-generative-ai":
        return [c.thought_signature for c in message.tool_calls if c.thought_signature]
    return []


def _check_deltas(events: list[Any], message: AssistantMessage) -> None:
    streamed: dict[int, str] = {}
    for event in events:
        if event.type in ("text_delta", "thinking_delta"):
            streamed[event.content_index] = streamed.get(event.content_index, "") + event.delta
    for index, block in enumerate(message.content):
        if isinstance(block, TextContent) and index in streamed:
            assert streamed[index] == block.text, f"text deltas of block {index}"
        elif isinstance(block, ThinkingContent) and index in streamed and not block.redacted:
            assert streamed[index] == block.thinking, f"thinking deltas of block {index}"


@pytest.mark.parametrize(("name", "mode"), _recordings())
def test_recording(name: str, mode: str, sse_server: ScriptedServer,
                   no_piagent_threads: None) -> None:
    meta, body = _load(name)
    expected: Expected = expect(meta, body)
    events, message = _replay(sse_server, meta, body, mode)
    assert events and events[-1].type in ("done", "error")
    assert (message.stop_reason, message.error_message if expected.error else None) == (
        expected.stop_reason, message.error_message if expected.error else None)
    for piece in expected.error:
        assert piece in (message.error_message or ""), message.error_message
    if expected.error:  # readable: the provider's text, not its JSON
        assert '{"' not in (message.error_message or ""), message.error_message
    assert message.text == expected.text
    thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingContent))
    assert thinking == expected.thinking
    if not expected.error:
        calls = [(c.id if wire_id is not None else None, c.name, c.arguments)
                 for c, (wire_id, _, _) in zip(message.tool_calls, expected.tool_calls,
                                               strict=False)]
        assert len(message.tool_calls) == len(expected.tool_calls)
        assert calls == expected.tool_calls
        assert _signatures(meta, message) == expected.signatures
    if expected.usage is not None:
        assert _usage(message) == expected.usage
    _check_deltas(events, message)
