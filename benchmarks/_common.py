"""Shared pieces: statistics, the benchmark tools, subprocess helpers, the server process."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

__all__ = [
    "PROMPT",
    "SYSTEM",
    "TOOL_SCHEMA",
    "ServerProcess",
    "floor_tools",
    "median",
    "peak_rss_mb",
    "piagent_tool",
    "quantile",
    "run_json_subprocess",
    "tool_specs",
]

SYSTEM = "You are a benchmark model. Call the tools you are told to, then answer."
PROMPT = "Run the benchmark job."
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"i": {"type": "integer", "description": "Which call of the batch."}},
    "required": ["i"],
}
TOOL_SLEEP_S = {"instant": 0.0, "sleep100": 0.1}
REPO = Path(__file__).resolve().parent.parent


def median(values: Sequence[float]) -> float:
    """The median (0.0 for no values)."""
    return float(statistics.median(values)) if values else 0.0


def quantile(values: Sequence[float], q: float) -> float:
    """A simple nearest-rank quantile (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))])


def peak_rss_mb() -> float:
    """This process's peak resident set size (``ru_maxrss``) in MB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def _tool_body(kind: str) -> float:
    if kind not in TOOL_SLEEP_S:
        msg = f"unknown tool kind {kind!r}"
        raise ValueError(msg)
    return TOOL_SLEEP_S[kind]


def floor_tools(kind: str) -> dict[str, Any]:
    """The floor's tool functions: ``name -> fn(args) -> str``."""
    delay = _tool_body(kind)

    def run(args: dict[str, Any]) -> str:
        if delay:
            time.sleep(delay)
        return f"ok {args.get('i')}"

    return {kind: run}


def tool_specs(kind: str) -> list[dict[str, Any]]:
    """The floor's ``tools`` request field (what piagent sends for the same tool)."""
    return [{"type": "function", "function": {"name": kind, "description": f"The {kind} tool.",
                                              "parameters": TOOL_SCHEMA}}]


def piagent_tool(kind: str) -> Any:
    """The same tool as a ``piagent.AgentTool``."""
    from piagent import AgentTool, AgentToolResult, TextContent

    delay = _tool_body(kind)

    def execute(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        if delay:
            time.sleep(delay)
        return AgentToolResult(content=[TextContent(f"ok {params.get('i')}")])

    return AgentTool(name=kind, description=f"The {kind} tool.", parameters=TOOL_SCHEMA,
                     execute=execute)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy",
                "ALL_PROXY"):
        env.pop(key, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_json_subprocess(args: list[str], timeout_s: float) -> dict[str, Any]:
    """Run ``python <args>`` (cwd: the repo) and parse the JSON object on its last line."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=_child_env(),
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        msg = f"{' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}"
        raise RuntimeError(msg)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        msg = f"{' '.join(args)} printed nothing; stderr: {proc.stderr[-2000:]}"
        raise RuntimeError(msg)
    data: dict[str, Any] = json.loads(lines[-1])
    return data


class ServerProcess:
    """``benchmarks._openai_server`` in its own process (so its CPU is not the client's)."""

    def __init__(self, max_seconds: float = 1800.0, cpu: int | None = None) -> None:
        # ``cpu``: the one CPU the server (every thread of it) runs on
        pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._openai_server", "--max-seconds",
             str(max_seconds)],
            cwd=REPO, env=_child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, preexec_fn=pin)
        stdout: IO[str] | None = self._proc.stdout
        assert stdout is not None
        line = stdout.readline().strip()
        if not line.startswith("PORT "):
            self.close()
            msg = f"the benchmark server did not start (said {line!r})"
            raise RuntimeError(msg)
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        """Close stdin (the server exits), then wait; kill only our own process if stuck."""
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
