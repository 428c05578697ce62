"""The deliberate differences between the requests piagent sends and pi-ai 1.4.0's.

Each ``RequestRow`` says which runs (conversation, API) it applies to and turns pi's recorded
requests of such a run into what piagent sends; the test asserts that the row changes pi's
requests (the difference is real) and that the result is piagent's exactly. ``REQUEST_ROWS``
is keyed by the name of the row in docs/reference.md's deliberate differences.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Requests = list[dict[str, Any]]
Conversation = dict[str, Any]


@dataclass(frozen=True)
class RequestRow:
    reason: str
    when: Callable[[Conversation, str], bool]
    transform: Callable[[Requests, Conversation, str], Requests]


def applies(row: RequestRow, conv: Conversation, api: str) -> bool:
    return row.when(conv, api)


def _replace_text(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict):
        return {k: _replace_text(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_text(v, old, new) for v in value]
    return new if value == old else value


def _anthropic_path(requests: Requests, conv: Conversation, api: str) -> Requests:
    return [{**r, "path": r["path"].replace("?beta=true", "")} for r in requests]


def _error_type(requests: Requests, conv: Conversation, api: str) -> Requests:
    return [{**r, "body": _replace_text(r["body"], "boom", "RuntimeError: boom")}
            for r in requests]


def _no_store(requests: Requests, conv: Conversation, api: str) -> Requests:
    out = copy.deepcopy(requests)
    for r in out:
        r["body"].pop("store", None)
    return out


def _google_marker(requests: Requests, conv: Conversation, api: str) -> Requests:
    out = copy.deepcopy(requests)
    for r in out:
        r["body"]["contents"][-1]["parts"][-1]["x_marker"] = True
    return out


def _full_schema(requests: Requests, conv: Conversation, api: str) -> Requests:
    from .request_driver import DEFS_SCHEMA

    out = copy.deepcopy(requests)
    for r in out:
        for tool in r["body"].get("tools", []):
            tool["input_schema"] = {**copy.deepcopy(DEFS_SCHEMA), **tool["input_schema"]}
    return out


def _no_empty_tools(requests: Requests, conv: Conversation, api: str) -> Requests:
    out = copy.deepcopy(requests)
    for r in out:
        if r["body"].get("tools") == []:
            del r["body"]["tools"]
    return out


def _completed_calls(requests: Requests, conv: Conversation, api: str) -> Requests:
    out = copy.deepcopy(requests)
    for r in out:
        for item in r["body"].get("input", []):
            if item.get("type") == "function_call":
                item["status"] = "completed"
    return out


def _replays_calls(conv: Conversation, api: str) -> bool:
    return api == "openai-responses" and any(
        isinstance(step, dict) and "calls" in step for step in conv["script"][:-1])


REQUEST_ROWS: dict[str, RequestRow] = {
    "request-anthropic-path": RequestRow(
        "pi's Anthropic SDK posts to its beta client's /v1/messages?beta=true; piagent posts "
        "to the documented /v1/messages",
        lambda conv, api: api == "anthropic-messages", _anthropic_path),
    "request-tool-error-type": RequestRow(
        "a raised tool error names its type (the agent's deliberate difference, issue 14): "
        "the model reads it too",
        lambda conv, api: conv["name"] == "error-tool-result", _error_type),
    "request-local-server-compat": RequestRow(
        "a model outside the catalogue at a local address gets piagent's local-server compat "
        "(docs/providers.md): no store",
        lambda conv, api: conv.get("model") == "outside" and api == "openai-completions",
        _no_store),
    "request-anthropic-full-schema": RequestRow(
        "pi's Anthropic tools keep only type, properties and required of the schema, so a "
        "$ref into $defs (MCP servers, Pydantic) points nowhere; piagent keeps the rest",
        lambda conv, api: conv["name"] == "schema-with-defs" and api == "anthropic-messages",
        _full_schema),
    "request-google-payload-verbatim": RequestRow(
        "pi's Google SDK rebuilds the body from the fields it knows, so an on_payload edit "
        "of any other field never reaches the wire; piagent sends the hook's body as it is",
        lambda conv, api: conv.get("payload") == "mark" and api == "google-generative-ai",
        _google_marker),
    "request-no-empty-tools": RequestRow(
        "changed upstream in 1.5/1.6: pi-ai 1.4.0 sends \"tools\": [] to Chat Completions "
        "when a request without tools has tool history; pi-ai 1.5.2+ (and piagent) only with "
        "the compat flag requiresToolsWithToolHistory (vLLM 0.20+ answers 400 to it)",
        lambda conv, api: conv["name"] == "tools-to-none" and api == "openai-completions",
        _no_empty_tools),
    "request-responses-call-status": RequestRow(
        "changed upstream in 1.5/1.6: pi-ai 1.4.0 replays a Responses function_call without "
        "a status; pi-ai 1.6+ (and piagent) with \"status\": \"completed\", as OpenAI "
        "returned it (a resent history otherwise no longer matches, pi #12367)",
        _replays_calls, _completed_calls),
}
