"""Azure OpenAI Responses: piagent's adapter against pi-ai 1.6.1's, side by side.

Every conversation of ``CASES`` runs through pi-ai's own ``streamSimple`` of
``azure-openai-responses`` (``pi_wire_driver.mjs``: one node process for all) and through
piagent's ``stream_simple``, both against one ``WireServer`` on 127.0.0.1 that answers in the
Responses API's SSE format and records every request. Compared: the requests (path, the
``api-version`` query, the auth header's name, the JSON body) and the normalised events and
final message (``provider_differences.normalise``), identical or differing exactly as the
case's declared rows say (``AZURE_ROWS``; docs/reference.md).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import AbortController, Context, Model, StreamOptions, message_to_dict
from piagent.events import assistant_event_to_dict
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
from piagent.providers import get_model, stream_simple
from tests.conftest import WAIT

from .conftest import DRIVER_TIMEOUT_S, PI16, node_command
from .provider_differences import Side, deltas_add_up, error_sentence, normalise
from .ref_normalise import _first_path, _short, first_difference
from .wire_server import WireServer, sse

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


Case = dict[str, Any]
Builder = Callable[[str], Case]


def _case(messages: list[Any], script: list[dict[str, Any]], **kw: Any) -> Callable[[str], Case]:
    def build(base_url: str) -> Case:
        model_kw = kw.get("model", {})
        model = _reasoning_model(base_url) if kw.get("reasoning_model") else \
            _model(base_url, **model_kw)
        return {"model": model, "messages": messages, "script": script,
                "options": kw.get("options", {}), "abort": kw.get("abort", False),
                "rows": kw.get("rows", [])}
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


def _pi_model(model: Model) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": model.id, "name": model.name or model.id, "api": model.api,
        "provider": model.provider, "baseUrl": model.base_url, "reasoning": model.reasoning,
        "input": list(model.input),
        "cost": {"input": model.cost.input, "output": model.cost.output,
                 "cacheRead": model.cost.cache_read, "cacheWrite": model.cost.cache_write},
        "contextWindow": model.context_window, "maxTokens": model.max_tokens}
    if model.compat is not None:
        out["compat"] = dict(model.compat)
    if model.thinking_level_map is not None:
        out["thinkingLevelMap"] = dict(model.thinking_level_map)
    return out


_PI_OPTION = {"temperature": "temperature", "max_tokens": "maxTokens",
              "session_id": "sessionId", "reasoning": "reasoning", "env": "env"}


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
    jobs = []
    for name in CASES:
        case = _built(server, name, "pi")
        options = {_PI_OPTION[k]: v for k, v in case["options"].items()}
        jobs.append({"key": name, "model": _pi_model(case["model"]),
                     "context": {"messages": [message_to_dict(m) for m in case["messages"]]},
                     "options": {"apiKey": KEY, **options}, "abortAtText": case["abort"]})
    path = tmp_path_factory.mktemp("wire-azure") / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}))
    done = subprocess.run([*node_command(PI16, "pi_wire_driver.mjs"), str(path)], cwd=PI16,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    assert done.returncode == 0, f"pi_wire_driver.mjs failed:\n{done.stderr[-4000:]}"
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def run_ours(case: Case, stream_fn: Any = stream_simple) -> dict[str, Any]:
    controller = AbortController()
    options = StreamOptions(api_key=KEY, max_retries=0, max_retry_delay_ms=1,
                            signal=controller.signal, **case["options"])
    stream = stream_fn(case["model"], Context(list(case["messages"])), options)
    events = []
    for event in stream:
        events.append(assistant_event_to_dict(event, partial=False))
        if case["abort"] and event.type == "text_delta":
            controller.abort()
    return {"events": events, "result": message_to_dict(stream.result(WAIT))}


def _requests(server: WireServer, run: str) -> list[dict[str, Any]]:
    return server.requests(run)


def rounded(value: Any) -> Any:
    """Floats to 12 significant digits: pi prices per token as ``(price / 1e6) * tokens``,
    piagent as ``price * tokens / 1e6`` (the last bit may differ)."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()
                if not (k == "totalFromProvider" and v is False)}  # pi-ai 1.6's default
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def _request_difference(pi: Any, py: Any) -> str:
    path = _first_path(pi, py)
    return f"requests differ at {path}:\n  pi:      {_short(pi)}\n  piagent: {_short(py)}"


@pytest.mark.parametrize("name", list(CASES))
def test_conversation_as_pi(name: str, server: WireServer, pi_side: dict[str, Any]) -> None:
    case = _built(server, name, "py")
    ours = run_ours(case)
    pi = pi_side[name]
    assert "driverError" not in pi, pi["driverError"]
    theirs_requests = _requests(server, f"azure-{name}-pi")
    our_requests = _requests(server, case["run"])
    assert our_requests == theirs_requests, _request_difference(theirs_requests, our_requests)
    pi_out = rounded(normalise(pi, API))
    py_out = rounded(normalise(ours, API))
    status = next((r["status_code"] for r in CASES[name]("")["script"] if "status_code" in r),
                  200)
    side = Side({"status": status}, b"", py_out)
    for row in case["rows"]:
        changed = WIRE_ROWS[row](copy.deepcopy(pi_out), side)
        assert changed != pi_out, f"row {row} does not change pi's output"
        pi_out = changed
    assert py_out == pi_out, first_difference(pi_out, py_out)


def abort_message(pi: Any, side: Side) -> Any:
    """An abort mid-stream: pi-ai's message is what its SDK's stream said when the abort cut
    it ("... stream ended before a terminal response event"); piagent's is "Request was
    aborted", as on every API. Both end with the partial content and ``aborted``."""
    out = copy.deepcopy(pi)
    for message in [out["result"], *(e["error"] for e in out["log"] if "error" in e)]:
        assert message["stopReason"] == "aborted"
        message["errorMessage"] = "Request was aborted"
    return out


WIRE_ROWS: dict[str, Callable[[Any, Side], Any]] = {
    "provider-error-sentence": error_sentence,
    "provider-deltas-add-up": deltas_add_up,
    "wire-abort-message": abort_message,
}
"""The declared differences (docs/reference.md), each a transform of pi's normalised output
into piagent's that checks its claim on the way."""


def test_rows_are_documented() -> None:
    text = (Path(__file__).parents[2] / "docs" / "reference.md").read_text(encoding="utf-8")
    for name in WIRE_ROWS:
        assert f"`{name}`" in text, name
    used = {row for build in CASES.values() for row in build("")["rows"]}
    assert used == set(WIRE_ROWS)
