"""A streamable-HTTP MCP server whose tool holds until released, for piagent.mcp's abort tests.

``python hold_server.py {sdk|fastmcp} {json|sse} PORT`` serves 127.0.0.1:PORT/mcp with the
official ``mcp`` 2.3.0 SDK or with fastmcp 4.x, answering ``tools/call`` as one
``application/json`` body (sent only when the answer is ready: no response headers until
then) or as an SSE stream (headers at once). Both protocol generations are spoken.

The tool ``hold(tag)`` prints ``MARK started <tag> <request id>``, then waits, shielded
from cancellation, until ``POST /release?tag=<tag>`` (``POST /release`` releases every
hold, now and later); then it prints ``MARK answered <tag>`` and answers "released <tag>"
(an answer that comes late, after the client gave up). Every ``notifications/cancelled``
the server receives is printed as ``MARK cancel <requestId>``, before the SDK sees it.
"""

import json
import sys
from typing import Any

import anyio
import uvicorn

Scope = dict[str, Any]
_release: dict[str, anyio.Event] = {}  # tag -> its event (made on the server's event loop)
_released_all: list[bool] = []


def mark(text: str) -> None:
    print(f"MARK {text}", flush=True)


def release_event(tag: str) -> anyio.Event:
    if tag not in _release:
        _release[tag] = anyio.Event()
        if _released_all:
            _release[tag].set()
    return _release[tag]


def release(query: str) -> None:
    tag = query.removeprefix("tag=")
    if query:
        release_event(tag).set()
        return
    _released_all.append(True)
    for event in _release.values():
        event.set()


async def hold(tag: str, request_id: Any) -> str:
    mark(f"started {tag} {request_id}")
    with anyio.CancelScope(shield=True):  # a server that goes on working and answers late
        await release_event(tag).wait()
    mark(f"answered {tag}")
    return f"released {tag}"


def recording(app: Any) -> Any:
    """The server's ASGI app, which also marks each ``notifications/cancelled`` it receives
    and answers ``POST /release``."""

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        if scope["path"] == "/release":
            release(scope["query_string"].decode())
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"released"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("method") == "notifications/cancelled":
            mark(f"cancel {(parsed.get('params') or {}).get('requestId')}")
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # type: ignore[no-any-return]

        await app(scope, replay, send)

    return wrapped


def sdk_app(json_response: bool) -> Any:
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("piagent-hold-sdk", version="1.0")

    @server.tool(name="hold")
    async def hold_tool(tag: str, ctx: Context) -> str:
        """Hold until released."""
        return await hold(tag, ctx.request_id)

    return server.streamable_http_app(json_response=json_response)


def fastmcp_app(json_response: bool) -> Any:
    from fastmcp import Context, FastMCP

    server = FastMCP("piagent-hold-fastmcp")

    @server.tool(name="hold")
    async def hold_tool(tag: str, ctx: Context) -> str:
        """Hold until released."""
        return await hold(tag, ctx.request_id)

    return server.http_app(json_response=json_response)


if __name__ == "__main__":
    kind, mode, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    app = (sdk_app if kind == "sdk" else fastmcp_app)(mode == "json")
    uvicorn.run(recording(app), host="127.0.0.1", port=port, log_level="info")
