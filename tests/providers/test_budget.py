"""The output limit every request carries (pi-ai 1.4.0's ``clampMaxTokensToContext``), and
what a model outside the catalogue is sent."""

from __future__ import annotations

import dataclasses
import math

import pytest

from piagent.messages import (
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ToolDeclaration,
    Usage,
    UserMessage,
)
from piagent.models import Model
from piagent.providers import get_model
from piagent.providers._budget import clamp_max_tokens, estimate_context_tokens
from piagent.providers.openai_completions import build_completions_request
from piagent.stream import StreamOptions

TOOL = ToolDeclaration("t", "d", {"type": "object"})


def _local() -> Model:
    """A model the catalogue does not list (its one warning says what was assumed)."""
    with pytest.warns(UserWarning, match="is not in the catalogue"):
        return get_model("local", "my-model", base_url="http://127.0.0.1:8000/v1")


def _reply(total: int, stop_reason: str = "stop", timestamp: int = 10) -> AssistantMessage:
    return AssistantMessage(content=[TextContent("ok")], api="x", provider="x", model="m",
                            usage=Usage(input=total, total_tokens=total),
                            stop_reason=stop_reason, timestamp=timestamp)


def test_estimate_counts_characters_as_javascript_does() -> None:
    # 7 UTF-16 units ("ab" + two non-BMP emoji + "c") = 2 tokens; an image 4800 chars
    assert estimate_context_tokens([UserMessage(content="ab🙂🙂c")]) == 2
    image = UserMessage(content=[TextContent("x"), ImageContent("AA", "image/png")])
    assert estimate_context_tokens([image]) == math.ceil(4801 / 3.5)
    # a system message: its text, then its tools as compact JSON
    system = SystemMessage(content="abcdefg", tools_added=[TOOL])
    tools_json = '[{"name":"t","description":"d","parameters":{"type":"object"}}]'
    assert estimate_context_tokens([system]) == 2 + math.ceil(len(tools_json) / 3.5)


def test_estimate_starts_from_the_last_usage_that_counts() -> None:
    user = UserMessage(content="1234567", timestamp=20)
    assert estimate_context_tokens([_reply(1000), user]) == 1002
    # an aborted or errored reply's usage does not describe the context
    assert estimate_context_tokens([_reply(1000, "aborted"), user]) == 2 + 1
    # a message inserted before the reply (a compaction summary) makes its usage stale
    later = UserMessage(content="x", timestamp=50)
    assert estimate_context_tokens([later, _reply(1000, timestamp=10)]) == 1 + 1


def test_clamp() -> None:
    model = _local()
    small = [UserMessage(content="hi")]
    assert clamp_max_tokens(model, small, 16_384) == 16_384
    big = [_reply(120_000), UserMessage(content="hi", timestamp=20)]
    assert clamp_max_tokens(model, big, 16_384) == 128_000 - 120_001 - 4096
    full = [_reply(127_000), UserMessage(content="hi", timestamp=20)]
    assert clamp_max_tokens(model, full, 16_384) == 1
    unknown = dataclasses.replace(model, context_window=0)
    assert clamp_max_tokens(unknown, full, 0) == 1


def test_clamp_keeps_pi_ai_1_6_s_margin() -> None:
    """15 % of the input (at least 4096) while that leaves 32768 tokens of output; else only
    4096, with the output at most 32768 (pi-ai 1.6; 1.4.0 kept 4096 only)."""
    wide = dataclasses.replace(
        _local(),
        context_window=1_000_000)
    history = [_reply(400_000), UserMessage(content="hi", timestamp=20)]  # 400 001 tokens
    assert clamp_max_tokens(wide, history, 900_000) == 1_000_000 - 400_001 - 60_001
    full = [_reply(900_000), UserMessage(content="hi", timestamp=20)]
    assert clamp_max_tokens(wide, full, 900_000) == 32_768  # 15 %: 0 left; 4096 alone: 95 903
    nearly = [_reply(990_000), UserMessage(content="hi", timestamp=20)]
    assert clamp_max_tokens(wide, nearly, 900_000) == 1_000_000 - 990_001 - 4096


def test_a_model_outside_the_catalogue_gets_the_guessed_limits() -> None:
    """get_model of an id the catalogue does not list: the guessed 128 000-token window and
    16 384 output tokens, so max_completion_tokens is 16 384 until the context nears the
    window; max_tokens= or the model's real limits change it (docs/providers.md)."""
    model = _local()
    assert (model.context_window, model.max_tokens) == (128_000, 16_384)
    messages = [UserMessage(content="hi")]
    body = build_completions_request(model, messages, StreamOptions())
    assert body["max_completion_tokens"] == 16_384
    assert build_completions_request(model, messages, StreamOptions(max_tokens=512))[
        "max_completion_tokens"] == 512
    real = dataclasses.replace(model, context_window=8192, max_tokens=4096)
    long = [UserMessage(content="x" * 14_000)]  # 4000 tokens: 8192 - 4000 - 4096 = 96
    assert build_completions_request(real, long, StreamOptions())["max_completion_tokens"] == 96
