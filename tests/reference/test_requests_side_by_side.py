"""What the model sees: every request piagent's adapters send, against pi-ai 1.4.0's.

Each conversation of ``request_conversations`` runs, on every API it applies to, through
pi-agent-core 1.4.0's ``Agent`` with pi-ai 1.4.0's real ``streamSimple``
(``pi_request_driver.mjs``: one node process for all runs) and through piagent's ``Agent``
with its real adapters (``request_driver.py``), both against one ``CaptureServer`` on
127.0.0.1 that answers from the conversation's script and records every request (the body,
the path, and the headers content-type, anthropic-version, anthropic-beta and the auth
header's name). The two request sequences must be identical after normalising only what each
side makes up (the tool-call ids the Google clients invent), or differ exactly as the rows of
``request_differences`` say (docs/reference.md, deliberate differences).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import DRIVER_TIMEOUT_S, HERE, PI16, node_command
from .ref_normalise import _first_path, _short
from .request_capture import CaptureServer
from .request_conversations import APIS, IN_PLACE, runs
from .request_differences import REQUEST_ROWS, VERSIONS, applies
from .request_driver import run

MODELS = {
    "plain": {"openai-completions": ("openai", "gpt-4o-mini"),
              "openai-responses": ("openai", "gpt-4o-mini"),
              "anthropic-messages": ("anthropic", "claude-sonnet-4-5"),
              "google-generative-ai": ("google", "gemini-2.5-flash")},
    "reasoning": {"openai-completions": ("openai", "gpt-5-mini"),
                  "openai-responses": ("openai", "gpt-5-mini"),
                  "anthropic-messages": ("anthropic", "claude-sonnet-4-5"),
                  "google-generative-ai": ("google", "gemini-2.5-flash")},
    "outside": dict.fromkeys(APIS, ("local", "my-model")),
}
RUNS = runs()
_GOOGLE_ID = re.compile(r"^[A-Za-z0-9_-]+_\d{13}_\d+$")


def _key(conv: dict[str, Any], api: str) -> str:
    return f"{conv['name']}--{api}"


def _spec(server: CaptureServer, conv: dict[str, Any], api: str, side: str) -> dict[str, str]:
    """The model of one run; ``side`` ("pi-<version>" or "py") names the run's record."""
    provider, model_id = MODELS[conv.get("model", "plain")][api]
    base = server.add_run(f"{_key(conv, api)}--{side}", api, conv["script"])
    return {"provider": provider, "id": model_id, "api": api, "baseUrl": base}


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureServer]:
    with contextlib.closing(CaptureServer()) as server:
        yield server


class PiRuns:
    """pi's runs of every conversation, one node process per pi-ai version, on first use."""

    def __init__(self, request: pytest.FixtureRequest, capture: CaptureServer,
                 folder: Path) -> None:
        self._request, self._capture, self._folder = request, capture, folder
        self._outputs: dict[str, dict[str, Any]] = {}

    def __call__(self, version: str) -> dict[str, Any]:
        if version not in self._outputs:
            self._outputs[version] = self._run(version)
        return self._outputs[version]

    def _run(self, version: str) -> dict[str, Any]:
        root = HERE if version == "1.4.0" else PI16
        self._request.getfixturevalue("pi_installed" if root == HERE else "pi16_installed")
        jobs = [{"key": _key(conv, api), "model": _spec(self._capture, conv, api, f"pi-{version}"),
                 "conversation": conv} for conv, api in RUNS]
        path = self._folder / f"jobs-{version}.json"
        path.write_text(json.dumps({"jobs": jobs}))
        done = subprocess.run([*node_command(root, "pi_request_driver.mjs"), str(path)],
                              cwd=root, capture_output=True, text=True,
                              timeout=DRIVER_TIMEOUT_S)
        assert done.returncode == 0, \
            f"pi_request_driver.mjs ({version}) failed:\n{done.stderr[-4000:]}"
        out: dict[str, Any] = json.loads(done.stdout)
        return out


@pytest.fixture(scope="module")
def pi_runs(request: pytest.FixtureRequest, capture: CaptureServer,
            tmp_path_factory: pytest.TempPathFactory) -> PiRuns:
    return PiRuns(request, capture, tmp_path_factory.mktemp("requests"))


@pytest.fixture(scope="module")
def py_runs(capture: CaptureServer) -> dict[str, list[Any]]:
    """piagent's requests of each run (one run serves both versions), by key, on first use."""
    return {}


def normalise(value: Any) -> Any:
    """The requests with the ids a side makes up replaced (Google's invented tool-call ids)."""
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str) and _GOOGLE_ID.match(value):
        return "<generated id>"
    return value


def _at(value: Any, path: str) -> Any:
    for key in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        if not isinstance(value, (dict, list)):
            break
        value = value.get(key[0]) if isinstance(value, dict) else \
            (value[int(key[1])] if int(key[1]) < len(value) else None)
    return value


def request_difference(pi: list[Any], ours: list[Any]) -> str | None:
    """None when equal; else the first request and path that differ, with both values."""
    if pi == ours:
        return None
    for index, (a, b) in enumerate(zip(pi, ours, strict=False)):
        if a != b:
            path = _first_path(a, b) or "."
            return (f"request [{index}] differs at {path}\n  pi:      {_short(_at(a, path))}\n"
                    f"  piagent: {_short(_at(b, path))}")
    return (f"{len(pi)} requests (pi) vs {len(ours)} (piagent); the last:\n"
            f"  pi:      {_short(pi[-1:])}\n  piagent: {_short(ours[-1:])}")


def _params() -> list[Any]:
    out = []
    for version in VERSIONS:
        for conv, api in RUNS:
            marks = ([pytest.mark.xfail(strict=True, reason=IN_PLACE)]
                     if api in conv.get("xfail", ()) else [])
            out.append(pytest.param(version, conv, api, id=f"{version}-{_key(conv, api)}",
                                    marks=marks))
    return out


@pytest.mark.parametrize(("version", "conv", "api"), _params())
def test_requests_are_pi_s(version: str, conv: dict[str, Any], api: str,
                           capture: CaptureServer, pi_runs: PiRuns,
                           py_runs: dict[str, list[Any]]) -> None:
    key = _key(conv, api)
    theirs = pi_runs(version)
    assert theirs[key] == {"ok": True}, theirs[key]
    if key not in py_runs:
        run(conv, _spec(capture, conv, api, "py"))
        py_runs[key] = normalise(capture.requests(f"{key}--py"))
    pi = normalise(capture.requests(f"{key}--pi-{version}"))
    ours = py_runs[key]
    for name, row in REQUEST_ROWS.items():
        if applies(row, conv, api, version):
            before = pi
            pi = row.transform(pi, conv, api)
            assert pi != before, f"[{name}] does not change pi-ai {version}'s requests of {key}"
    dump = os.environ.get("PIAGENT_REQUEST_DUMP")  # a folder: both sides' requests, by hand
    if dump:
        Path(dump, f"{version}-{key}.json").write_text(
            json.dumps({"pi": pi, "piagent": ours}, indent=1))
    difference = request_difference(pi, ours)
    assert difference is None, \
        f"{key}: piagent's requests differ from pi-ai {version}'s:\n{difference}"


def test_enough_conversations() -> None:
    names = {conv["name"] for conv, _ in RUNS}
    assert len(names) >= 40
    assert {api for _, api in RUNS} == set(APIS)


def test_rows_are_documented() -> None:
    """Every row is a row of docs/reference.md's deliberate differences."""
    text = (HERE.parent.parent / "docs" / "reference.md").read_text()
    for name in REQUEST_ROWS:
        assert any(ln.startswith(f"| `{name}`") for ln in text.splitlines()), \
            f"docs/reference.md has no row `{name}`"
