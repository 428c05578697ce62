"""Vertex AI (Gemini, api ``google-vertex``): piagent's adapter against pi-ai 1.6.1's.

Each conversation of ``wire_vertex_conversations`` runs through pi-ai 1.6.1's own
``streamSimple`` of ``google-vertex`` (``pi_wire_driver.mjs``, one node process) and through
piagent's ``stream_simple``, both against one ``WireServer`` on 127.0.0.1 that answers the
conversation's script (Gemini's SSE chunks) and records every request. Identical: the
requests (path, body, content type, the auth header's name) and the events and final
message (normalised as ``test_providers_side_by_side`` does: timestamps, the fields piagent's
messages do not keep, the tool-call ids both sides make up), or different exactly as the
rows of ``WIRE_ROWS`` say.

Not compared here: the OAuth path. pi-ai's google-auth-library posts a service account's
JWT to https://oauth2.googleapis.com/token whatever ``token_uri`` the file names, so it
cannot be pointed at a local server; ``tests/providers/test_vertex.py`` covers piagent's
token path (a local token endpoint, refresh under a frozen clock).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import AbortController, Context, Model, ModelCost, message_to_dict
from piagent.events import assistant_event_to_dict
from piagent.providers import stream_simple
from piagent.stream import StreamOptions
from tests.conftest import WAIT

from .conftest import DRIVER_TIMEOUT_S, PI16, node_command
from .provider_differences import normalise
from .ref_normalise import _first_path, _short, first_difference
from .wire_server import WireServer
from .wire_vertex_conversations import conversations

KEY = "vertex-key-side-by-side"
CONVERSATIONS = {conv["name"]: conv for conv in conversations()}
COST = {"input": 0.3, "output": 2.5, "cacheRead": 0.03, "cacheWrite": 0}
Out = dict[str, Any]


def _error_sentence(pi: Out, ours: Out) -> Out:
    """pi-ai's error text is the SDK's (``got status: 400 Bad Request. {json}``, or the
    stream's own sentence); piagent's is the kit's sentence with the provider's JSON inside
    (as for the Gemini adapter: row ``provider-error-sentence``). The row checks the
    provider's own message is in piagent's sentence, then takes it."""
    out = json.loads(json.dumps(pi))
    theirs = pi["result"].get("errorMessage", "")
    mine = ours["result"].get("errorMessage", "")
    found = re.search(r'"message":\s*"([^"]+)"', theirs)
    if found:
        assert found.group(1) in mine, (theirs, mine)
    else:
        assert mine, theirs
    for message in [out["result"], *(e["error"] for e in out["log"] if "error" in e)]:
        message["errorMessage"] = mine
    return out


def _abort_text(pi: Out, ours: Out) -> Out:
    """An abort's text: pi-ai passes on the SDK's ``This operation was aborted``; piagent
    writes ``Request was aborted``, as all its adapters do. Both stop ``"aborted"``."""
    out = json.loads(json.dumps(pi))
    assert pi["result"]["stopReason"] == ours["result"]["stopReason"] == "aborted"
    for message in [out["result"], *(e["error"] for e in out["log"] if "error" in e)]:
        message["errorMessage"] = ours["result"]["errorMessage"]
    return out


WIRE_ROWS: dict[str, tuple[str, Callable[[Out, Out], Out]]] = {
    "wire-error-sentence": ("the error text of an HTTP or stream error", _error_sentence),
    "wire-abort-text": ("the error text of an abort", _abort_text),
}
"""Row name -> (what differs, transform of pi's normalised output into piagent's)."""
ROWS_OF = {
    "http-error-400": ["wire-error-sentence"],
    "stream-error": ["wire-error-sentence"],
    "abort-mid-stream": ["wire-abort-text"],
    "no-finish-reason": ["wire-error-sentence"],
}


def _model_json(conv: dict[str, Any], base_url: str) -> dict[str, Any]:
    model_id = conv.get("model", "gemini-2.5-flash")
    return {"id": model_id, "name": model_id, "api": "google-vertex", "provider": "google-vertex",
            "baseUrl": base_url, "reasoning": True, "input": ["text", "image"], "cost": COST,
            "contextWindow": 1048576, "maxTokens": 65536,
            **({"thinkingLevelMap": conv["levels"]} if "levels" in conv else {})}


def _pi_options(conv: dict[str, Any]) -> dict[str, Any]:
    return {"apiKey": KEY, "maxRetries": 0, "maxRetryDelayMs": 1, **conv.get("options", {})}


@pytest.fixture(scope="module")
def server() -> Iterator[WireServer]:
    with contextlib.closing(WireServer()) as wire:
        yield wire


@pytest.fixture(scope="module")
def pi_side(pi16_installed: Path, server: WireServer,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    jobs = [{"key": name, "model": _model_json(conv, server.add_run(f"{name}--pi",
                                                                     conv["script"])),
             "context": {"messages": [message_to_dict(m) for m in conv["messages"]]},
             "options": _pi_options(conv), "abortOn": conv.get("abortOn")}
            for name, conv in CONVERSATIONS.items()]
    path = tmp_path_factory.mktemp("wire-vertex") / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}))
    done = subprocess.run([*node_command(PI16, "pi_wire_driver.mjs"), str(path)], cwd=PI16,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    assert done.returncode == 0, f"pi_wire_driver.mjs failed:\n{done.stderr[-4000:]}"
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _ours(server: WireServer, name: str) -> Out:
    conv = CONVERSATIONS[name]
    spec = _model_json(conv, server.add_run(f"{name}--piagent", conv["script"]))
    model = Model(id=spec["id"], name=spec["name"], api=spec["api"], provider=spec["provider"],
                  base_url=spec["baseUrl"], reasoning=True, input=["text", "image"],
                  cost=ModelCost(input=0.3, output=2.5, cache_read=0.03, cache_write=0),
                  context_window=1048576, max_tokens=65536,
                  thinking_level_map=conv.get("levels"))
    given = conv.get("options", {})
    controller = AbortController()
    options = StreamOptions(api_key=KEY, max_retries=given.get("maxRetries", 0),
                            max_retry_delay_ms=1, reasoning=given.get("reasoning"),
                            max_tokens=given.get("maxTokens"),
                            temperature=given.get("temperature"), signal=controller.signal)
    stream = stream_simple(model, Context(list(conv["messages"])), options)
    events = []
    for event in stream:
        events.append(assistant_event_to_dict(event, partial=False))
        if event.type == conv.get("abortOn"):
            controller.abort()
    return {"events": events, "result": message_to_dict(stream.result(WAIT))}


def _comparable(raw: Out) -> Out:
    out: Out = normalise(raw, "google-generative-ai")
    for message in [out["result"], *(e.get("message") or e.get("error") or {}
                                     for e in out["log"])]:
        cost = (message.get("usage") or {}).get("cost") or {}
        cost.pop("totalFromProvider", None)  # pi-ai 1.6.1's flag; piagent's Cost has no such
    return out


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_vertex_conversation_as_pi(name: str, server: WireServer,
                                   pi_side: dict[str, Any]) -> None:
    ours_raw = _ours(server, name)
    assert "driverError" not in pi_side[name], pi_side[name]["driverError"]
    requests = server.requests(f"{name}--pi"), server.requests(f"{name}--piagent")
    for record in (*requests[0], *requests[1]):
        record["headers"].pop("accept", None)  # the SDK's */*; piagent asks for SSE
    where = _first_path(requests[0], requests[1])
    assert requests[0] == requests[1], (f"requests differ at {where}:\n  pi:      "
                                        f"{_short(requests[0])}\n  piagent: {_short(requests[1])}")
    pi, ours = _comparable(pi_side[name]), _comparable(ours_raw)
    for row in ROWS_OF.get(name, []):
        before = pi
        pi = WIRE_ROWS[row][1](pi, ours)
        assert pi != before, f"[{row}] does not change pi's output of {name}"
    difference = first_difference(pi, ours)
    assert difference is None, f"{name} differs:\n{difference}"
