"""Fixtures of the differential suite: the pinned pi-agent-core install and pi's outputs.

Without node/npm the suite is skipped with the reason, unless ``PIAGENT_REQUIRE_ALL=1``
(CI), in which case it fails.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import npm_installed, unavailable

HERE = Path(__file__).parent
SCENARIOS = HERE / "scenarios"
DRIVER_TIMEOUT_S = 300


_unavailable = unavailable


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


@pytest.fixture(scope="session")
def pi_outputs(pi_installed: Path) -> dict[str, Any]:
    """pi's raw output of every scenario and entry: one node process for the whole suite."""
    files = [str(p) for p in scenario_files()]
    done = subprocess.run(["node", str(HERE / "pi_driver.mjs"), *files], cwd=HERE,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    assert done.returncode == 0, f"pi_driver.mjs failed:\n{done.stderr[-4000:]}"
    outputs: dict[str, Any] = json.loads(done.stdout)
    return outputs
