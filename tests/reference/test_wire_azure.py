"""Azure OpenAI Responses: piagent's adapter against pi-ai 1.6.1's, side by side.

Every conversation of ``CASES`` runs through pi-ai's own ``streamSimple`` of
``azure-openai-responses`` (``pi_stream_driver.mjs``: one node process for all) and through
piagent's ``stream_simple``, both against one ``WireServer`` on 127.0.0.1 that answers in the
Responses API's SSE format and records every request. Compared: the requests (path, the
``api-version`` query, the auth header's name, the JSON body) and the normalised events and
final message (``provider_differences.normalise``), identical or differing exactly as the
case's declared rows say (``AZURE_ROWS``; docs/reference.md).
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
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import ModelCost
from piagent.providers import get_model

from .wire_compare import Case, assert_rows_documented, assert_same, run_ours, run_pi
from .wire_recorder import WireServer, sse

API = "azure-openai-responses"
KEY = "azure-key-side-by-side"
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAAB"
       "JRU5ErkJggg==")
WEATHER = ToolDeclaration(name="weather", description="Weather of a city", parameters={
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


# --- the server's answers, in the Responses API's SSE format ---------------------------------


def responses_frames(reply: dict[str, Any]) -> list[str]:
    """The SSE frames of one scripted reply: ``reasoning``, ``text``, ``calls`` (in that
    order), then ``response.completed`` with ``usage`` (input, output, cached) and
    ``status``; ``hang`` stops after the first text delta; ``tail`` replaces the terminal
    event (a stream error)."""
    frames = [sse({"type": "response.created", "response": {"id": "resp_1",
                                                            "status": "in_progress"}})]
    index = 0
    if "reasoning" in reply:
        parts = reply["reasoning"]
        item = {"type": "reasoning", "id": "rs_1", "summary": []}
        frames.append(sse({"type": "response.output_item.added", "output_index": index,
                           "item": item}))
        for n, part in enumerate(parts):
            where = {"output_index": index, "item_id": "rs_1", "summary_index": n}
            frames.append(sse({"type": "response.reasoning_summary_part.added", **where,
                               "part": {"type": "summary_text", "text": ""}}))
            for piece in (part[: len(part) // 2], part[len(part) // 2:]):
                frames.append(sse({"type": "response.reasoning_summary_text.delta", **where,
                                   "delta": piece}))
            frames.append(sse({"type": "response.reasoning_summary_part.done", **where,
                               "part": {"type": "summary_text", "text": part}}))
        done = {**item, "summary": [{"type": "summary_text", "text": p} for p in parts],
                "encrypted_content": "ENC=="}
        frames.append(sse({"type": "response.output_item.done", "output_index": index,
                           "item": done}))
        index += 1
    if "text" in reply:
        text = reply["text"]
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress",
                "content": []}
        frames.append(sse({"type": "response.output_item.added", "output_index": index,
                           "item": item}))
        frames.append(sse({"type": "response.content_part.added", "output_index": index,
                           "item_id": "msg_1", "content_index": 0,
                           "part": {"type": "output_text", "text": "", "annotations": []}}))
        for piece in (text[: len(text) // 2], text[len(text) // 2:]):
            frames.append(sse({"type": "response.output_text.delta", "output_index": index,
                               "item_id": "msg_1", "content_index": 0, "delta": piece}))
            if reply.get("hang"):
                return frames
        done = {**item, "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        frames.append(sse({"type": "response.output_item.done", "output_index": index,
                           "item": done}))
        index += 1
    for n, (name, args) in enumerate(reply.get("calls", ())):
        arguments = json.dumps(args, separators=(",", ":"))
        item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name,
                "arguments": "", "status": "in_progress"}
        frames.append(sse({"type": "response.output_item.added", "output_index": index,
                           "item": item}))
        for piece in (arguments[:5], arguments[5:]):
            frames.append(sse({"type": "response.function_call_arguments.delta",
                               "output_index": index, "item_id": f"fc_{n}", "delta": piece}))
        frames.append(sse({"type": "response.function_call_arguments.done",
                           "output_index": index, "item_id": f"fc_{n}",
                           "arguments": arguments}))
        frames.append(sse({"type": "response.output_item.done", "output_index": index,
                           "item": {**item, "arguments": arguments, "status": "completed"}}))
        index += 1
    if "tail" in reply:
        frames.append(sse(reply["tail"]))
        return frames
    usage_in, usage_out, cached = reply.get("usage", (30, 12, 0))
    status = reply.get("status", "completed")
    response = {"id": "resp_1", "status": status,
                "usage": {"input_tokens": usage_in, "output_tokens": usage_out,
                          "total_tokens": usage_in + usage_out,
                          "input_tokens_details": {"cached_tokens": cached},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
    if status == "incomplete":
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    kind = "response.incomplete" if status == "incomplete" else "response.completed"
    frames.append(sse({"type": kind, "response": response}))
    return frames


def answer(reply: dict[str, Any]) -> dict[str, Any]:
    if "status_code" in reply:
        return {"status": reply["status_code"], "body": json.dumps(reply["error"])}
    return {"frames": responses_frames(reply), "hang": bool(reply.get("hang"))}


# --- the conversations --------------------------------------------------------------------


def _model(base_url: str, **kw: Any) -> Model:
    return Model(**{"id": "gpt-4o", "api": API, "provider": "azure", "base_url": base_url,
                    "name": "GPT-4o", "input": ("text", "image"),
                    "cost": ModelCost(2.5, 10.0, 1.25, 0.0), "context_window": 128000,
                    "max_tokens": 16384, **kw})


def _reasoning_model(base_url: str) -> Model:
    """The catalogue's Azure GPT-5 mini (reasoning, its prices) at the wire server."""
    return dataclasses.replace(get_model("azure", "gpt-5-mini"), base_url=base_url)


def _system(prompt: str = "You are terse.", tools: bool = False) -> SystemMessage:
    return SystemMessage(content=prompt, tools_added=[WEATHER] if tools else None,
                         timestamp=1700000000000)


def _user(text: str, images: int = 0) -> UserMessage:
    content: list[Any] = [TextContent(text)]
    content += [ImageContent(data=PNG, mime_type="image/png") for _ in range(images)]
    return UserMessage(content=content, timestamp=1700000000001)


def _tool_history(model_id: str, image: bool) -> list[Any]:
    call = AssistantMessage(
        content=[TextContent("Checking.", text_signature='{"v":1,"id":"msg_1"}'), ToolCall(id="call_0|fc_0", name="weather",
                                                    arguments={"city": "Oslo"}),
                 ToolCall(id="call_1|fc_1", name="weather", arguments={"city": "Rome"})],
        api=API, provider="azure", model=model_id, stop_reason="toolUse",
        timestamp=1700000000002)
    results: list[Any] = []
    for n, city in enumerate(("Oslo", "Rome")):
        blocks: list[Any] = [TextContent(f"Sunny in {city}")]
        if image:
            blocks.append(ImageContent(data=PNG, mime_type="image/png"))
        results.append(ToolResultMessage(tool_call_id=f"call_{n}|fc_{n}", tool_name="weather",
                                         content=blocks, timestamp=1700000000003 + n))
    return [call, *results]


Builder = Callable[[str], Case]


def _case(messages: list[Any], script: list[dict[str, Any]], **kw: Any) -> Callable[[str], Case]:
    def build(base_url: str) -> Case:
        model_kw = kw.get("model", {})
        model = _reasoning_model(base_url) if kw.get("reasoning_model") else \
            _model(base_url, **model_kw)
        return {"model": model, "messages": messages, "script": script,
                "options": kw.get("options", {}), "abort": kw.get("abort", False),
                "rows": kw.get("rows", []), "request_rows": kw.get("request_rows", [])}
    return build


HELLO = [_system(), _user("Hello")]
CASES: dict[str, Builder] = {
    "text": _case(HELLO, [{"text": "Hi there, how can I help?"}]),
    "text-options": _case(HELLO, [{"text": "Hi."}], options={
        "temperature": 0.3, "max_tokens": 5, "session_id": "session-1234"}),
    "parallel-tool-calls": _case(
        [_system(tools=True), _user("Weather in Oslo and Rome?")],
        [{"calls": [("weather", {"city": "Oslo"}), ("weather", {"city": "Rome"})]}]),
    "tool-results-images": _case(
        [_system(tools=True), _user("Weather in Oslo and Rome?"),
         *_tool_history("gpt-4o", image=True)], [{"text": "Both sunny."}]),
    "tool-results-text": _case(
        [_system(tools=True), _user("Weather in Oslo and Rome?"),
         *_tool_history("gpt-4o", image=False)], [{"text": "Both sunny."}]),
    "history-from-another-model": _case(
        [_system(tools=True), _user("Weather in Oslo?"), AssistantMessage(
            content=[TextContent("Checking."),
                     ToolCall(id="toolu_01A|B+C", name="weather", arguments={"city": "Oslo"})],
            api="anthropic-messages", provider="anthropic", model="claude-sonnet-4-5",
            stop_reason="toolUse", timestamp=1700000000002),
         ToolResultMessage(tool_call_id="toolu_01A|B+C", tool_name="weather",
                           content=[TextContent("Sunny")], timestamp=1700000000003)],
        [{"text": "Sunny."}]),
    "constrained-tool": _case(
        [SystemMessage(content="Be exact.", tools_added=[ToolDeclaration(
            name="lookup", description="Look a number up", parameters={
                "type": "object", "properties": {"n": {"type": "integer"}}},
            constrained_sampling={"type": "json_schema", "strict": "prefer"})],
            timestamp=1700000000000), _user("Look up 7")],
        [{"calls": [("lookup", {"n": 7})]}]),
    "no-strict-mode": _case([_system(tools=True), _user("Weather?")], [{"text": "Which city?"}],
                            model={"compat": {"supportsStrictMode": False}}),
    "user-images": _case([_system(), _user("What is this?", images=2)], [{"text": "A dot."}]),
    "thinking": _case(HELLO, [{"reasoning": ["Thinking it over.", "Second part."],
                               "text": "Done."}],
                      reasoning_model=True, options={"reasoning": "high"},
                      rows=["provider-deltas-add-up"]),
    "thinking-off": _case(HELLO, [{"text": "Quick."}], reasoning_model=True),
    "thinking-tools": _case(
        [_system(tools=True), _user("Weather in Oslo?")],
        [{"reasoning": ["Need the tool."], "calls": [("weather", {"city": "Oslo"})]}],
        reasoning_model=True, options={"reasoning": "medium"},
        rows=["provider-deltas-add-up"]),
    "cached-usage": _case(HELLO, [{"text": "Cached.", "usage": (1200, 40, 1000)}]),
    "length": _case(HELLO, [{"text": "Cut", "status": "incomplete"}]),
    "abort": _case(HELLO, [{"text": "Streaming on and on", "hang": True}], abort=True,
                   rows=["wire-abort-message"]),
    "http-400": _case(HELLO, [{"status_code": 400, "error": {"error": {
        "message": "Invalid value for 'input'.", "type": "invalid_request_error",
        "code": "invalid_value", "param": "input"}}}],
                      rows=["provider-error-sentence"]),
    "http-429": _case(HELLO, [{"status_code": 429, "error": {"error": {
        "message": "Rate limit reached.", "code": "429"}}}],
                      rows=["provider-error-sentence"]),
    "stream-error": _case(HELLO, [{"text": "Partial", "tail": {
        "type": "error", "code": "server_error", "message": "The server had an error.",
        "param": None, "sequence_number": 9}}], rows=["provider-error-sentence"]),
    "response-failed": _case(HELLO, [{"text": "Partial", "tail": {
        "type": "response.failed", "response": {"id": "resp_1", "status": "failed", "error": {
            "code": "server_error", "message": "Something went wrong."}}}}],
        rows=["provider-error-sentence"]),
    "deployment-map": _case(HELLO, [{"text": "Hi."}], options={
        "env": {"AZURE_OPENAI_DEPLOYMENT_NAME_MAP": "gpt-4o=my-gpt4o-deploy, other=x",
                "AZURE_OPENAI_API_VERSION": "2025-04-01-preview"}}),
}


# --- both sides ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[WireServer]:
    with contextlib.closing(WireServer()) as wire:
        yield wire


def _built(server: WireServer, name: str, side: str) -> Case:
    run = f"azure-{name}-{side}"
    probe = CASES[name]("")
    base = server.add_run(run, [answer(r) for r in probe["script"]]) + "/openai/v1"
    case = CASES[name](base)
    case["run"] = run
    return case


@pytest.fixture(scope="module")
def pi_side(pi16_installed: Path, server: WireServer,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cases = {name: _built(server, name, "pi") for name in CASES}
    return run_pi(cases, KEY, tmp_path_factory.mktemp("wire-azure"))


@pytest.mark.parametrize("name", list(CASES))
def test_conversation_as_pi(name: str, server: WireServer, pi_side: dict[str, Any]) -> None:
    case = _built(server, name, "py")
    ours = run_ours(case, KEY)
    status = next((r["status_code"] for r in case["script"] if "status_code" in r), 200)
    assert_same(API, case, status, pi_side[name], ours, server.requests(f"azure-{name}-pi"),
                server.requests(case["run"]))


def test_rows_are_documented() -> None:
    cases = [build("") for build in CASES.values()]
    assert_rows_documented({row for case in cases for row in case["rows"]}
                           | {row for case in cases for row in case["request_rows"]})
