"""Responses replay ids as pi-ai 1.6.1 gives them: ``shortHash`` (its values computed by
pi-ai's own function), the ``msg_pi_{n}[_{j}]`` fallback, another provider's call item ids
(``fc_<hash>``, or none for a provider without OpenAI's ``call|item`` ids), and another
model's thinking dropped. The request differential (``replay-*`` conversations) compares the
same with pi-ai; these pin the edges it does not run."""

from __future__ import annotations

import pytest

from piagent.messages import (
    AssistantMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import Model
from piagent.providers._hash import short_hash
from piagent.providers._responses_ids import call_id_normalizer
from piagent.providers._transform import transform_messages
from piagent.providers.openai_responses import build_responses_request
from piagent.stream import StreamOptions


@pytest.mark.parametrize(("text", "expected"), [
    ("", "k4n83c7h0j2b"),
    ("a", "m8735310ae7sx"),
    ("msg_" + "x" * 70, "1f43gnm1wcb1pr"),
    ("fc_" + "z" * 80, "1jdtn1u1p8od6g"),
])
def test_short_hash_is_pi_s(text: str, expected: str) -> None:
    assert short_hash(text) == expected


def test_short_hash_counts_utf16_units() -> None:
    # a character outside the BMP is two code units in JavaScript; a lone half is one
    assert short_hash("\U0001f642") == short_hash("\ud83d\ude42")
    assert short_hash("\ud83d") != short_hash("")


def _model(provider: str = "openai") -> Model:
    return Model(id="gpt-4o-mini", api="openai-responses", provider=provider,
                 base_url="http://127.0.0.1:1/v1")


def _answer(content: list[object], **kw: str) -> AssistantMessage:
    return AssistantMessage(content=content, **{  # type: ignore[arg-type]
        "api": "openai-responses", "provider": "openai", "model": "gpt-4o-mini", **kw})


def _input(model: Model, *messages: object) -> list[dict[str, object]]:
    transformed = transform_messages(list(messages), model,  # type: ignore[arg-type]
                                     call_id_normalizer(model.provider),
                                     foreign_thinking_as_text=False)
    body = build_responses_request(model, transformed, StreamOptions())
    return body["input"]  # type: ignore[no-any-return]


def test_fallback_text_ids_count_text_blocks() -> None:
    items = _input(_model(), UserMessage("Hi"), _answer(
        [TextContent("a"), ThinkingContent("t"), TextContent("b"), TextContent("c")]))
    assert [i.get("id") for i in items if i.get("type") == "message"] == [
        "msg_pi_1", "msg_pi_1_1", "msg_pi_1_2"]


def test_text_signatures_as_pi_parses_them() -> None:
    legacy = "msg_" + "x" * 70
    items = _input(_model(), UserMessage("Hi"), _answer([
        TextContent("a", '{"v":1,"id":"msg_a","phase":"other"}'),
        TextContent("b", legacy), TextContent("c", '{"v":2,"id":"msg_c"}'),
        TextContent("d", '{"v":1,"id":""}'),
        TextContent("e", '{"v":1,"id":"msg_e","phase":["final_answer"]}'),
        TextContent("f", '{"v":true,"id":"msg_f"}'),
        TextContent("g", '{"v":1,"id":"msg_g","phase":"commentary"}')]))
    messages = [i for i in items if i.get("type") == "message"]
    assert [m["id"] for m in messages] == [
        "msg_a", "msg_" + short_hash(legacy), '{"v":2,"id":"msg_c"}',  # not v1: the whole string
        "msg_pi_1_3", "msg_e", '{"v":true,"id":"msg_f"}', "msg_g"]
    # pi keeps commentary/final_answer only
    assert [m.get("phase") for m in messages] == [None] * 6 + ["commentary"]


def test_call_item_ids() -> None:
    call = ToolCall("call_1|fc_" + "z" * 80, "f", {})
    result = ToolResultMessage("call_1|fc_" + "z" * 80, "f", [TextContent("ok")])

    def items_for(target: Model, **kw: str) -> list[dict[str, object]]:
        items = _input(target, UserMessage("Hi"), _answer([call], **kw), result)
        return [i for i in items if i.get("type") in ("function_call", "function_call_output")]

    other_api = {"provider": "openai-codex", "api": "openai-codex-responses"}
    foreign = items_for(_model(), **other_api)
    assert foreign[0]["id"] == "fc_" + short_hash("fc_" + "z" * 80)
    assert foreign[0]["call_id"] == foreign[1]["call_id"] == "call_1"
    assert "id" not in items_for(_model(), model="gpt-4.1")[0]  # another model, same API
    same = items_for(_model())
    assert same[0]["id"] == "fc_" + "z" * 80  # the model's own id, verbatim
    # a provider without OpenAI's call|item ids: the whole id cleaned, no item id
    local = items_for(_model("local"), **other_api)
    assert "id" not in local[0]
    assert local[0]["call_id"] == local[1]["call_id"] == ("call_1_fc_" + "z" * 80)[:64]


def test_own_call_item_id_not_fc_is_dropped() -> None:
    items = _input(_model(), UserMessage("Hi"), _answer([ToolCall("call_1|xy_1", "f", {})]))
    assert "id" not in next(i for i in items if i.get("type") == "function_call")


def test_other_models_thinking_is_dropped() -> None:
    items = _input(_model(), UserMessage("Hi"), _answer(
        [ThinkingContent("secret"), TextContent("Yes.")], provider="anthropic",
        api="anthropic-messages", model="claude"))
    assert [i["content"][0]["text"] for i in items  # type: ignore[index]
            if i.get("type") == "message"] == ["Yes."]
