"""An MCP server written with the official ``mcp`` SDK (2.3.0), for piagent.mcp's tests.

It speaks both protocol generations (the stateless 2026-07-28 one and the ``initialize``
handshake). ``python sdk_server.py`` serves stdio; ``python sdk_server.py http PORT`` serves
streamable HTTP on 127.0.0.1:PORT/mcp. The events the tests check from outside are
printed on stderr as ``MARK <name>`` lines (``process``, ``started``, ``cancelled``).
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, ToolAnnotations

app = MCPServer("piagent-fixture", version="1.0")
TINY_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAA"
            "AABJRU5ErkJggg==")


def mark(name: str) -> None:
    print(f"MARK {name} {os.getpid()}", file=sys.stderr, flush=True)


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@app.tool()
async def wait_for_cancel(ctx: Context, seconds: float = 30.0) -> str:
    """Wait, reporting progress, until cancelled or `seconds` pass."""
    mark("started")
    try:
        for step in range(int(seconds * 10)):
            await ctx.report_progress(step, seconds * 10)
            await anyio.sleep(0.1)
    except anyio.get_cancelled_exc_class():
        mark("cancelled")
        raise
    return "waited"


@app.tool()
def picture() -> list[object]:
    """A one-pixel image and a caption."""
    return [ImageContent(type="image", data=TINY_PNG, mime_type="image/png"), "one pixel"]


@app.tool()
def fail(reason: str) -> str:
    """Fail with the reason."""
    raise ValueError(reason)


@app.tool()
def crash() -> str:
    """End the server process at once."""
    mark("crashed")
    os._exit(3)


@app.tool()
async def grow(ctx: Context, name: str) -> str:
    """Add a tool called `name` and tell the client the list changed."""
    app.add_tool(lambda: f"I am {name}", name=name, description=f"The tool {name}.")
    await ctx.request_context.session.send_tool_list_changed()
    await ctx.notify_tools_changed()
    return f"added {name}"


if __name__ == "__main__":
    mark("process")
    if sys.argv[1:2] == ["http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
