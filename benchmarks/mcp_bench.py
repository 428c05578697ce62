"""What ``piagent.mcp`` adds to one tool call over a hand-written JSON-RPC exchange.

Run: ``python -m benchmarks.mcp_bench [--calls N] [--rounds R]``. Both sides talk to the
same stdio server process kind (``tests/mcp/tiny_server.py``: stdlib, answers ``tools/call``
with "pong"), one after the other in rounds: the floor writes the request line and reads
the answer line on the calling thread; piagent's ``MCPServer.call_tool`` builds the request,
hands it to the reader thread's slot and maps the result to pi content. Reported: the
median over rounds of (piagent − floor) per call, in ms. Target: ≤ 0.2 ms per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from piagent.mcp import MCPServer

SERVER = [sys.executable, "-I", "-S",
          str(Path(__file__).resolve().parent.parent / "tests" / "mcp" / "tiny_server.py")]


def floor_calls(calls: int) -> float:
    """Seconds per call of the hand-written exchange (after its handshake)."""
    proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def call(id_: int, method: str, params: dict[str, object]) -> dict[str, object]:
        stdin.write(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                                "params": params}).encode() + b"\n")
        stdin.flush()
        answer: dict[str, object] = json.loads(stdout.readline())
        return answer

    call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "floor", "version": "1"}})
    started = time.perf_counter()
    for n in range(1, calls + 1):
        call(n, "tools/call", {"name": "ping", "arguments": {}})
    elapsed = time.perf_counter() - started
    stdin.close()
    proc.wait(5)
    stdout.close()
    return elapsed / calls


def piagent_calls(calls: int) -> float:
    with MCPServer.stdio(SERVER, protocol="2025-06-18") as server:
        server.call_tool("ping")
        started = time.perf_counter()
        for _ in range(calls):
            server.call_tool("ping")
        return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    floor, ours = [], []
    for _ in range(args.rounds):
        floor.append(floor_calls(args.calls))
        ours.append(piagent_calls(args.calls))
    added = statistics.median(o - f for o, f in zip(ours, floor, strict=True)) * 1000
    print(f"floor   {statistics.median(floor) * 1e3:.3f} ms/call")
    print(f"piagent {statistics.median(ours) * 1e3:.3f} ms/call")
    print(f"added   {added:.3f} ms/call (target <= 0.2), {args.rounds} rounds x "
          f"{args.calls} calls")


if __name__ == "__main__":
    main()
