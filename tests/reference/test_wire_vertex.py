"""Vertex AI (Gemini, api ``google-vertex``): piagent's adapter against pi-ai 1.6.1's.

Each conversation of ``wire_vertex_conversations`` runs through pi-ai 1.6.1's own
``streamSimple`` of ``google-vertex`` (``pi_wire_driver.mjs``, one node process) and through
piagent's ``stream_simple``, both against one ``WireServer`` on 127.0.0.1 that answers the
conversation's script (Gemini's SSE chunks) and records every request (``wire_harness``).
Identical: the requests (path, body, content type, the auth header's name) and the events and
final message (normalised as ``test_providers_side_by_side`` does), or different exactly as
the rows of ``ROWS_OF`` say.

Not compared here: the OAuth path. pi-ai's google-auth-library posts a service account's
JWT to https://oauth2.googleapis.com/token whatever ``token_uri`` the file names, so it
cannot be pointed at a local server; ``tests/providers/test_vertex.py`` covers piagent's
token path (a local token endpoint, refresh under a frozen clock).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .ref_normalise import first_difference
from .wire_harness import (
    COMMON_ROWS,
    apply_rows,
    assert_documented,
    comparable,
    compare_requests,
    pi_job,
    run_ours,
    run_pi,
)
from .wire_server import WireServer
from .wire_vertex_conversations import conversations

KEY = "vertex-key-side-by-side"
CONVERSATIONS = {conv["name"]: conv for conv in conversations()}
COST = {"input": 0.3, "output": 2.5, "cacheRead": 0.03, "cacheWrite": 0}
ROWS_OF = {
    "http-error-400": ["wire-error-sentence"],
    "stream-error": ["wire-error-sentence"],
    "no-finish-reason": ["wire-error-sentence"],
    "abort-mid-stream": ["wire-abort-text"],
}


def _model_json(conv: dict[str, Any], base_url: str) -> dict[str, Any]:
    model_id = conv.get("model", "gemini-2.5-flash")
    return {"id": model_id, "name": model_id, "api": "google-vertex", "provider": "google-vertex",
            "baseUrl": base_url, "reasoning": True, "input": ["text", "image"], "cost": COST,
            "contextWindow": 1048576, "maxTokens": 65536,
            **({"thinkingLevelMap": conv["levels"]} if "levels" in conv else {})}


def _options(conv: dict[str, Any]) -> dict[str, Any]:
    return {"apiKey": KEY, "maxRetries": 0, "maxRetryDelayMs": 1, **conv.get("options", {})}


@pytest.fixture(scope="module")
def server() -> Iterator[WireServer]:
    with contextlib.closing(WireServer()) as wire:
        yield wire


@pytest.fixture(scope="module")
def pi_side(pi16_installed: Path, server: WireServer,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    jobs = [pi_job(name, _model_json(conv, server.add_run(f"{name}--pi", conv["script"])),
                   conv, _options(conv)) for name, conv in CONVERSATIONS.items()]
    return run_pi(jobs, tmp_path_factory.mktemp("wire-vertex"))


def test_rows_are_documented() -> None:
    assert_documented([*COMMON_ROWS])


def test_rows_name_conversations() -> None:
    assert set(ROWS_OF) <= set(CONVERSATIONS)
    assert {row for rows in ROWS_OF.values() for row in rows} <= set(COMMON_ROWS)


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_vertex_conversation_as_pi(name: str, server: WireServer,
                                   pi_side: dict[str, Any]) -> None:
    conv = CONVERSATIONS[name]
    spec = _model_json(conv, server.add_run(f"{name}--piagent", conv["script"]))
    ours = comparable(run_ours(spec, conv, _options(conv)))
    assert "driverError" not in pi_side[name], pi_side[name]["driverError"]
    compare_requests(server.requests(f"{name}--pi"), server.requests(f"{name}--piagent"))
    pi = apply_rows(name, comparable(pi_side[name]), ours, ROWS_OF.get(name, []), COMMON_ROWS)
    difference = first_difference(pi, ours)
    assert difference is None, f"{name} differs:\n{difference}"
