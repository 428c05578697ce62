"""Real MCP servers for piagent.mcp's tests, started on 127.0.0.1 or as subprocesses.

* ``mcp_node``: ``tests/mcp/node_modules`` (``npm ci`` from the lock when missing):
  ``@modelcontextprotocol/server-everything`` and ``@modelcontextprotocol/conformance``.
* ``everything_stdio``: the command that runs server-everything over stdio.
* ``SDK_SERVER``: ``sdk_server.py``, a server built with the ``mcp`` 2.3.0 SDK (both protocol
  generations); ``time_server_command``: ``mcp-server-time`` from PyPI.
* ``hold_server``: ``hold_server.py`` over HTTP, built with the ``mcp`` SDK or with fastmcp
  4.x (both from the test extra, in this interpreter), answering as JSON or SSE; its tool
  ``hold`` waits until released. One process per (server, mode) for a test module.
* ``start_http(command, ready)``: a server process whose output says ``ready`` once it
  listens; stopped (and reaped) when the test ends.
* ``stderr_pipe``: where a stdio server's stderr goes, read line by line (the SDK server
  prints ``MARK <name>`` lines there).
"""

from __future__ import annotations

import importlib.util
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

import pytest
import requests

from tests.conftest import WAIT, npm_installed, unavailable

HERE = Path(__file__).parent
SDK_SERVER = HERE / "sdk_server.py"
START_TIMEOUT_S = 60.0  # a Python MCP server takes seconds to import on a loaded machine


_unavailable = unavailable


@pytest.fixture(scope="session")
def mcp_node() -> Path:
    return npm_installed(HERE, "@modelcontextprotocol/server-everything",
                         "the MCP test servers")


@pytest.fixture(scope="session")
def everything_stdio(mcp_node: Path) -> list[str]:
    main = mcp_node / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    return [str(shutil.which("node")), str(main), "stdio"]


@pytest.fixture(scope="session")
def time_server_command() -> list[str]:
    if importlib.util.find_spec("mcp_server_time") is None:
        _unavailable("mcp-server-time is not installed (pip install '.[test]')")
    return [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


@pytest.fixture(scope="session")
def sdk_command() -> list[str]:
    if importlib.util.find_spec("mcp") is None:
        _unavailable("the mcp SDK is not installed (pip install '.[test]')")
    return [sys.executable, str(SDK_SERVER)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class OutputLines:
    """The lines of a text stream, read by a thread; ``wait_for`` a line holding some text."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        with stream:
            for line in stream:
                self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float, since: int = 0) -> bool:
        """Whether a line holding ``text`` arrives within ``timeout`` (lines seen count too,
        from the line numbered ``since`` on)."""
        return self.find(text, timeout, since) is not None

    def find(self, text: str, timeout: float, since: int = 0) -> int | None:
        """The number of the first line from ``since`` on holding ``text``, waiting for it
        ``timeout`` at most; ``None`` if none came."""
        for number in range(since, len(self.seen)):
            if text in self.seen[number]:
                return number
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._next(left):
                return None
            if text in self.seen[-1]:
                return len(self.seen) - 1

    def wait_count(self, text: str, count: int, timeout: float) -> bool:
        """Whether ``count`` lines holding ``text`` have arrived within ``timeout``."""
        deadline = time.monotonic() + timeout
        while sum(text in line for line in self.seen) < count:
            left = deadline - time.monotonic()
            if left <= 0 or not self._next(left):
                return False
        return True

    def _next(self, timeout: float) -> bool:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return False
        if line is None:
            return False
        self.seen.append(line)
        return True

    def join(self, timeout: float) -> None:
        self._reader.join(timeout)


@pytest.fixture
def stderr_pipe() -> Iterator[tuple[int, OutputLines]]:
    """A pipe for a stdio server's stderr: its write end, and its lines as they come."""
    read_fd, write_fd = os.pipe()
    lines = OutputLines(os.fdopen(read_fd, "r"))
    try:
        yield write_fd, lines
    finally:
        os.close(write_fd)
        lines.join(10)


class ServerProcess:
    """A server subprocess; its output (stdout and stderr) as ``OutputLines``."""

    def __init__(self, command: Sequence[str], env: dict[str, str] | None) -> None:
        self.process = subprocess.Popen(list(command), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=env, text=True, start_new_session=True)
        assert self.process.stdout is not None
        self.output = OutputLines(self.process.stdout)

    def wait_ready(self, text: str, timeout: float) -> None:
        if not self.output.wait_for(text, timeout):
            self.stop()
            raise AssertionError(f"server did not print {text!r}: {''.join(self.output.seen)}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
        self.process.wait(10)
        self.output.join(10)


@pytest.fixture
def start_http() -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def start(command: Sequence[str], ready: str, env: dict[str, str] | None = None
              ) -> ServerProcess:
        server = ServerProcess(command, {**os.environ, **(env or {})})
        started.append(server)
        server.wait_ready(ready, START_TIMEOUT_S)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def everything_http(start_http: Callable[..., ServerProcess], mcp_node: Path) -> str:
    port = free_port()
    main = mcp_node / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    start_http([str(shutil.which("node")), str(main), "streamableHttp"],
               f"listening on port {port}", env={"PORT": str(port)})
    return f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def sdk_http(start_http: Callable[..., ServerProcess], sdk_command: list[str]
             ) -> tuple[str, ServerProcess]:
    """The SDK server over HTTP: its URL, and its process (whose output has the marks)."""
    port = free_port()
    server = start_http([*sdk_command, "http", str(port)], "Uvicorn running")
    return f"http://127.0.0.1:{port}/mcp", server


HOLD_SERVER = HERE / "hold_server.py"
HOLD_KINDS = [("sdk", "json"), ("sdk", "sse"), ("fastmcp", "json"), ("fastmcp", "sse")]


class HoldServer:
    """``hold_server.py`` running: its URL, its output (the marks), and ``release``."""

    def __init__(self, kind: str, mode: str, port: int, process: ServerProcess) -> None:
        self.kind = kind
        self.mode = mode
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.process = process
        self.output = process.output

    def release(self, tag: str | None = None) -> None:
        """Let the ``hold`` call tagged ``tag`` answer (every one, now and later: ``None``)."""
        query = "" if tag is None else f"?tag={tag}"
        requests.post(self.url.removesuffix("/mcp") + "/release" + query,
                      timeout=WAIT).raise_for_status()


@pytest.fixture(scope="module", params=HOLD_KINDS, ids=[f"{k}-{m}" for k, m in HOLD_KINDS])
def hold_server(request: pytest.FixtureRequest) -> Iterator[HoldServer]:
    kind, mode = request.param
    if importlib.util.find_spec("fastmcp" if kind == "fastmcp" else "mcp") is None:
        _unavailable(f"{kind} is not installed (pip install '.[test]')")
    port = free_port()
    process = ServerProcess([sys.executable, str(HOLD_SERVER), kind, mode, str(port)], None)
    process.wait_ready("Uvicorn running", START_TIMEOUT_S)
    server = HoldServer(kind, mode, port, process)
    try:
        yield server
    finally:
        try:
            server.release()  # the holds still waiting answer, late
        finally:
            process.stop()
