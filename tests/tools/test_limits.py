"""Values past Python's limits (the 4,300-digit int limit, the recursion limit) end as the
usual validation error or error event, never as a bare ValueError or RecursionError."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from piagent import tool
from piagent.errors import ToolArgumentError
from piagent.messages import UserMessage
from piagent.models import Model
from piagent.proxy import ProxyStreamOptions, stream_proxy
from piagent.stream import Context, parse_streaming_json
from piagent.tools import validate_tool_arguments


@tool
def count(n: int, x: float, s: str) -> str:
    """Count.

    Args:
        n: a whole number
        x: a number
        s: some text
    """
    return s


def _nested(depth: int) -> list[Any]:
    root: list[Any] = []
    current = root
    for _ in range(depth):
        inner: list[Any] = []
        current.append(inner)
        current = inner
    return root


def test_numeric_string_past_the_int_digit_limit_is_a_validation_error() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        validate_tool_arguments(count, {"n": "9" * 5000, "x": 1.0, "s": "a"})
    assert 'Validation failed for tool "count"' in str(caught.value)
    assert "n: expected integer, got string" in str(caught.value)
    with pytest.raises(ToolArgumentError, match="x: expected number, got string"):
        validate_tool_arguments(count, {"n": 1, "x": "7" * 5000, "s": "a"})


def test_deeply_nested_arguments_are_a_validation_error() -> None:
    with pytest.raises(ToolArgumentError, match=r"root: must not be nested more than \d+ levels deep"):
        validate_tool_arguments(count, {"n": 1, "x": 1.0, "s": _nested(100_000)})


def test_deep_arguments_are_described_quickly_under_a_raised_recursion_limit() -> None:
    # mypy (run in-process by tests/test_typing.py) raises the limit to 2**14 and leaves it:
    # indenting 100,000 levels with the pure-Python encoder then took minutes
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(2**14)
    try:
        with pytest.raises(ToolArgumentError) as caught:
            validate_tool_arguments(count, {"s": _nested(100_000)})
    finally:
        sys.setrecursionlimit(old)
    assert "levels deep" in str(caught.value)
    assert str(caught.value).endswith("Received arguments:\n<dict nested too deeply to show>")


def test_partial_json_reads_a_huge_integer_as_javascript_does() -> None:
    parsed = parse_streaming_json('{"a":1,"n":' + "7" * 5000 + "}")
    assert parsed["a"] == 1 and parsed["n"] == float("inf")


def test_stream_proxy_ends_a_too_deep_context_with_an_error_event() -> None:
    model = Model(id="m", api="openai-completions", provider="openai", base_url="")
    context = Context(messages=[UserMessage(content=[])])
    context.messages[0].content = _nested(100_000)  # type: ignore[assignment]
    options = ProxyStreamOptions(proxy_url="http://127.0.0.1:9", auth_token="t")
    message = stream_proxy(model, context, options).result()
    assert message.stop_reason == "error"
    assert "the context is nested too deeply" in (message.error_message or "")
