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


VERSIONS = ("1.4.0", "1.6.1")
"""The pi-ai versions whose requests are compared."""


@dataclass(frozen=True)
class RequestRow:
    """``only``: the one pi-ai version the row applies to ("1.4.0" for a change upstream in
    1.5/1.6, which piagent follows); None for a deliberate difference from every version."""

    reason: str
    when: Callable[[Conversation, str], bool]
    transform: Callable[[Requests, Conversation, str], Requests]
    only: str | None = None


def applies(row: RequestRow, conv: Conversation, api: str, version: str) -> bool:
    return row.only in (None, version) and row.when(conv, api)


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


_OLD_MISSING = "city: must have required properties city"  # pi-ai 1.4.0's validator
_NEW_MISSING = "city: missing"  # pi-ai 1.6's


def _piagent_missing_text() -> str:
    """How piagent's validate_tool_arguments names a missing property now."""
    from piagent.errors import ToolArgumentError
    from piagent.tools import AgentTool, validate_tool_arguments

    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"]}
    tool = AgentTool(name="weather", description="", parameters=schema,
                     execute=lambda *args: None)
    try:
        validate_tool_arguments(tool, {"town": 3})
    except ToolArgumentError as error:
        return _NEW_MISSING if _NEW_MISSING in str(error) else _OLD_MISSING
    raise AssertionError("validate_tool_arguments took a missing required property")


def _validation_text(requests: Requests, conv: Conversation, api: str) -> Requests:
    old, new = ((_OLD_MISSING, _NEW_MISSING) if _piagent_missing_text() == _NEW_MISSING
                else (_NEW_MISSING, _OLD_MISSING))

    def edit(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: edit(v) for k, v in value.items()}
        if isinstance(value, list):
            return [edit(v) for v in value]
        return value.replace(old, new) if isinstance(value, str) else value

    return [{**r, "body": edit(r["body"])} for r in requests]


def _session_header(requests: Requests, conv: Conversation, api: str) -> Requests:
    out = copy.deepcopy(requests)
    for r in out:
        r["headers"] = {("session-id" if k == "session_id" else k): v
                        for k, v in r["headers"].items()}
    return out


def _cache_key_mode(requests: Requests, conv: Conversation, api: str) -> Requests:
    mode = conv["compat"]["promptCacheKeyMode"]
    out = copy.deepcopy(requests)
    for r in out:
        if mode == "disabled":
            r["body"].pop("prompt_cache_key", None)
        else:  # "enabled": the session id, its first 64 code points
            r["body"]["prompt_cache_key"] = conv["session"][:64]
    return out


def _replays_calls(conv: Conversation, api: str) -> bool:
    appended = (block for step in conv["steps"] for message in step.get("append", ())
                for block in message.get("content", ()) if message["role"] == "assistant")
    return api == "openai-responses" and (any(
        isinstance(step, dict) and "calls" in step for step in conv["script"][:-1])
        or any(block.get("type") == "toolCall" for block in appended))


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
        _full_schema, only="1.4.0"),
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
        _no_empty_tools, only="1.4.0"),
    "request-validation-text": RequestRow(
        "changed upstream in 1.5/1.6: the text a model reads when its arguments fail "
        "validation names a missing property \"city: missing\" in pi 1.6 (pi-agent-core's "
        "own validator), \"city: must have required properties city\" in 1.4.0. piagent's "
        "validator (piagent/tools) follows one of them: the row applies to the other",
        lambda conv, api: conv["name"] == "bad-arguments", _validation_text,
        only="1.4.0" if _piagent_missing_text() == _NEW_MISSING else "1.6.1"),
    "request-responses-session-header": RequestRow(
        "changed upstream in 1.5/1.6: Responses sends the session id in the header "
        "session-id (pi-ai 1.6; 1.4.0: session_id, which some proxies drop)",
        lambda conv, api: api == "openai-responses" and bool(conv.get("session"))
        and conv.get("retention") != "none", _session_header, only="1.4.0"),
    "request-prompt-cache-key-mode": RequestRow(
        "changed upstream in 1.5/1.6: the compat flag promptCacheKeyMode (pi-ai 1.6): "
        "\"enabled\" sends prompt_cache_key to any Chat Completions server, \"disabled\" "
        "to none (Responses included); pi-ai 1.4.0 knows no such flag",
        lambda conv, api: "promptCacheKeyMode" in conv.get("compat", {}) and (
            (api, conv["compat"]["promptCacheKeyMode"]) in (
                ("openai-completions", "enabled"), ("openai-responses", "disabled"))),
        _cache_key_mode, only="1.4.0"),
    "request-responses-call-status": RequestRow(
        "changed upstream in 1.5/1.6: pi-ai 1.4.0 replays a Responses function_call without "
        "a status; pi-ai 1.6+ (and piagent) with \"status\": \"completed\", as OpenAI "
        "returned it (a resent history otherwise no longer matches, pi #12367)",
        _replays_calls, _completed_calls, only="1.4.0"),
}
