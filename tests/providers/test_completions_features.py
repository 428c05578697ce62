"""pi-ai 1.6.1's per-model Chat Completions features: Anthropic cache breakpoints
(``cacheControlFormat: "anthropic"``, OpenRouter's ``anthropic/`` models: the system prompt,
the last tool and the last message) and Kimi's tool additions
(``supportsMidConvoToolAdditions``)."""

from __future__ import annotations

from piagent.messages import (
    AssistantMessage,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import Model
from piagent.providers.openai_completions import build_completions_request
from piagent.stream import StreamOptions

TOOLS = [ToolDeclaration("a", "A", {"type": "object"}), ToolDeclaration("b", "B", {"type": "object"})]
EPHEMERAL = {"type": "ephemeral"}


def _model(model_id: str = "anthropic/claude-sonnet-4.5", **fields: object) -> Model:
    values: dict[str, object] = {"id": model_id, "api": "openai-completions",
                                 "provider": "openrouter",
                                 "base_url": "https://openrouter.ai/api/v1"}
    values.update(fields)
    return Model(**values)  # type: ignore[arg-type]


def _messages() -> list:
    call = AssistantMessage(content=[ToolCall("c1", "a", {})], api="openai-completions",
                            provider="openrouter", model="anthropic/claude-sonnet-4.5",
                            stop_reason="toolUse")
    return [SystemMessage(content="Be brief.", tools_added=TOOLS), UserMessage(content="go"),
            call, ToolResultMessage("c1", "a", [TextContent("done")])]


def test_breakpoints_on_system_last_tool_and_last_message():
    body = build_completions_request(_model(), _messages(), StreamOptions())
    messages = body["messages"]
    assert messages[0]["content"] == [{"type": "text", "text": "Be brief.",
                                       "cache_control": EPHEMERAL}]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][-1]["cache_control"] == EPHEMERAL
    assert messages[-1]["role"] == "tool"
    assert messages[-1]["content"] == [{"type": "text", "text": "done",
                                        "cache_control": EPHEMERAL}]
    assert messages[1]["content"] == "go"  # only the last message is marked


def test_long_retention_none_and_other_models():
    long = build_completions_request(_model(), _messages(), StreamOptions(cache_retention="long"))
    assert long["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    none = build_completions_request(_model(), _messages(), StreamOptions(cache_retention="none"))
    assert "cache_control" not in str(none)
    other = build_completions_request(_model("openai/gpt-5"), _messages(), StreamOptions())
    assert "cache_control" not in str(other)
    forced = build_completions_request(
        _model("z/model", provider="custom", base_url="https://example.com/v1",
               compat={"cacheControlFormat": "anthropic"}), _messages(), StreamOptions())
    assert forced["tools"][-1]["cache_control"] == EPHEMERAL


def test_request_after_request_marks_only_the_new_last_message():
    """The converted messages are shared between requests: marking copies them."""
    messages = _messages()
    first = build_completions_request(_model(), messages, StreamOptions())
    second = build_completions_request(_model(), [*messages, UserMessage(content="more")],
                                       StreamOptions())
    assert second["messages"][-2]["content"] == "done"
    assert second["messages"][-1]["content"][0]["cache_control"] == EPHEMERAL
    assert first["messages"][-1]["content"][0]["cache_control"] == EPHEMERAL


KIMI = {"supportsMidConvoSystemMessages": True, "supportsMidConvoToolAdditions": True}


def test_tool_additions_go_in_a_system_tools_message():
    """A later system message's added tools go in {"role": "system", "tools": [...]} before
    it; the request's tools stay those before the last change that is not an addition."""
    extra = ToolDeclaration("c", "C", {"type": "object"})
    messages = [*_messages(), SystemMessage(content="More.", tools_added=[extra]),
                UserMessage(content="again")]
    model = _model("kimi", provider="fireworks", base_url="https://api.fireworks.ai/v1",
                   compat=KIMI)
    body = build_completions_request(model, messages, StreamOptions())
    assert [t["function"]["name"] for t in body["tools"]] == ["a", "b"]
    assert body["messages"][-3] == {"role": "system", "tools": [
        {"type": "function", "function": {"name": "c", "description": "C",
                                          "parameters": {"type": "object"}}}]}
    assert body["messages"][-2] == {"role": "system", "content": "More."}
    # a removal is not an addition: everything up to it folds into the request's tools
    removal = [*messages, SystemMessage(content="", tools_removed=["a"])]
    body = build_completions_request(model, removal, StreamOptions())
    assert [t["function"]["name"] for t in body["tools"]] == ["b", "c"]
    assert not any("tools" in m for m in body["messages"])
