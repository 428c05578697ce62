"""Mistral conversations: piagent's adapter against pi-ai 1.6.1's, side by side.

Every conversation of ``CASES`` runs through pi-ai's own ``streamSimple`` of
``mistral-conversations`` (``pi_stream_driver.mjs``) and through piagent's ``stream_simple``,
both against one ``WireServer`` on 127.0.0.1 that answers in Mistral's streaming format
(Chat Completions chunks whose ``delta.content`` is a string or typed parts, then
``[DONE]``) and records every request. Compared as ``wire_compare.assert_same`` says: the
requests identical (path, the auth header's name, the JSON body), the normalised events
and final message identical or differing exactly as the case's rows say (docs/reference.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import Model
from piagent.messages import (
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import ModelCost
from piagent.providers import get_model

from .wire_compare import Case, assert_rows_documented, assert_same, run_ours, run_pi
from .wire_recorder import WireServer, sse

API = "mistral-conversations"
KEY = "mistral-key-side-by-side"
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAAB"
       "JRU5ErkJggg==")
WEATHER = ToolDeclaration(name="weather", description="Weather of a city", parameters={
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


# --- the server's answers, in Mistral's streaming format --------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    return sse({"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                "model": "mistral-test", "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish}], **extra})


def mistral_frames(reply: dict[str, Any]) -> list[str]:
    """``raw`` (deltas as they are), ``thinking`` (typed thinking parts), ``text`` (strings, or typed text parts with
    ``typed``), ``calls`` ([name, args, id or None]), then the finish chunk with ``usage``
    (prompt, completion, cached) and ``finish`` (default ``stop`` / ``tool_calls``), then
    ``[DONE]``; ``hang`` stops after the first text delta; ``tail`` replaces the finish
    chunk (a stream error)."""
    frames = [_chunk({"role": "assistant", "content": ""})]
    frames += [_chunk(delta) for delta in reply.get("raw", ())]
    for piece in reply.get("thinking", ()):
        frames.append(_chunk({"content": [{"type": "thinking", "thinking": [
            {"type": "text", "text": piece}]}]}))
    text = reply.get("text", "")
    for piece in (text[: len(text) // 2], text[len(text) // 2:]) if text else ():
        delta = [{"type": "text", "text": piece}] if reply.get("typed") else piece
        frames.append(_chunk({"content": delta}))
        if reply.get("hang"):
            return frames
    for n, (name, args, call_id) in enumerate(reply.get("calls", ())):
        arguments = json.dumps(args, separators=(",", ":"))
        call: dict[str, Any] = {"function": {"name": name, "arguments": arguments[:6]},
                                "index": n}
        if call_id is not None:
            call["id"] = call_id
        frames.append(_chunk({"tool_calls": [call]}))
        frames.append(_chunk({"tool_calls": [{"function": {"arguments": arguments[6:]},
                                              "index": n, "id": call_id or "null"}]}))
    if "tail" in reply:
        frames.append(sse(reply["tail"]))
        return frames
    prompt, completion, cached = reply.get("usage", (25, 7, 0))
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    usage = reply.get("usage_raw", usage)
    finish = reply.get("finish", "tool_calls" if reply.get("calls") else "stop")
    frames.append(_chunk({"content": ""}, finish, usage=usage))
    frames.append("data: [DONE]\n\n")
    return frames


def answer(reply: dict[str, Any]) -> dict[str, Any]:
    if "status_code" in reply:
        return {"status": reply["status_code"], "body": json.dumps(reply["error"])}
    return {"frames": mistral_frames(reply), "hang": bool(reply.get("hang"))}


# --- the conversations --------------------------------------------------------------------


def _model(base_url: str, **kw: Any) -> Model:
    return Model(**{"id": "mistral-large-2512", "api": API, "provider": "mistral",
                    "base_url": base_url, "name": "Mistral Large", "input": ("text", "image"),
                    "cost": ModelCost(0.5, 1.5, 0.05, 0.0), "context_window": 262144,
                    "max_tokens": 16384, **kw})


def _catalogued(model_id: str) -> Callable[[str], Model]:
    return lambda base_url: dataclasses.replace(get_model("mistral", model_id),
                                                base_url=base_url)


def _system(tools: bool = False) -> SystemMessage:
    return SystemMessage(content="You are terse.", tools_added=[WEATHER] if tools else None,
                         timestamp=1700000000000)


LOOKUP = ToolDeclaration(name="lookup", description="Look a number up", parameters={
    "type": "object", "properties": {"n": {"type": "integer"}}},
    constrained_sampling={"type": "json_schema", "strict": "prefer"})


def _system_with(*tools: ToolDeclaration) -> SystemMessage:
    return SystemMessage(content="Be exact.", tools_added=list(tools), timestamp=1700000000000)


def _user(text: str, images: int = 0) -> UserMessage:
    content: list[Any] = [TextContent(text)]
    content += [ImageContent(data=PNG, mime_type="image/png") for _ in range(images)]
    return UserMessage(content=content, timestamp=1700000000001)


def _tool_history(ids: tuple[str, str], *, image: bool, provider: str = "mistral",
                  api: str = API, thinking: bool = False, error: bool = False) -> list[Any]:
    blocks: list[Any] = [ThinkingContent("Two cities.")] if thinking else []
    blocks += [TextContent("Checking."), ToolCall(id=ids[0], name="weather",
                                                  arguments={"city": "Oslo"}),
               ToolCall(id=ids[1], name="weather", arguments={"city": "Rome"})]
    call = AssistantMessage(content=blocks, api=api, provider=provider,
                            model="mistral-large-2512", stop_reason="toolUse",
                            timestamp=1700000000002)
    results: list[Any] = []
    for n, city in enumerate(("Oslo", "Rome")):
        content: list[Any] = [TextContent(f"Sunny in {city}")]
        if image:
            content.append(ImageContent(data=PNG, mime_type="image/png"))
        results.append(ToolResultMessage(tool_call_id=ids[n], tool_name="weather",
                                         content=content, is_error=error and n == 1,
                                         timestamp=1700000000003 + n))
    return [call, *results]


def _case(messages: list[Any], script: list[dict[str, Any]], **kw: Any) -> Callable[[str], Case]:
    def build(base_url: str) -> Case:
        make = kw.get("model")
        model = make(base_url) if make else _model(base_url)
        return {"model": model, "messages": messages, "script": script,
                "options": kw.get("options", {}), "abort": kw.get("abort", False),
                "rows": kw.get("rows", []), "request_rows": kw.get("request_rows", [])}
    return build


HELLO = [_system(), _user("Hello")]
TOOLS_ASKED = [_system(tools=True), _user("Weather in Oslo and Rome?")]
CASES: dict[str, Callable[[str], Case]] = {
    "text": _case(HELLO, [{"text": "Hi there, how can I help?"}]),
    "text-typed-parts": _case(HELLO, [{"text": "Typed hello.", "typed": True}]),
    "text-options": _case(HELLO, [{"text": "Hi."}], options={
        "temperature": 0.2, "max_tokens": 300, "session_id": "session-42"}),
    "session-no-cache": _case(HELLO, [{"text": "Hi."}], options={
        "session_id": "session-42", "cache_retention": "none"}),
    "parallel-tool-calls": _case(TOOLS_ASKED, [{"calls": [
        ("weather", {"city": "Oslo"}, "aB3dE5gH7"), ("weather", {"city": "Rome"}, "Zz9Yy8Xx7")]}]),
    "tool-call-without-id": _case(TOOLS_ASKED, [{"calls": [("weather", {"city": "Oslo"}, None)]}]),
    "tool-results-images": _case(
        [*TOOLS_ASKED, *_tool_history(("aB3dE5gH7", "Zz9Yy8Xx7"), image=True)],
        [{"text": "Both sunny."}]),
    "tool-results-error-text-only-model": _case(
        [*TOOLS_ASKED, *_tool_history(("aB3dE5gH7", "Zz9Yy8Xx7"), image=True, error=True)],
        [{"text": "One failed."}], model=_catalogued("codestral-latest")),
    "history-from-another-model": _case(
        [*TOOLS_ASKED, *_tool_history(("call_abc|fc_1", "toolu_01XYZ"), image=False,
                                      provider="openai", api="openai-responses", thinking=True)],
        [{"text": "Both sunny."}]),
    "history-with-thinking": _case(
        [*TOOLS_ASKED, *_tool_history(("aB3dE5gH7", "Zz9Yy8Xx7"), image=False, thinking=True)],
        [{"text": "Both sunny."}]),
    "user-images": _case([_system(), _user("What is this?", images=2)], [{"text": "A dot."}]),
    "user-images-text-only-model": _case([_system(), _user("What is this?", images=1)],
                                         [{"text": "Cannot see."}],
                                         model=_catalogued("codestral-latest")),
    "thinking-effort": _case(HELLO, [{"thinking": ["Let me think. ", "Done thinking."],
                                      "text": "Answer."}],
                             model=_catalogued("mistral-small-latest"),
                             options={"reasoning": "high"}),
    "thinking-clamped": _case(HELLO, [{"thinking": ["Hmm."], "text": "Ok."}],
                              model=_catalogued("magistral-medium-latest"),
                              options={"reasoning": "medium"}),
    "thinking-off-effort-none": _case(HELLO, [{"text": "Quick."}],
                                      model=_catalogued("mistral-small-latest")),
    "thinking-prompt-mode": _case(HELLO, [{"thinking": ["Reasoning."], "text": "Done."}],
                                  model=lambda url: _model(url, reasoning=True),
                                  options={"reasoning": "low"}),
    "thinking-then-tools": _case(TOOLS_ASKED, [{"thinking": ["Need weather."], "calls": [
        ("weather", {"city": "Oslo"}, "aB3dE5gH7")]}],
        model=_catalogued("mistral-large-latest"), options={"reasoning": "medium"}),
    "switching-blocks": _case(HELLO, [{"raw": [
        {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "First."}]}]},
        {"content": ""},  # GLM's empty deltas around thinking: no block
        {"content": ["Some ", {"type": "text", "text": "text."}]},
        {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "More."},
                                                       {"type": "text", "text": ""}]}]},
        {"content": "Final."}]}], model=_catalogued("mistral-small-latest"),
        options={"reasoning": "high"}),
    "arguments-as-object": _case(TOOLS_ASKED, [{"raw": [{"tool_calls": [
        {"id": "aB3dE5gH7", "index": 0, "function": {"name": "weather",
                                                     "arguments": {"city": "Oslo"}}}]}],
        "finish": "tool_calls"}]),
    "usage-num-cached": _case(HELLO, [{"text": "Hi.", "usage_raw": {
        "prompt_tokens": 900, "completion_tokens": 10, "num_cached_tokens": 700}}]),
    "constrained-tool-without-support": _case([_system_with(LOOKUP), _user("Look up 7")], [
        {"calls": [("lookup", {"n": 7}, "aB3dE5gH7")]}]),
    "constrained-tool-with-support": _case([_system_with(LOOKUP), _user("Look up 7")], [
        {"calls": [("lookup", {"n": 7}, "aB3dE5gH7")]}],
        model=lambda url: _model(url, compat={"supportsStrictMode": True})),
    "cached-usage": _case(HELLO, [{"text": "Cached.", "usage": (2000, 30, 1500)}]),
    "length": _case(HELLO, [{"text": "Cut", "finish": "length"}]),
    "abort": _case(HELLO, [{"text": "Streaming on and on", "hang": True}], abort=True,
                   rows=["wire-abort-message"]),
    "http-400": _case(HELLO, [{"status_code": 400, "error": {
        "object": "error", "message": "Invalid model: mistral-large-2512", "type":
        "invalid_model", "param": None, "code": "1500"}}], rows=["provider-error-sentence"]),
    "http-429": _case(HELLO, [{"status_code": 429, "error": {
        "message": "Requests rate limit exceeded"}}], rows=["provider-error-sentence"]),
    "finish-error": _case(HELLO, [{"text": "Partial", "finish": "error"}]),
    "stream-error-event": _case(HELLO, [{"text": "Partial", "tail": {
        "object": "error", "message": "Internal server error", "type": "internal_error"}}]),
    "no-finish-reason": _case(HELLO, [{"text": "Partial", "tail": {
        "id": "cmpl-1", "choices": []}}]),
}


# --- both sides ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[WireServer]:
    with contextlib.closing(WireServer()) as wire:
        yield wire


def _built(server: WireServer, name: str, side: str) -> Case:
    run = f"mistral-{name}-{side}"
    probe = CASES[name]("http://127.0.0.1")
    case = CASES[name](server.add_run(run, [answer(r) for r in probe["script"]]))
    case["run"] = run
    return case


@pytest.fixture(scope="module")
def pi_side(pi16_installed: Path, server: WireServer,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cases = {name: _built(server, name, "pi") for name in CASES}
    return run_pi(cases, KEY, tmp_path_factory.mktemp("wire-mistral"))


@pytest.mark.parametrize("name", list(CASES))
def test_conversation_as_pi(name: str, server: WireServer, pi_side: dict[str, Any]) -> None:
    case = _built(server, name, "py")
    ours = run_ours(case, KEY)
    status = next((r["status_code"] for r in case["script"] if "status_code" in r), 200)
    assert_same(API, case, status, pi_side[name], ours, server.requests(f"mistral-{name}-pi"),
                server.requests(case["run"]))


def test_rows_are_documented() -> None:
    cases = [build("http://127.0.0.1") for build in CASES.values()]
    assert_rows_documented({row for case in cases for row in case["rows"]}
                           | {row for case in cases for row in case["request_rows"]})



@pytest.mark.parametrize(("name", "sent"), [("text-options", True), ("session-no-cache", False)])
def test_the_session_goes_as_cache_key_and_affinity_on_both_sides(
        name: str, sent: bool, server: WireServer, pi_side: dict[str, Any]) -> None:
    ours = _built(server, name, "py-session")
    run_ours(ours, KEY)
    for record in (server.requests(f"mistral-{name}-pi")[0], server.requests(ours["run"])[0]):
        assert (record["headers"].get("x-affinity"), record["body"].get("prompt_cache_key")) \
            == (("session-42", "session-42") if sent else (None, None))
