"""The Vertex AI (Gemini) conversations of ``test_wire_vertex``: each a context, options and
the script the wire server answers with (Gemini's ``streamGenerateContent?alt=sse`` chunks)."""

from __future__ import annotations

import json
from typing import Any

from piagent import (
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    Usage,
    UserMessage,
)

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5E"
       "rkJggg==")
WEATHER = ToolDeclaration("weather", "The weather in a city.", {
    "type": "object", "properties": {"city": {"type": "string"},
                                     "unit": {"type": "string", "const": "C"}},
    "required": ["city"]})
SHOT = ToolDeclaration("screenshot", "A screenshot of a page.", {
    "type": "object", "properties": {"url": {"type": "string"}}})
T = 1_700_000_000_000
# the catalogue's thinking levels of gemini-3.1-pro-preview (pi-ai 1.6.1's data)
PRO3_LEVELS = {"off": None, "minimal": None, "low": "low", "medium": "medium", "high": "high",
               "xhigh": None, "max": None}


def sse(data: Any) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def chunk(parts: list[dict[str, Any]], finish: str | None = None,
          usage: dict[str, int] | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    data: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini",
                            "responseId": "resp-1"}
    if usage:
        data["usageMetadata"] = usage
    return sse(data)


USAGE = {"promptTokenCount": 40, "candidatesTokenCount": 9, "totalTokenCount": 49}


def ok(*chunks: bytes, hang: bool = False) -> dict[str, Any]:
    return {"status": 200, "chunks": list(chunks), "hang": hang}


def _assistant_calls(*calls: ToolCall, model: str = "gemini-2.5-flash") -> AssistantMessage:
    return AssistantMessage(content=list(calls), api="google-vertex", provider="google-vertex",
                            model=model, usage=Usage(), stop_reason="toolUse", timestamp=T)


def conversations() -> list[dict[str, Any]]:
    user = UserMessage(content="What is the weather in Paris?", timestamp=T)
    system = SystemMessage(content="You are terse.", tools_added=[WEATHER, SHOT], timestamp=T)
    two_calls = _assistant_calls(
        ToolCall(id="call_a", name="weather", arguments={"city": "Paris"}),
        ToolCall(id="call_b", name="screenshot", arguments={"url": "https://x.test"}))
    results = [
        ToolResultMessage(tool_call_id="call_a", tool_name="weather",
                          content=[TextContent("18 C, sunny")], is_error=False, timestamp=T),
        ToolResultMessage(tool_call_id="call_b", tool_name="screenshot",
                          content=[ImageContent(data=PNG, mime_type="image/png")],
                          is_error=False, timestamp=T)]
    g3_calls = _assistant_calls(
        ToolCall(id="call_a", name="weather", arguments={"city": "Paris"},
                 thought_signature="c2lnbmF0dXJl"),
        ToolCall(id="call_b", name="screenshot", arguments={"url": "https://x.test"}),
        model="gemini-3.1-pro-preview")
    thought = AssistantMessage(
        content=[ThinkingContent("Let me think.", thinking_signature="dGhvdWdodA=="),
                 TextContent("It is sunny.")], api="google-vertex", provider="google-vertex",
        model="gemini-2.5-flash", usage=Usage(), stop_reason="stop", timestamp=T)
    return [
        {"name": "text", "messages": [user],
         "script": [ok(chunk([{"text": "It is "}]), chunk([{"text": "sunny."}], "STOP", USAGE))]},
        {"name": "system-and-tools", "messages": [system, user], "options": {"temperature": 0.5},
         "script": [ok(chunk([{"text": "Sunny."}], "STOP", USAGE))]},
        {"name": "parallel-tool-calls", "messages": [system, user],
         "script": [ok(chunk([{"text": "Checking."}]),
                       chunk([{"functionCall": {"name": "weather", "args": {"city": "Paris"}}},
                              {"functionCall": {"name": "screenshot",
                                                "args": {"url": "https://x.test"}}}],
                             "STOP", USAGE))]},
        {"name": "tool-results-with-images", "messages": [system, user, two_calls, *results],
         "script": [ok(chunk([{"text": "Done."}], "STOP", USAGE))]},
        {"name": "tool-results-with-images-gemini3", "model": "gemini-3.1-pro-preview",
         "levels": PRO3_LEVELS,
         "messages": [system, user, g3_calls, *results],
         "script": [ok(chunk([{"text": "Done.", "thoughtSignature": "ZG9uZQ=="}], "STOP",
                             USAGE))]},
        {"name": "thinking", "options": {"reasoning": "medium"}, "messages": [user],
         "script": [ok(chunk([{"text": "Weighing it.", "thought": True}]),
                       chunk([{"text": " More.", "thought": True,
                               "thoughtSignature": "c2ln"}]),
                       chunk([{"text": "Sunny."}], "STOP",
                             {**USAGE, "thoughtsTokenCount": 7,
                              "cachedContentTokenCount": 10}))]},
        {"name": "thinking-replayed", "options": {"reasoning": "low"},
         "messages": [user, thought, UserMessage(content="And tomorrow?", timestamp=T)],
         "script": [ok(chunk([{"text": "Rain."}], "STOP", USAGE))]},
        {"name": "abort-mid-stream", "messages": [user], "abortOn": "text_delta",
         "script": [ok(chunk([{"text": "It is "}]), hang=True)]},
        {"name": "http-error-400", "messages": [user],
         "script": [{"status": 400, "body": json.dumps({"error": {
             "code": 400, "message": "Invalid JSON payload received.",
             "status": "INVALID_ARGUMENT"}}).encode()}]},
        {"name": "http-error-429-then-ok", "messages": [user], "options": {"maxRetries": 1},
         "script": [{"status": 429, "body": json.dumps({"error": {
             "code": 429, "message": "Resource exhausted. Please retry in 0.001s.",
             "status": "RESOURCE_EXHAUSTED"}}).encode()},
             ok(chunk([{"text": "Sunny."}], "STOP", USAGE))]},
        {"name": "stream-error", "messages": [user],
         "script": [ok(chunk([{"text": "It is "}]),
                       sse({"error": {"code": 503, "message": "The model is overloaded.",
                                      "status": "UNAVAILABLE"}}))]},
        {"name": "max-tokens", "messages": [user], "options": {"maxTokens": 5},
         "script": [ok(chunk([{"text": "It is"}], "MAX_TOKENS", USAGE))]},
        {"name": "safety-stop", "messages": [user],
         "script": [ok(chunk([{"text": "I cannot"}], "SAFETY", USAGE))]},
        {"name": "thinking-gemini3", "model": "gemini-3.1-pro-preview", "levels": PRO3_LEVELS,
         "options": {"reasoning": "minimal"}, "messages": [user],
         "script": [ok(chunk([{"text": "Hm.", "thought": True}]),
                       chunk([{"functionCall": {"name": "weather", "args": {"city": "Paris"},
                                                "id": "fc-1"}, "thoughtSignature": "ZmM="}],
                             "STOP", USAGE))]},
        {"name": "no-finish-reason", "messages": [user],
         "script": [ok(chunk([{"text": "It is"}]))]},
    ]
