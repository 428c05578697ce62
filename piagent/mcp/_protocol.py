"""What the two MCP protocol generations put on the wire, as plain dicts.

*Handshake* servers (protocol revisions up to 2025-11-25) open each connection with
``initialize`` and keep per-connection state (over HTTP, an ``Mcp-Session-Id``).
*Stateless* servers (2026-07-28) answer a ``server/discover`` probe and take every request
on its own: each request carries the protocol version and the client's capabilities in
``params._meta``, and over HTTP also in the ``MCP-Protocol-Version``, ``Mcp-Method`` and
``Mcp-Name`` headers.
"""

from __future__ import annotations

from typing import Any, Final

from .._version import __version__

STATELESS_VERSION: Final = "2026-07-28"
HANDSHAKE_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""The handshake revisions piagent speaks, newest first."""
PROTOCOLS: Final = ("auto", STATELESS_VERSION, *HANDSHAKE_VERSIONS)

META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"

CLIENT_INFO: Final = {"name": "piagent", "version": __version__}
CLIENT_CAPABILITIES: Final[dict[str, Any]] = {}
"""piagent answers no server-to-client requests (sampling, elicitation, roots)."""

NAME_PARAMS: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
"""The method whose params key is mirrored in the ``Mcp-Name`` header."""

METHOD_NOT_FOUND: Final = -32601
UNSUPPORTED_VERSION: Final = -32022


def request(id_: int, method: str, params: dict[str, Any] | None, version: str | None,
            ) -> dict[str, Any]:
    """A JSON-RPC request; ``version`` set adds the stateless ``_meta`` envelope."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if version == STATELESS_VERSION:
        params = dict(params or {})
        meta = dict(params.get("_meta") or {})
        meta[META_VERSION] = version
        meta[META_CAPABILITIES] = CLIENT_CAPABILITIES
        meta[META_CLIENT_INFO] = CLIENT_INFO
        params["_meta"] = meta
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def initialize_params(version: str) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": CLIENT_CAPABILITIES,
            "clientInfo": CLIENT_INFO}


def http_headers(message: dict[str, Any], version: str | None) -> dict[str, str]:
    """The per-request headers: the version, and for stateless servers method and name."""
    if version is None:
        return {}
    headers = {"MCP-Protocol-Version": version}
    if version == STATELESS_VERSION and "method" in message:
        method = message["method"]
        headers["Mcp-Method"] = method
        key = NAME_PARAMS.get(method)
        if key is not None:
            value = (message.get("params") or {}).get(key)
            if isinstance(value, str):
                headers["Mcp-Name"] = _header_value(value)
    return headers


def _header_value(value: str) -> str:
    """A header-safe form of a name: as it is if printable ASCII, else base64 (``=?base64?…?=``)."""
    if all(" " <= ch <= "~" for ch in value):
        return value
    import base64

    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def error_text(error: Any) -> str:
    """A JSON-RPC error object as one line."""
    if not isinstance(error, dict):
        return repr(error)
    code = error.get("code")
    message = error.get("message") or "no message"
    return f"{message} (code {code})" if code is not None else str(message)
