"""JSON-schema constrained sampling of tools (pi-ai's ``constrainedSampling``): the strict
schema, "prefer" and "require", Gemini's validated mode and Claude's strict-tool limits
(pi-ai 1.6: the "prefer" tools sent again plain, and so for the rest of the session)."""

from __future__ import annotations

import json

import pytest

from piagent.errors import ProviderError
from piagent.messages import SystemMessage, ToolDeclaration, UserMessage
from piagent.models import Model
from piagent.providers.anthropic import stream_anthropic
from piagent.providers.google import build_google_request
from piagent.providers.openai_completions import build_completions_request
from piagent.providers.openai_responses import build_responses_request
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, sse

PREFER = {"type": "json_schema", "strict": "prefer"}
REQUIRE = {"type": "json_schema", "strict": "require"}
LOOKUP = {"type": "object", "properties": {"n": {"type": "integer"},
                                           "tag": {"type": ["string", "null"]}},
          "required": ["n"]}
STRICT_LOOKUP = {"type": "object", "properties": {"n": {"type": "integer"},
                                                  "tag": {"type": ["string", "null"]}},
                 "required": ["n", "tag"], "additionalProperties": False}


def _tool(config=PREFER, parameters=None, name="lookup") -> ToolDeclaration:
    return ToolDeclaration(name, "Looks up", parameters or LOOKUP, constrained_sampling=config)


def _messages(*tools: ToolDeclaration) -> list:
    return [SystemMessage(content="Be brief.", tools_added=list(tools), timestamp=0),
            UserMessage(content="Go")]


def _model(api: str, model_id: str = "m", compat=None, base_url="http://127.0.0.1:9") -> Model:
    return Model(id=model_id, api=api, provider="openai", base_url=base_url, compat=compat)


def test_the_strict_schema_as_pi_ai():
    """Every property required, an optional one nullable (unless it already allows null),
    ``additionalProperties: false``, nested objects and array items too."""
    schema = {"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "integer"},
        "o": {"type": "object", "properties": {"x": {"type": "number"}}},
        "l": {"type": "array", "items": {"type": "object", "properties": {"y": {"type": "string"}},
                                         "required": ["y"]}}},
        "required": ["a"]}
    body = build_completions_request(_model("openai-completions"),
                                     _messages(_tool(parameters=schema)), StreamOptions())
    function = body["tools"][0]["function"]
    assert function["strict"] is True
    assert function["parameters"] == {"type": "object", "properties": {
        "a": {"type": "string"},
        "b": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "o": {"anyOf": [{"type": "object", "properties": {"x": {"anyOf": [
            {"type": "number"}, {"type": "null"}]}}, "required": ["x"],
            "additionalProperties": False}, {"type": "null"}]},
        "l": {"anyOf": [{"type": "array", "items": {
            "type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"],
            "additionalProperties": False}}, {"type": "null"}]}},
        "required": ["a", "b", "o", "l"], "additionalProperties": False}
    assert schema["required"] == ["a"]  # the declaration's schema is left as it was


def test_prefer_falls_back_and_require_fails():
    with_ref = {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}},
                "$defs": {"P": {"type": "object"}}}
    completions = _model("openai-completions")
    plain = build_completions_request(completions, _messages(_tool(parameters=with_ref)),
                                      StreamOptions())["tools"][0]["function"]
    assert (plain["strict"], plain["parameters"]) == (False, with_ref)
    with pytest.raises(ProviderError, match=r'Tool "lookup" requires JSON-schema constrained '
                                            r"sampling, but \$defs schemas are unsupported\."):
        build_completions_request(completions, _messages(_tool(REQUIRE, with_ref)),
                                  StreamOptions())
    # Responses without the compat's supportsStrictMode: no strict at all
    responses = _model("openai-responses")
    tool = build_responses_request(responses, _messages(_tool()), StreamOptions())["tools"][0]
    assert "strict" not in tool and tool["parameters"] == LOOKUP
    with pytest.raises(ProviderError, match="but strict tools are unsupported"):
        build_responses_request(responses, _messages(_tool(REQUIRE)), StreamOptions())
    on = _model("openai-responses", compat={"supportsStrictMode": True})
    tool = build_responses_request(on, _messages(_tool()), StreamOptions())["tools"][0]
    assert (tool["strict"], tool["parameters"]) == (True, STRICT_LOOKUP)


def test_gemini_validated_mode_from_gemini_3_or_the_compat():
    def body(model_id, compat=None, tool=None):
        model = Model(id=model_id, api="google-generative-ai", provider="google",
                      base_url="http://127.0.0.1:9/v1beta", compat=compat)
        return build_google_request(model, _messages(tool or _tool()), StreamOptions())

    three = body("gemini-3-flash-preview")
    assert three["toolConfig"] == {"functionCallingConfig": {"mode": "VALIDATED"}}
    assert three["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == STRICT_LOOKUP
    # a host's prefix does not hide the version (pi-ai 1.6: unanchored)
    assert "toolConfig" in body("models-prefix-gemini-4-argon")
    older = body("gemini-2.5-flash")
    assert "toolConfig" not in older
    assert older["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == LOOKUP
    # compat.supportsStrictMode overrides the version (pi-ai 1.6)
    assert "toolConfig" in body("my-gemini", {"supportsStrictMode": True})
    assert "toolConfig" not in body("gemini-3-flash-preview", {"supportsStrictMode": False})
    assert "toolConfig" not in body("gemini-3-flash-preview",
                                    tool=ToolDeclaration("t", "d", LOOKUP))


def _anthropic(server) -> Model:
    return Model(id="claude-sonnet-4-5", api="anthropic-messages", provider="anthropic",
                 base_url=server.url, compat={"supportsStrictTools": True})


def _ok() -> list[bytes]:
    def ev(name, data):
        return sse({"type": name, **data}, event=name)
    return [ev("message_start", {"message": {"id": "msg_1", "model": "claude-sonnet-4-5",
                                             "usage": {"input_tokens": 5, "output_tokens": 1}}}),
            ev("content_block_start", {"index": 0, "content_block": {"type": "text",
                                                                     "text": ""}}),
            ev("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                             "text": "ok"}}),
            ev("content_block_stop", {"index": 0}),
            ev("message_delta", {"delta": {"stop_reason": "end_turn"},
                                 "usage": {"output_tokens": 2}}),
            ev("message_stop", {})]


LIMIT = json.dumps({"type": "error", "error": {
    "type": "invalid_request_error", "message": "Too many strict tools (21). Max is 20."}})


def _strict_flags(request) -> list[bool]:
    return [bool(t.get("strict")) for t in request.json["tools"]]


def test_claude_strict_tool_limits_send_prefer_tools_plain_for_the_session(sse_server):
    tools = (_tool(), _tool(REQUIRE, name="exact"))
    context = Context(_messages(*tools))
    sse_server.add(Reply(status=400, content_type="application/json", body=[LIMIT.encode()]))
    sse_server.add(Reply(body=_ok()))
    options = StreamOptions(api_key="k", session_id="strict-session-1", max_retries=0)
    message = stream_anthropic(_anthropic(sse_server), context, options).result(WAIT)
    assert message.stop_reason == "stop" and message.text == "ok"
    first, second = sse_server.requests
    assert _strict_flags(first) == [True, True]
    assert _strict_flags(second) == [False, True]  # "require" stays strict
    assert second.json["tools"][0]["input_schema"] == {**LOOKUP}
    (diagnostic,) = message.diagnostics or []
    assert diagnostic["type"] == "anthropic_strict_tools_fallback"
    assert diagnostic["details"] == {"reason": "strict_tool_limits_exceeded"}
    assert "Too many strict tools (21)" in diagnostic["error"]["message"]
    # the session's next request goes plain at once; another session tries strict again
    sse_server.add(Reply(body=_ok()))
    stream_anthropic(_anthropic(sse_server), context, options).result(WAIT)
    assert _strict_flags(sse_server.requests[-1]) == [False, True]
    sse_server.add(Reply(body=_ok()))
    other = StreamOptions(api_key="k", session_id="strict-session-2", max_retries=0)
    stream_anthropic(_anthropic(sse_server), context, other).result(WAIT)
    assert _strict_flags(sse_server.requests[-1]) == [True, True]


def test_claude_limit_without_prefer_tools_fails_as_it_came(sse_server):
    sse_server.add(Reply(status=400, content_type="application/json", body=[LIMIT.encode()]))
    context = Context(_messages(_tool(REQUIRE)))
    message = stream_anthropic(_anthropic(sse_server), context,
                               StreamOptions(api_key="k", max_retries=0)).result(WAIT)
    assert message.stop_reason == "error" and "Too many strict tools" in message.error_message
    assert len(sse_server.requests) == 1
