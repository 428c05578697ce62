"""The Amazon Bedrock conversations of ``test_wire_bedrock``: each a model, a context, options
and the script the wire server answers with: Converse stream events in the binary
``application/vnd.amazon.eventstream`` framing (``frame`` writes one, written here from the
format's description: a prelude with the lengths and its CRC-32, string headers, the JSON
payload, the message's CRC-32)."""

from __future__ import annotations

import base64
import json
import struct
import zlib
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

from .wire_vertex_conversations import PNG, SHOT, WEATHER

T = 1_700_000_000_000
EVENT_STREAM = "application/vnd.amazon.eventstream"
SONNET = "anthropic.claude-sonnet-4-5-20250929-v1:0"
OPUS = "anthropic.claude-opus-4-7"
OSS = "openai.gpt-oss-120b"
NOVA = "amazon.nova-pro-v1:0"
# pi-ai 1.6.1's catalogue entries of these models (the fields the request depends on)
MODELS: dict[str, dict[str, Any]] = {
    SONNET: {"name": "Claude Sonnet 4.5", "reasoning": True, "maxTokens": 64000,
             "contextWindow": 200000, "compat": {"supportsStrictMode": True},
             "cost": {"input": 3.3, "output": 16.5, "cacheRead": 0.33, "cacheWrite": 4.125}},
    OPUS: {"name": "Claude Opus 4.7", "reasoning": True, "maxTokens": 128000,
           "contextWindow": 1000000, "thinkingLevelMap": {"xhigh": "xhigh", "max": "max"},
           "cost": {"input": 5.5, "output": 27.5, "cacheRead": 0.55, "cacheWrite": 6.875}},
    OSS: {"name": "gpt-oss-120b", "reasoning": True, "maxTokens": 131072,
          "contextWindow": 131072,
          "cost": {"input": 0.15, "output": 0.6, "cacheRead": 0, "cacheWrite": 0}},
    NOVA: {"name": "Nova Pro", "reasoning": False, "maxTokens": 10000, "contextWindow": 300000,
           "cost": {"input": 0.8, "output": 3.2, "cacheRead": 0.2, "cacheWrite": 0}},
}


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (struct.pack("!B", len(raw_name)) + raw_name + b"\x07"
            + struct.pack("!H", len(raw_value)) + raw_value)


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event stream message."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack("!II", total, len(head))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + head + payload
    return message + struct.pack("!I", zlib.crc32(message))


def event(kind: str, **data: Any) -> bytes:
    return frame({":event-type": kind, ":content-type": "application/json",
                  ":message-type": "event"}, json.dumps({**data, "p": "abcd"}).encode())


def exception(kind: str, message: str) -> bytes:
    return frame({":exception-type": kind, ":content-type": "application/json",
                  ":message-type": "exception"}, json.dumps({"message": message}).encode())


def start() -> bytes:
    return event("messageStart", role="assistant")


def text(index: int, *pieces: str) -> list[bytes]:
    return [*(event("contentBlockDelta", contentBlockIndex=index, delta={"text": p})
              for p in pieces), event("contentBlockStop", contentBlockIndex=index)]


def tool(index: int, call_id: str, name: str, *pieces: str) -> list[bytes]:
    return [event("contentBlockStart", contentBlockIndex=index,
                  start={"toolUse": {"toolUseId": call_id, "name": name}}),
            *(event("contentBlockDelta", contentBlockIndex=index,
                    delta={"toolUse": {"input": p}}) for p in pieces),
            event("contentBlockStop", contentBlockIndex=index)]


def stop(reason: str, inp: int = 40, out: int = 9, **more: Any) -> list[bytes]:
    usage = {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out, **more}
    return [event("messageStop", stopReason=reason),
            event("metadata", usage=usage, metrics={"latencyMs": 120})]


def ok(*chunks: bytes | list[bytes], hang: bool = False) -> dict[str, Any]:
    flat: list[bytes] = []
    for item in chunks:
        flat += item if isinstance(item, list) else [item]
    return {"status": 200, "content_type": EVENT_STREAM, "chunks": flat, "hang": hang}


def error(status: int, kind: str, message: str) -> dict[str, Any]:
    return {"status": status, "body": json.dumps({"message": message}).encode(),
            "headers": {"x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/"}}


def _assistant(*blocks: Any, model: str = SONNET, reason: str = "toolUse") -> AssistantMessage:
    return AssistantMessage(content=list(blocks), api="bedrock-converse-stream",
                            provider="amazon-bedrock", model=model, usage=Usage(),
                            stop_reason=reason, timestamp=T)  # type: ignore[arg-type]


STRICT = ToolDeclaration("lookup", "Look a word up.", {
    "type": "object", "properties": {"word": {"type": "string"}, "lang": {"type": "string"}},
    "required": ["word"]}, constrained_sampling={"type": "json_schema", "strict": "prefer"})


def conversations() -> list[dict[str, Any]]:
    user = UserMessage(content="What is the weather in Paris?", timestamp=T)
    strict_system = SystemMessage(content="Use tools.", tools_added=[WEATHER, STRICT],
                                  timestamp=T)
    system = SystemMessage(content="You are terse.", tools_added=[WEATHER, SHOT], timestamp=T)
    calls = _assistant(ToolCall(id="tu_a", name="weather", arguments={"city": "Paris"}),
                       ToolCall(id="tu_b", name="screenshot", arguments={"url": "https://x"}))
    results = [
        ToolResultMessage(tool_call_id="tu_a", tool_name="weather",
                          content=[TextContent("18 C"), ImageContent(PNG, "image/png")],
                          is_error=False, timestamp=T),
        ToolResultMessage(tool_call_id="tu_b", tool_name="screenshot",
                          content=[TextContent("failed"), ImageContent(PNG, "image/png")],
                          is_error=True, timestamp=T)]
    thought = _assistant(ThinkingContent("Let me see.", thinking_signature="sig-1"),
                         ThinkingContent("Unsigned."), TextContent("Sunny."), reason="stop")
    redacted = base64.b64encode(b"\x01\x02opaque").decode()
    return [
        {"name": "text", "messages": [system, user],
         "script": [ok(start(), text(0, "It is ", "sunny."), stop("end_turn"))]},
        {"name": "text-nova-no-cache", "model": NOVA, "messages": [system, user],
         "options": {"temperature": 0.2, "maxTokens": 500},
         "script": [ok(start(), text(0, "Sunny."), stop("end_turn"))]},
        {"name": "parallel-tool-calls", "messages": [system, user],
         "script": [ok(start(), text(0, "Checking."),
                       tool(1, "tu_a", "weather", '{"ci', 'ty": "Paris"}'),
                       tool(2, "tu_b", "screenshot", '{"url": "https://x"}'),
                       stop("tool_use"))]},
        {"name": "tool-results-with-images", "messages": [system, user, calls, *results],
         "script": [ok(start(), text(0, "Done."), stop("end_turn"))]},
        {"name": "tool-results-with-images-nova", "model": NOVA,
         "messages": [system, user, _assistant(*calls.content, model=NOVA), *results],
         "script": [ok(start(), text(0, "Done."), stop("end_turn"))]},
        {"name": "thinking", "options": {"reasoning": "medium"}, "messages": [user],
         "script": [ok(start(),
                       event("contentBlockDelta", contentBlockIndex=0,
                             delta={"reasoningContent": {"text": "Weighing."}}),
                       event("contentBlockDelta", contentBlockIndex=0,
                             delta={"reasoningContent": {"signature": "c2ln"}}),
                       event("contentBlockStop", contentBlockIndex=0),
                       text(1, "Sunny."), stop("end_turn", cacheReadInputTokens=10,
                                               cacheWriteInputTokens=5))]},
        {"name": "thinking-replayed", "options": {"reasoning": "low"},
         "messages": [user, thought, UserMessage(content="Tomorrow?", timestamp=T)],
         "script": [ok(start(), text(0, "Rain."), stop("end_turn"))]},
        {"name": "thinking-adaptive", "model": OPUS, "options": {"reasoning": "xhigh"},
         "messages": [user], "script": [ok(start(), text(0, "Sunny."), stop("end_turn"))]},
        {"name": "thinking-gpt-oss", "model": OSS, "options": {"reasoning": "minimal"},
         "messages": [system, user],
         "script": [ok(start(), event("contentBlockDelta", contentBlockIndex=0,
                                      delta={"reasoningContent": {"text": "Hm."}}),
                       event("contentBlockStop", contentBlockIndex=0),
                       text(1, "Sunny."), stop("end_turn"))]},
        {"name": "redacted-reasoning", "model": OSS, "options": {"reasoning": "high"},
         "messages": [user],
         "script": [ok(start(), event("contentBlockDelta", contentBlockIndex=0, delta={
             "reasoningContent": {"redactedContent": redacted}}),
             event("contentBlockStop", contentBlockIndex=0), text(1, "Ok."),
             stop("end_turn"))]},
        {"name": "cache-long", "options": {"cacheRetention": "long"}, "messages": [system, user],
         "script": [ok(start(), text(0, "Sunny."), stop(
             "end_turn", 100, 9, cacheReadInputTokens=1000, cacheWriteInputTokens=300,
             cacheDetails=[{"ttl": "1h", "inputTokens": 200},
                           {"ttl": "5m", "inputTokens": 100}]))]},
        {"name": "abort-mid-stream", "messages": [user], "abortOn": "text_delta",
         "script": [ok(start(), event("contentBlockDelta", contentBlockIndex=0,
                                      delta={"text": "It is "}), hang=True)]},
        {"name": "bearer-api-key", "messages": [user],
         "options": {"apiKey": "bedrock-api-key-side-by-side"},
         "script": [ok(start(), text(0, "Sunny."), stop("end_turn"))]},
        {"name": "http-error-429-then-ok", "messages": [user], "options": {"maxRetries": 2},
         "script": [error(429, "ThrottlingException", "Too many requests."),
                    ok(start(), text(0, "Sunny."), stop("end_turn"))]},
        {"name": "strict-tool", "messages": [strict_system, user],
         "script": [ok(start(), tool(0, "tu_s", "lookup", '{"word": "rain", "lang": null}'),
                       stop("tool_use"))]},
        {"name": "strict-tools-over-limits", "messages": [strict_system, user],
         "script": [error(400, "ValidationException",
                          "Too many strict tools (25). The maximum is 20."),
                    ok(start(), text(0, "Sunny."), stop("end_turn"))]},
        {"name": "http-error-400", "messages": [user],
         "script": [error(400, "ValidationException", "The model id is invalid.")]},
        {"name": "stream-exception", "messages": [user],
         "script": [ok(start(), event("contentBlockDelta", contentBlockIndex=0,
                                      delta={"text": "It is "}),
                       exception("modelStreamErrorException", "The model failed."))]},
        {"name": "max-tokens", "messages": [user], "options": {"maxTokens": 5},
         "script": [ok(start(), text(0, "It is"), stop("max_tokens"))]},
        {"name": "guardrail-stop", "messages": [user],
         "script": [ok(start(), text(0, "No."), stop("guardrail_intervened"))]},
    ]
