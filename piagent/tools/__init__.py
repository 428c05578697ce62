"""Tools: ``AgentTool``, ``AgentToolResult``, the ``@tool`` decorator, argument validation.

``@tool`` turns a plain function into an ``AgentTool``: the JSON Schema comes from its type
hints, the descriptions from its docstring. ``validate_tool_arguments`` coerces and checks a
model's arguments against a compiled schema. Running tools is the loop's job, not this
package's.
"""

from __future__ import annotations

from ._decorator import tool
from ._output import OutputSchema
from ._tool import (
    AgentTool,
    AgentToolResult,
    ReplayPolicy,
    ToolExecuteFn,
    ToolExecutionMode,
    ToolUpdateFn,
    validate_tool_arguments,
)

__all__ = [
    "AgentTool",
    "AgentToolResult",
    "OutputSchema",
    "ReplayPolicy",
    "ToolExecuteFn",
    "ToolExecutionMode",
    "ToolUpdateFn",
    "tool",
    "validate_tool_arguments",
]
