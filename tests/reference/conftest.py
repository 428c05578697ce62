"""Fixtures of the differential suite: the pinned pi-agent-core install and pi's outputs.

``ThreadedServer(handler, name)``: an HTTP server on 127.0.0.1 run by one thread (the base of
the suite's stand-in providers); ``url``; ``close()`` stops it and joins the thread.

Without node/npm the suite is skipped with the reason, unless ``PIAGENT_REQUIRE_ALL=1``
(CI), in which case it fails.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WAIT, npm_installed, unavailable

HERE = Path(__file__).parent
SCENARIOS = HERE / "scenarios"
DRIVER_TIMEOUT_S = 300


_unavailable = unavailable


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a client resets its connection (an aborted run; node's keep-alive
        connections when its process exits)."""


class ThreadedServer:
    """Serves ``handler`` on 127.0.0.1 (a free port; ``url``) from a thread named ``name``,
    one daemon thread a connection; ``close()`` stops it and joins the serving thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str) -> None:
        self._httpd = _QuietServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(WAIT)


def scenario_files() -> list[Path]:
    return sorted(SCENARIOS.glob("*.json"))


def load_scenario(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    data.setdefault("name", path.stem)
    return data


@pytest.fixture(scope="session")
def pi_installed() -> Path:
    """tests/reference/node_modules, installed with ``npm ci`` from the lock when missing."""
    modules = npm_installed(HERE, "@earendil-works/pi-agent-core/package.json",
                            "the reference suite (pi-agent-core 1.4.0)")
    package = modules / "@earendil-works" / "pi-agent-core" / "package.json"
    version = json.loads(package.read_text())["version"]
    assert version == "1.4.0", f"pi-agent-core {version} installed, 1.4.0 pinned"
    return HERE / "node_modules"


PI16 = HERE / "pi16"
"""pi-agent-core 1.6.0 with pi-ai 1.6.1 (an npm ``overrides`` entry), the reference from
issue 46. ``pi16/*.mjs`` are symlinks to the drivers here; ``node_command`` runs them with the
symlinks preserved so that their imports resolve to ``pi16/node_modules``."""


def node_command(root: Path, script: str) -> list[str]:
    """The command that runs driver ``script`` against the pi installed under ``root``
    (``HERE`` for 1.4.0, ``PI16`` for 1.6.0 / 1.6.1)."""
    return ["node", "--preserve-symlinks", "--preserve-symlinks-main", str(root / script)]


@pytest.fixture(scope="session")
def pi16_installed() -> Path:
    """tests/reference/pi16/node_modules (pi-agent-core 1.6.0, pi-ai 1.6.1), installed with
    ``npm ci`` from its lock when missing."""
    modules = npm_installed(PI16, "@earendil-works/pi-agent-core/package.json",
                            "the reference suite (pi-agent-core 1.6.0 / pi-ai 1.6.1)")
    for name, pinned in (("pi-agent-core", "1.6.0"), ("pi-ai", "1.6.1")):
        package = modules / "@earendil-works" / name / "package.json"
        version = json.loads(package.read_text())["version"]
        assert version == pinned, f"{name} {version} installed under pi16, {pinned} pinned"
    return modules


@dataclass(frozen=True)
class Pi:
    """One installed pi: ``version`` (pi-agent-core's) and ``root``, the folder whose
    ``node_modules`` holds it and where its drivers are run."""

    version: str
    root: Path

    @property
    def reference(self) -> bool:
        """Whether this is the reference (1.6.0 / 1.6.1); 1.4.0 runs beside it, and rows
        changed upstream in 1.5/1.6 apply to 1.4.0 only."""
        return self.version != "1.4.0"

    def command(self, script: str) -> list[str]:
        return node_command(self.root, script)

    def run(self, script: str, *args: str, stdin: str | None = None) -> str:
        """``script`` run against this pi with ``args`` and ``stdin``; its stdout."""
        done = subprocess.run([*self.command(script), *args], cwd=self.root, input=stdin,
                              capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
        assert done.returncode == 0, f"{script} (pi {self.version}) failed:\n{done.stderr[-4000:]}"
        return done.stdout


PI_VERSIONS = ("1.6.0", "1.4.0")
"""The pi-agent-core versions every pi-side fixture runs: the reference first, then 1.4.0."""


@pytest.fixture(scope="session", params=PI_VERSIONS, ids=["pi16", "pi14"])
def pi(request: pytest.FixtureRequest) -> Pi:
    """Each installed pi in turn (a session-scoped parameter: one node process per version
    and fixture, every test that uses it runs against both)."""
    if request.param == "1.4.0":
        return Pi("1.4.0", request.getfixturevalue("pi_installed").parent)
    request.getfixturevalue("pi16_installed")
    return Pi(request.param, PI16)


class PiOutputs:
    """pi's raw output of every scenario and entry, by version: one node process per
    version, kept for the session. The processes of both versions are started together
    (a driver mostly waits: its scenarios' timers), and each is read on first use."""

    def __init__(self) -> None:
        self._by_version: dict[str, dict[str, Any]] = {}
        self._running: dict[str, subprocess.Popen[str]] = {}

    def start(self, pi: Pi) -> None:
        if pi.version in self._by_version or pi.version in self._running:
            return
        self._running[pi.version] = subprocess.Popen(
            [*pi.command("pi_driver.mjs"), *(str(p) for p in scenario_files())], cwd=pi.root,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def of(self, pi: Pi) -> dict[str, Any]:
        if pi.version not in self._by_version:
            self.start(pi)
            process = self._running.pop(pi.version)
            try:
                out, err = process.communicate(timeout=DRIVER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise
            assert process.returncode == 0, \
                f"pi_driver.mjs (pi {pi.version}) failed:\n{err[-4000:]}"
            self._by_version[pi.version] = json.loads(out)
        return self._by_version[pi.version]

    def close(self) -> None:
        """Stop the processes never read (a session that failed or was cut short)."""
        for process in self._running.values():
            process.kill()
            process.communicate()
        self._running.clear()


@pytest.fixture(scope="session")
def pi_outputs_by_version() -> Iterator[PiOutputs]:
    outputs = PiOutputs()
    yield outputs
    outputs.close()


@pytest.fixture(scope="session")
def pi_outputs(pi: Pi, pi_outputs_by_version: PiOutputs,
               request: pytest.FixtureRequest) -> dict[str, Any]:
    """pi's raw output of every scenario and entry for the ``pi`` in turn."""
    pi_outputs_by_version.start(pi)
    if pi.reference:  # the other version's scenarios run meanwhile (its turn comes next)
        request.getfixturevalue("pi_installed")
        pi_outputs_by_version.start(Pi("1.4.0", HERE))
    return pi_outputs_by_version.of(pi)


@pytest.fixture(scope="session")
def piagent_outputs() -> dict[tuple[str, str], Any]:
    """piagent's normalised output by (scenario, entry), kept for the second pi version (its
    side does not depend on which pi it is compared with)."""
    return {}
