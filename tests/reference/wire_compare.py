"""The two sides of the wire differentials (test_wire_*.py) and their comparison.

A case is a dict: ``model`` (a piagent ``Model`` at the wire server), ``messages``,
``script`` (the server's replies, each as the test's ``answer`` encodes it), ``options``
(``StreamOptions`` keywords among ``PI_OPTION``), ``abort`` (abort at the first text delta),
``rows`` (the declared differences of the output, keys of ``WIRE_ROWS``) and
``request_rows`` (of the requests, keys of ``REQUEST_ROWS``). ``run_pi`` streams every case
through pi-ai 1.6.1's adapter (one node process, ``pi_stream_driver.mjs``); ``run_ours`` one
through piagent's ``stream_simple``; ``assert_same`` compares the recorded requests and the
normalised outputs through the case's rows.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piagent import AbortController, Context, StreamOptions, message_to_dict
from piagent.events import assistant_event_to_dict
from piagent.models import Model
from piagent.providers import stream_simple
from tests.conftest import WAIT

from .conftest import DRIVER_TIMEOUT_S, PI16, node_command
from .provider_differences import Side, deltas_add_up, error_sentence, normalise
from .ref_normalise import _first_path, _short, first_difference

Case = dict[str, Any]
PI_OPTION = {"temperature": "temperature", "max_tokens": "maxTokens", "session_id": "sessionId",
             "reasoning": "reasoning", "env": "env", "cache_retention": "cacheRetention"}


def pi_model(model: Model) -> dict[str, Any]:
    """pi's JSON of ``model``."""
    out: dict[str, Any] = {
        "id": model.id, "name": model.name or model.id, "api": model.api,
        "provider": model.provider, "baseUrl": model.base_url, "reasoning": model.reasoning,
        "input": list(model.input),
        "cost": {"input": model.cost.input, "output": model.cost.output,
                 "cacheRead": model.cost.cache_read, "cacheWrite": model.cost.cache_write},
        "contextWindow": model.context_window, "maxTokens": model.max_tokens}
    if model.compat is not None:
        out["compat"] = dict(model.compat)
    if model.thinking_level_map is not None:
        out["thinkingLevelMap"] = dict(model.thinking_level_map)
    return out


def run_pi(cases: dict[str, Case], key: str, folder: Path) -> dict[str, Any]:
    """pi's output of every case, by name (``{"events", "result"}`` or ``{"driverError"}``)."""
    jobs = []
    for name, case in cases.items():
        options = {PI_OPTION[k]: v for k, v in case["options"].items()}
        jobs.append({"key": name, "model": pi_model(case["model"]),
                     "context": {"messages": [message_to_dict(m) for m in case["messages"]]},
                     "options": {"apiKey": key, **options}, "abortAtText": case["abort"]})
    path = folder / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}))
    done = subprocess.run([*node_command(PI16, "pi_stream_driver.mjs"), str(path)], cwd=PI16,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    assert done.returncode == 0, f"pi_stream_driver.mjs failed:\n{done.stderr[-4000:]}"
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def run_ours(case: Case, key: str) -> dict[str, Any]:
    controller = AbortController()
    options = StreamOptions(api_key=key, max_retries=0, max_retry_delay_ms=1,
                            signal=controller.signal, **case["options"])
    stream = stream_simple(case["model"], Context(list(case["messages"])), options)
    events = []
    for event in stream:
        events.append(assistant_event_to_dict(event, partial=False))
        if case["abort"] and event.type == "text_delta":
            controller.abort()
    return {"events": events, "result": message_to_dict(stream.result(WAIT))}


def rounded(value: Any) -> Any:
    """Floats to 12 significant digits (pi prices a token as ``(price / 1e6) * tokens``,
    piagent as ``price * tokens / 1e6``: the last bit may differ); pi-ai 1.6's
    ``totalFromProvider: false`` dropped."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()
                if not (k == "totalFromProvider" and v is False)}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def assert_same(api: str, case: Case, status: int, pi: dict[str, Any], ours: dict[str, Any],
                pi_requests: list[Any], our_requests: list[Any]) -> None:
    """The requests identical; pi's normalised output through the case's rows equal to
    piagent's (``status``: the HTTP status the case's error reply has, else 200)."""
    assert "driverError" not in pi, pi["driverError"]
    for row in case.get("request_rows", ()):
        changed = REQUEST_ROWS[row](copy.deepcopy(pi_requests), our_requests)
        assert changed != pi_requests, f"row {row} does not change pi's requests"
        pi_requests = changed
    assert our_requests == pi_requests, (
        f"requests differ at {_first_path(pi_requests, our_requests)}:\n"
        f"  pi:      {_short(pi_requests)}\n  piagent: {_short(our_requests)}")
    pi_out = rounded(normalise(pi, api))
    py_out = rounded(normalise(ours, api))
    side = Side({"status": status}, b"", py_out)
    for row in case["rows"]:
        changed = WIRE_ROWS[row](copy.deepcopy(pi_out), side)
        assert changed != pi_out, f"row {row} does not change pi's output"
        pi_out = changed
    assert py_out == pi_out, first_difference(pi_out, py_out)


def abort_message(pi: Any, side: Side) -> Any:
    """An abort mid-stream: pi-ai's message is what its transport said when the abort cut the
    stream (Azure: "OpenAI Responses stream ended before a terminal response event", Mistral:
    "This operation was aborted"); piagent's is "Request was aborted", as on every API. Both
    keep the partial content and ``aborted``."""
    out = copy.deepcopy(pi)
    for message in [out["result"], *(e["error"] for e in out["log"] if "error" in e)]:
        assert message["stopReason"] == "aborted"
        message["errorMessage"] = "Request was aborted"
    return out


WIRE_ROWS: dict[str, Callable[[Any, Side], Any]] = {
    "provider-error-sentence": error_sentence,
    "provider-deltas-add-up": deltas_add_up,
    "wire-abort-message": abort_message,
}
"""The declared differences (docs/reference.md), each a transform of pi's normalised output
into piagent's that checks its claim on the way."""


REQUEST_ROWS: dict[str, Callable[[list[Any], list[Any]], list[Any]]] = {}
"""The declared differences of the requests: transforms of pi's recorded requests (none
since issue 46's Responses replay ids and foreign thinking were adopted)."""


def assert_rows_documented(used: set[str]) -> None:
    text = (Path(__file__).parents[2] / "docs" / "reference.md").read_text(encoding="utf-8")
    for name in used:
        assert (name in WIRE_ROWS or name in REQUEST_ROWS) and f"`{name}`" in text, name
