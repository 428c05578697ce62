"""piagent's providers against pi-ai 1.4.0's own adapters, on the same real recordings.

Every recording in ``tests/providers/recorded/data`` is served by one ``ReplayServer`` on
127.0.0.1, whole and cut into 7-byte writes, to pi-ai's ``streamSimple`` of the recording's
API (``pi_provider_driver.mjs``: one node process for all of them, the model's ``baseUrl``
at the server) and to piagent's ``stream_simple``. The two outputs are compared on the
assistant events (the deltas of one block merged) and the final message: content blocks and
their order, stop reason, usage, error message, signatures. Normalising drops timestamps and
the fields piagent's messages do not keep (docs/reference.md, transcripts), writes integral
numbers one way, and replaces the tool-call ids both sides make up for Gemini
(``name_<ms>_<n>``). A recording is identical, or differs exactly as the rows of
``provider_differences.RECORDINGS`` say (each row must change pi's output, and pi's output
through the rows must be piagent's).

The proxy clients: a ``ProxyApp`` (piagent's ``stream_simple`` behind it, reading the same
replay server) on 127.0.0.1 streams every recording (whole) to pi-agent-core's
``streamProxy`` and to piagent's ``stream_proxy``; what the two clients give must be the
same, normalised the same way.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import Context, Model, UserMessage, message_to_dict
from piagent.events import assistant_event_to_dict
from piagent.providers import stream_simple
from piagent.proxy import ProxyApp, ProxyServer, ProxyStreamOptions, stream_proxy
from piagent.stream import AssistantMessageEventStream, StreamOptions
from tests.conftest import WAIT

from .conftest import DRIVER_TIMEOUT_S, HERE, PI16, node_command
from .provider_differences import RECORDINGS, ROWS, VERSIONS, Side, normalise, rows_for
from .provider_replay import MODES, ReplayServer, load, recording_names
from .ref_normalise import first_difference

KEY = "sk-recorded-replay-0000"
TOKEN = "proxy-token-side-by-side"
MESSAGES = [UserMessage(content="Hi", timestamp=1700000000000)]
NAMES = recording_names()


def _model_json(server: ReplayServer, name: str, mode: str) -> dict[str, Any]:
    meta, _ = load(name)
    return {"id": meta["model"], "name": meta["model"], "api": meta["api"],
            "provider": meta["provider"], "baseUrl": server.base_url(name, mode, meta["api"]),
            "reasoning": False, "input": ["text"],
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": 128000, "maxTokens": 16384}


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    server = ReplayServer()
    try:
        yield server
    finally:
        server.close()


def _upstream(model: Model | None, context: Context,
              options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """The proxy's stream function: the provider adapters, with the recordings' key."""
    base = options if options is not None else StreamOptions()
    return stream_simple(model, context, StreamOptions(
        api_key=KEY, max_retries=0, max_retry_delay_ms=1, temperature=base.temperature,
        max_tokens=base.max_tokens, reasoning=base.reasoning, signal=base.signal))


@pytest.fixture(scope="module")
def proxy_url(replay: ReplayServer) -> Iterator[str]:
    allowed: dict[str, list[str]] = {}
    for name in NAMES:  # the replay server stands in for each recording's provider
        model = _model_json(replay, name, "whole")
        allowed.setdefault(model["provider"], []).append(model["baseUrl"])
    app = ProxyApp(_upstream, auth_tokens=[TOKEN], allowed_base_urls=allowed)
    server = ProxyServer(app, "127.0.0.1", 0).start()
    try:
        yield server.url
    finally:
        server.close()
        app.close()


class PiSides:
    """pi's output of every job, one node process per pi-ai version, run on first use."""

    def __init__(self, request: pytest.FixtureRequest, replay: ReplayServer, proxy_url: str,
                 folder: Path) -> None:
        self._request, self._replay, self._proxy_url = request, replay, proxy_url
        self._folder = folder
        self._outputs: dict[str, dict[str, Any]] = {}

    def __call__(self, version: str) -> dict[str, Any]:
        if version not in self._outputs:
            self._outputs[version] = self._run(version)
        return self._outputs[version]

    def _run(self, version: str) -> dict[str, Any]:
        root = HERE if version == "1.4.0" else PI16
        self._request.getfixturevalue("pi_installed" if root == HERE else "pi16_installed")
        replay = self._replay
        jobs = [{"key": f"{name}-{mode}", "model": _model_json(replay, name, mode)}
                for name in NAMES for mode in MODES]
        jobs += [{"key": f"{name}-proxy", "model": _model_json(replay, name, "whole"),
                  "proxy": {"proxyUrl": self._proxy_url, "authToken": TOKEN}} for name in NAMES]
        spec = self._folder / f"jobs-{version}.json"
        spec.write_text(json.dumps({"apiKey": KEY, "jobs": jobs, "context": {
            "messages": [message_to_dict(m) for m in MESSAGES]}}))
        done = subprocess.run([*node_command(root, "pi_provider_driver.mjs"), str(spec)],
                              cwd=root, capture_output=True, text=True,
                              timeout=DRIVER_TIMEOUT_S)
        assert done.returncode == 0, \
            f"pi_provider_driver.mjs ({version}) failed:\n{done.stderr[-4000:]}"
        out: dict[str, Any] = json.loads(done.stdout)
        return out


@pytest.fixture(scope="module")
def pi_side(request: pytest.FixtureRequest, replay: ReplayServer, proxy_url: str,
            tmp_path_factory: pytest.TempPathFactory) -> PiSides:
    return PiSides(request, replay, proxy_url, tmp_path_factory.mktemp("providers"))


def _ours(replay: ReplayServer, name: str, mode: str) -> dict[str, Any]:
    spec = _model_json(replay, name, mode)
    model = Model(id=spec["id"], api=spec["api"], provider=spec["provider"],
                  base_url=spec["baseUrl"], name=spec["name"])
    stream = stream_simple(model, Context(list(MESSAGES)),
                           StreamOptions(api_key=KEY, max_retries=0, max_retry_delay_ms=1))
    events = [assistant_event_to_dict(e, partial=False) for e in stream]
    return {"events": events, "result": message_to_dict(stream.result(WAIT))}


def _through_proxy(replay: ReplayServer, proxy_url: str, name: str) -> dict[str, Any]:
    spec = _model_json(replay, name, "whole")
    model = Model(id=spec["id"], api=spec["api"], provider=spec["provider"],
                  base_url=spec["baseUrl"], name=spec["name"])
    stream = stream_proxy(model, Context(list(MESSAGES)),
                          ProxyStreamOptions(proxy_url=proxy_url, auth_token=TOKEN))
    events = [assistant_event_to_dict(e, partial=False) for e in stream]
    return {"events": events, "result": message_to_dict(stream.result(WAIT))}


def _params() -> list[Any]:
    return [pytest.param(version, name, mode, id=f"{version}-{name}-{mode}")
            for version in VERSIONS for name in NAMES for mode in MODES]


@pytest.mark.parametrize(("version", "name", "mode"), _params())
def test_recording_reads_as_pi(version: str, name: str, mode: str, replay: ReplayServer,
                               pi_side: PiSides) -> None:
    meta, body = load(name)
    pi = normalise(pi_side(version)[f"{name}-{mode}"], meta["api"])
    ours = normalise(_ours(replay, name, mode), meta["api"])
    side = Side(meta, body, ours)
    rows = rows_for(name, version)
    for row in rows:
        before = pi
        pi = ROWS[row].transform(pi, side)
        assert pi != before, f"[{row}] does not change pi-ai {version}'s output of {name}"
    difference = first_difference(pi, ours)
    assert difference is None, (f"{name} ({mode}) differs from pi-ai {version}"
                                + (f" beyond {rows}" if rows else "") + f":\n{difference}")


@pytest.mark.parametrize(("version", "name"),
                         [pytest.param(v, n, id=f"{v}-{n}") for v in VERSIONS for n in NAMES])
def test_proxy_client_reads_as_pi(version: str, name: str, replay: ReplayServer,
                                  proxy_url: str, pi_side: PiSides) -> None:
    api = load(name)[0]["api"]
    pi = normalise(pi_side(version)[f"{name}-proxy"], api)
    ours = normalise(_through_proxy(replay, proxy_url, name), api)
    difference = first_difference(pi, ours)
    assert difference is None, f"{name} through the proxy differs ({version}):\n{difference}"


def test_rows_name_real_recordings() -> None:
    assert set(RECORDINGS) <= set(NAMES), set(RECORDINGS) - set(NAMES)
    used = {row for rows in RECORDINGS.values() for row in rows}
    assert used == set(ROWS), set(ROWS) ^ used


def test_rows_are_documented() -> None:
    """Every row is a row of docs/reference.md's table, naming its recordings."""
    text = (HERE.parent.parent / "docs" / "reference.md").read_text()
    for row in ROWS:
        line = next((ln for ln in text.splitlines() if ln.startswith(f"| `{row}`")), None)
        assert line is not None, f"docs/reference.md has no row `{row}`"
        for name, rows in RECORDINGS.items():
            if row in rows:
                assert f"`{name}`" in line, f"row `{row}` does not name `{name}`"
