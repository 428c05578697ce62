"""The smallest stdio MCP server (stdlib only, handshake protocol), for open/close cycles
and for servers that misbehave: ``tiny_server.py hang`` never exits on SIGTERM or on the
end of its input, and stops answering after ``initialize``."""

import json
import signal
import sys

HANG = sys.argv[1:] == ["hang"]
if HANG:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def answer(message, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if "id" not in message:
        continue
    if method == "initialize":
        answer(message, {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                         "serverInfo": {"name": "tiny", "version": "1"}})
        if HANG:
            while True:  # hung: ignores SIGTERM and the end of its input
                signal.pause()
    elif method == "tools/list":
        answer(message, {"tools": [{"name": "ping", "description": "Answer pong.",
                                    "inputSchema": {"type": "object", "properties": {}}}]})
    elif method == "tools/call":
        answer(message, {"content": [{"type": "text", "text": "pong"}]})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": {
            "code": -32601, "message": f"Method not found: {method}"}}) + "\n")
        sys.stdout.flush()
