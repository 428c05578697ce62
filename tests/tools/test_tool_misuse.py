"""@tool refuses what it cannot declare honestly, and stays callable for unit tests."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from piagent import AbortController, AgentTool, AgentToolResult, TextContent, tool


def _run(t: AgentTool, params: dict[str, Any]) -> AgentToolResult:
    return t.execute("call-1", params, AbortController().signal, lambda partial: None)


def test_tool_on_a_method_is_refused_and_bound_method_works() -> None:
    with pytest.raises(TypeError) as info:
        class Files:
            @tool
            def read(self, path: str) -> str:
                """Read a file."""
                return path
    assert "would declare 'self' to the model" in str(info.value)
    assert "tool(instance.read)" in str(info.value)

    class Store:
        def get(self, key: str) -> str:
            """Get a value."""
            return key.upper()

    t = tool(Store().get)
    assert list(t.parameters["properties"]) == ["key"]
    assert t("a") == "A"


def test_lambda_needs_a_name() -> None:
    with pytest.raises(TypeError, match=r"pass a name: tool\(fn, name='my_tool'"):
        tool(lambda x: x)
    with pytest.warns(UserWarning, match="parameter 'x' has no type hint"):
        named = tool(lambda x: x, name="echo", description="Echo.")
    assert named.name == "echo"


def test_args_entry_for_a_missing_parameter_is_refused() -> None:
    def find(pattern: str) -> str:
        """Find files.

        Args:
            patern: the glob.
        """
        return pattern

    with pytest.raises(TypeError) as info:
        tool(find)
    assert str(info.value) == ("Tool 'find': the docstring documents 'patern', which the "
                               "function does not take; its parameters are 'pattern'.")


def test_tool_stays_callable() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    assert add(1, 2) == 3
    assert add.name == "add"
    assert _run(add, {"a": 1, "b": 2}).content == [TextContent("3")]


def test_hand_built_tool_says_to_call_execute() -> None:
    t = AgentTool(name="x", description="", parameters={"type": "object"},
                  execute=lambda i, p, s, u: AgentToolResult(content=[]))
    with pytest.raises(TypeError, match=r"not built by @tool.*tool.execute\("):
        t()


def test_generator_result_is_refused() -> None:
    @tool
    def numbers() -> Iterator[int]:
        """Count."""
        yield 1

    with pytest.raises(TypeError, match=r"returned a generator.*return a list \(list\(\.\.\.\)\)"):
        _run(numbers, {})


def test_bytes_result_is_refused() -> None:
    @tool
    def raw() -> bytes:
        """Raw bytes."""
        return b"\x00abc"

    with pytest.raises(TypeError, match=r"returned bytes, which is not text.*decode\(\)"):
        _run(raw, {})


def test_nan_result_is_refused() -> None:
    @tool
    def ratio() -> float:
        """A ratio."""
        return math.nan

    with pytest.raises(ValueError, match=r"returned nan, which JSON cannot carry"):
        _run(ratio, {})

    @tool
    def stats() -> dict[str, float]:
        """Stats."""
        return {"mean": math.inf}

    with pytest.raises(ValueError, match=r"returned \{'mean': inf\}"):
        _run(stats, {})
