"""Helpers for building tools, shared by every folder whose tests need one.

* ``PATH_SCHEMA``: ``{"path": string}``, required; ``NO_PARAMS``: an object with no properties.
* ``ok(text)``: an ``AgentToolResult`` holding one text block.
* ``make_tool(name="read", execute=None, *, description=None, parameters=None, **kwargs)``:
  an ``AgentTool`` described as "The <name> tool", taking ``PATH_SCHEMA`` unless told, whose
  default ``execute`` answers ``"<name> <params>"``; ``kwargs`` go to ``AgentTool``
  (``prepare_arguments``, ``execution_mode``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from piagent import AbortSignal, AgentTool, AgentToolResult, TextContent

PATH_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}},
                               "required": ["path"]}
NO_PARAMS: dict[str, Any] = {"type": "object", "properties": {}}

Execute = Callable[[str, Any, AbortSignal, Callable[[Any], None]], AgentToolResult]


def ok(text: str = "ok") -> AgentToolResult:
    return AgentToolResult(content=[TextContent(text)])


def make_tool(name: str = "read", execute: Callable[..., Any] | None = None, *,
              description: str | None = None, parameters: dict[str, Any] | None = None,
              **kwargs: Any) -> AgentTool:
    def default(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        return ok(f"{name} {params}")

    return AgentTool(name, description or f"The {name} tool",
                     PATH_SCHEMA if parameters is None else parameters, execute or default,
                     **kwargs)
