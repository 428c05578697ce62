"""MCP tools as ``AgentTool``s, and MCP call results as pi content."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..abort import AbortSignal
from ..messages import ImageContent, TextContent
from ..tools import AgentTool, AgentToolResult, ReplayPolicy, ToolUpdateFn

__all__ = ["CallFn", "McpToolExecute", "make_tool", "to_result"]

CallFn = Callable[[str, dict[str, Any], AbortSignal | None, ToolUpdateFn | None, float | None],
                  AgentToolResult]
"""``call(name, arguments, signal, on_update, timeout)``: one ``tools/call``."""


class McpToolExecute:
    """The ``execute`` of an MCP tool: calls ``name`` on its server (``owner``)."""

    __slots__ = ("owner", "name", "call", "timeout")

    def __init__(self, owner: object, name: str, call: CallFn, timeout: float | None) -> None:
        self.owner = owner
        self.name = name
        self.call = call
        self.timeout = timeout

    def __call__(self, tool_call_id: str, params: dict[str, Any], signal: AbortSignal,
                 on_update: ToolUpdateFn) -> AgentToolResult:
        return self.call(self.name, params, signal, on_update, self.timeout)


def make_tool(owner: object, spec: dict[str, Any], *, prefix: str, call: CallFn,
              timeout: float | None) -> AgentTool:
    """An ``AgentTool`` for the server tool ``spec`` (a ``tools/list`` entry)."""
    name = str(spec["name"])
    annotations = _dict(spec.get("annotations"))
    schema = spec.get("inputSchema")
    if not isinstance(schema, dict):
        schema = {"type": "object", "properties": {}}
    description = spec.get("description") or spec.get("title") or annotations.get("title") or ""
    replay: ReplayPolicy | None = None
    if annotations.get("readOnlyHint") is True or annotations.get("idempotentHint") is True:
        replay = "safe"
    output_schema = spec.get("outputSchema")
    return AgentTool(name=prefix + name, description=str(description), parameters=schema,
                     execute=McpToolExecute(owner, name, call, timeout),
                     label=spec.get("title") or annotations.get("title") or name,
                     output_schema=output_schema if isinstance(output_schema, dict) else None,
                     replay=replay)


def to_result(result: dict[str, Any]) -> AgentToolResult:
    """A ``CallToolResult`` as pi content: text and images; the rest as text."""
    content: list[TextContent | ImageContent] = []
    for item in result.get("content") or ():
        if isinstance(item, dict):
            content.append(_block(item))
    structured = result.get("structuredContent")
    if not content and structured is not None:
        content.append(TextContent(json.dumps(structured, ensure_ascii=False)))
    details = None if structured is None else {"structuredContent": structured}
    return AgentToolResult(content=content, details=details, structured_content=structured,
                           is_error=bool(result.get("isError")))


def _block(item: dict[str, Any]) -> TextContent | ImageContent:
    kind = item.get("type")
    if kind == "text":
        return TextContent(str(item.get("text", "")))
    if kind == "image" and isinstance(item.get("data"), str):
        return ImageContent(data=item["data"], mime_type=str(item.get("mimeType") or "image/png"))
    if kind == "resource":
        resource = _dict(item.get("resource"))
        if isinstance(resource.get("text"), str):
            return TextContent(resource["text"])
        return TextContent(f"[resource {resource.get('uri', '')} "
                           f"({resource.get('mimeType') or 'binary'})]")
    if kind == "resource_link":
        name = item.get("name") or item.get("uri")
        return TextContent(f"[resource link {name}: {item.get('uri', '')}]")
    if kind == "audio":
        return TextContent(f"[audio ({item.get('mimeType') or 'unknown type'}), "
                           f"not shown to the model]")
    return TextContent(json.dumps(item, ensure_ascii=False))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
