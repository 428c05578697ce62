"""What the side-by-side tests of one wire API each (``test_wire_*.py``) share: running the
conversations through pi-ai 1.6.1's ``streamSimple`` (``pi_wire_driver.mjs``, one node
process) and through piagent's ``stream_simple`` against one ``WireServer``, the comparable
form of both outputs, and the rows every API shows (error and abort texts)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piagent import AbortController, Context, Model, ModelCost, message_to_dict
from piagent.events import assistant_event_to_dict
from piagent.providers import stream_simple
from piagent.stream import StreamOptions
from tests.conftest import WAIT

from .conftest import DRIVER_TIMEOUT_S, PI16, node_command
from .provider_differences import normalise
from .ref_normalise import _first_path, _short

Out = dict[str, Any]
Row = tuple[str, Callable[[Out, Out], Out]]


def model_of(spec: dict[str, Any]) -> Model:
    """piagent's ``Model`` of pi's model JSON."""
    cost = spec.get("cost", {})
    return Model(id=spec["id"], name=spec["name"], api=spec["api"], provider=spec["provider"],
                 base_url=spec["baseUrl"], reasoning=spec.get("reasoning", False),
                 input=spec.get("input", ["text"]),
                 cost=ModelCost(input=cost.get("input", 0), output=cost.get("output", 0),
                                cache_read=cost.get("cacheRead", 0),
                                cache_write=cost.get("cacheWrite", 0)),
                 context_window=spec["contextWindow"], max_tokens=spec["maxTokens"],
                 thinking_level_map=spec.get("thinkingLevelMap"), compat=spec.get("compat"))


def run_pi(jobs: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    path = folder / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}))
    done = subprocess.run([*node_command(PI16, "pi_wire_driver.mjs"), str(path)], cwd=PI16,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    assert done.returncode == 0, f"pi_wire_driver.mjs failed:\n{done.stderr[-4000:]}"
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def run_ours(spec: dict[str, Any], conv: dict[str, Any], options: dict[str, Any]) -> Out:
    """One conversation through piagent's ``stream_simple``; ``options``: pi's options JSON
    (``apiKey``, ``maxRetries``, ``reasoning``, ``maxTokens``, ``temperature``,
    ``cacheRetention``, ``env``)."""
    controller = AbortController()
    stream_options = StreamOptions(
        api_key=options.get("apiKey"), max_retries=options.get("maxRetries", 0),
        max_retry_delay_ms=1, reasoning=options.get("reasoning"),
        max_tokens=options.get("maxTokens"), temperature=options.get("temperature"),
        cache_retention=options.get("cacheRetention"), env=options.get("env"),
        signal=controller.signal)
    stream = stream_simple(model_of(spec), Context(list(conv["messages"])), stream_options)
    events = []
    for event in stream:
        events.append(assistant_event_to_dict(event, partial=False))
        if event.type == conv.get("abortOn"):
            controller.abort()
    return {"events": events, "result": message_to_dict(stream.result(WAIT))}


def pi_job(key: str, spec: dict[str, Any], conv: dict[str, Any],
           options: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "model": spec, "options": options, "abortOn": conv.get("abortOn"),
            "context": {"messages": [message_to_dict(m) for m in conv["messages"]]}}


def _rounded(value: Any) -> Any:
    """Floats to 12 significant digits: pi-ai prices ``(rate / 1e6) * tokens``, piagent
    ``rate * tokens / 1e6``; the last bit differs."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def comparable(raw: Out) -> Out:
    """Normalised as ``test_providers_side_by_side`` does (timestamps, fields piagent's
    messages do not keep, the tool-call ids both sides make up), without pi-ai 1.6.1's
    ``cost.totalFromProvider`` flag, costs to 12 significant digits."""
    if "driverError" in raw:
        return raw
    out: Out = normalise(raw, "google-generative-ai")
    for message in [out["result"], *(e.get("message") or e.get("error") or {}
                                     for e in out["log"])]:
        cost = (message.get("usage") or {}).get("cost") or {}
        cost.pop("totalFromProvider", None)
    rounded: Out = _rounded(out)
    return rounded


def _messages(out: Out) -> list[dict[str, Any]]:
    return [out["result"], *(e["error"] for e in out["log"] if "error" in e)]


def error_sentence(pi: Out, ours: Out) -> Out:
    """pi-ai's error text is its SDK's; piagent's is the kit's sentence with the provider's
    own message inside. Checks the provider's message is in piagent's text, then takes it."""
    out = json.loads(json.dumps(pi))
    theirs = pi["result"].get("errorMessage", "")
    mine = ours["result"].get("errorMessage", "")
    found = re.search(r'"message":\s*"([^"]+)"', theirs) or re.search(r":\s*([^:]+)$", theirs)
    assert mine and (found is None or found.group(1).strip() in mine), (theirs, mine)
    for message in _messages(out):
        message["errorMessage"] = mine
    return out


def abort_text(pi: Out, ours: Out) -> Out:
    """An abort's text: pi-ai passes on its SDK's; piagent writes ``Request was aborted``,
    as all its adapters do. Both stop ``"aborted"``."""
    out = json.loads(json.dumps(pi))
    assert pi["result"]["stopReason"] == ours["result"]["stopReason"] == "aborted"
    for message in _messages(out):
        message["errorMessage"] = ours["result"]["errorMessage"]
    return out


COMMON_ROWS: dict[str, Row] = {
    "wire-error-sentence": ("the error text of an HTTP or stream error", error_sentence),
    "wire-abort-text": ("the error text of an abort", abort_text),
}


def compare_requests(pi: list[dict[str, Any]], ours: list[dict[str, Any]]) -> None:
    for record in (*pi, *ours):
        record["headers"].pop("accept", None)  # the SDKs' */*; piagent asks for the stream
    where = _first_path(pi, ours)
    assert pi == ours, (f"requests differ at {where}:\n  pi:      {_short(pi)}\n"
                        f"  piagent: {_short(ours)}")


def apply_rows(name: str, pi: Out, ours: Out, rows: list[str],
               table: dict[str, Row]) -> Out:
    for row in rows:
        before = pi
        pi = table[row][1](pi, ours)
        assert pi != before, f"[{row}] does not change pi's output of {name}"
    return pi


def assert_documented(rows: list[str]) -> None:
    """Every row is a row of docs/reference.md's deliberate differences."""
    text = (PI16.parent.parent.parent / "docs" / "reference.md").read_text()
    for row in rows:
        assert any(line.startswith(f"| `{row}`") for line in text.splitlines()), \
            f"docs/reference.md has no row `{row}`"
