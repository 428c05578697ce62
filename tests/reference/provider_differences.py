"""The deliberate differences between piagent's providers and pi-ai 1.4.0's, as transforms.

Each ``Row`` turns pi's normalised output of one recording into what piagent gives, and
checks on the way that the row's claim holds: pi shows the difference (the transform must
change pi's output), and piagent's side is right where it decides (the provider's own text
is in the error sentence; the usage, text, thinking and tool calls equal what
``tests/providers/recorded/reference.py``, a parser sharing no code with piagent, reads from
the recording). ``ROWS`` is keyed by the name docs/reference.md gives the row;
``RECORDINGS`` says which rows each recording shows (the test asserts exactly those).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.providers.recorded.reference import Expected, expect

Json = Any
Out = dict[str, Any]  # {"log": [events], "result": message}


@dataclass(frozen=True)
class Side:
    """What a transform may look at: the recording and piagent's normalised output."""

    meta: dict[str, Any]
    body: bytes
    ours: Out

    def expected(self) -> Expected:
        return expect(self.meta, self.body)


Transform = Callable[[Out, Side], Out]


VERSIONS = ("1.4.0", "1.6.1")
"""The pi-ai versions the recordings are replayed through."""


@dataclass(frozen=True)
class Row:
    """``only``: the one pi-ai version the row applies to ("1.4.0" for a change upstream in
    1.5/1.6, which piagent follows); None for a deliberate difference from every version."""

    reason: str
    transform: Transform
    only: str | None = None


def _messages(out: Out) -> list[dict[str, Any]]:
    """The final message and the copies carried by the terminal events."""
    found = [out["result"]]
    for event in out["log"]:
        for key in ("message", "error"):
            if isinstance(event.get(key), dict):
                found.append(event[key])
    return found


def _provider_text(pi_message: str) -> str:
    """The provider's own error text inside pi's message (status + raw JSON, or plain)."""
    start = pi_message.find("{")
    if start < 0:
        return pi_message
    try:
        payload = json.loads(pi_message[start:])
    except ValueError:
        return pi_message
    inner = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        return str(inner["message"])
    return pi_message


def error_sentence(pi: Out, side: Side) -> Out:
    """pi passes the status and the raw JSON body (or the bare message); piagent writes one
    sentence naming the provider, the status and the error code, with the provider's text."""
    out = copy.deepcopy(pi)
    ours = side.ours["result"].get("errorMessage")
    assert isinstance(ours, str), "piagent's message has no errorMessage"
    for message in _messages(out):
        theirs = message.get("errorMessage")
        assert isinstance(theirs, str) and theirs != ours, (theirs, ours)
        text = _provider_text(theirs)
        assert text in ours, f"the provider's text {text!r} is not in {ours!r}"
        if side.meta["status"] >= 300:
            assert str(side.meta["status"]) in ours, ours
            assert '{"' not in ours, ours
        message["errorMessage"] = ours
    return out


def _set_usage(pi: Out, usage: dict[str, int]) -> Out:
    out = copy.deepcopy(pi)
    for message in _messages(out):
        message["usage"].update({"input": usage["input"], "output": usage["output"],
                                 "cacheRead": usage["cache_read"],
                                 "cacheWrite": usage["cache_write"],
                                 "totalTokens": usage["total_tokens"]})
        if usage.get("reasoning"):
            message["usage"]["reasoning"] = usage["reasoning"]
    return out


def usage_from_wire(pi: Out, side: Side) -> Out:
    """Usage pi-ai leaves at zero (Groq's ``x_groq.usage``) or counts differently (xAI's
    reasoning tokens outside ``completion_tokens``): piagent's equals the reference parser's."""
    usage = side.expected().usage
    assert usage is not None, "the recording reports no usage"
    assert pi["result"]["usage"]["output"] != usage["output"], "pi already reads it so"
    return _set_usage(pi, usage)


def usage_from_error_chunk(pi: Out, side: Side) -> Out:
    """An error chunk that carries usage (OpenRouter): pi reports zero, piagent the usage
    (with the cost OpenRouter billed, when it reports one, as for any other usage)."""
    usage = None
    for line in side.body.decode().splitlines():
        if line.startswith("data:") and '"error"' in line:
            chunk = json.loads(line[5:])
            usage = chunk.get("usage")
    assert usage, "no usage in the error chunk"
    assert pi["result"]["usage"]["totalTokens"] == 0
    prompt, completion = int(usage["prompt_tokens"]), int(usage["completion_tokens"])
    reasoning = int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
    out = _set_usage(pi, {"input": prompt, "output": completion, "cache_read": 0,
                          "cache_write": 0, "total_tokens": prompt + completion,
                          "reasoning": reasoning})
    billed = _reported_cost(side.body)
    if billed is not None:
        for message in _messages(out):
            message["usage"]["cost"].update({"total": billed, "totalFromProvider": True})
    return out


def _reported_cost(body: bytes) -> float | None:
    """OpenRouter's billed cost in the recording's last usage that has one (pi-ai 1.6's rule:
    ``cost`` when not BYOK, with BYOK plus the upstream inference cost)."""
    found = None
    for line in body.decode().splitlines():
        if line.startswith("data:") and '"is_byok"' in line:
            chunk = json.loads(line[5:])
            usage = chunk.get("usage") or {}
            if isinstance(usage.get("cost"), (int, float)):
                found = usage
    if found is None:
        return None
    if found.get("is_byok") is False:
        return float(found["cost"])
    upstream = (found.get("cost_details") or {}).get("upstream_inference_cost")
    return float(found["cost"] + upstream) if isinstance(upstream, (int, float)) else None


def openrouter_billed_cost(pi: Out, side: Side) -> Out:
    """Changed upstream in 1.5/1.6: OpenRouter reports what it billed (``usage.cost``); pi-ai
    1.4.0 keeps the catalogue's estimate as ``cost.total``, pi-ai 1.6 and piagent the billed
    amount, with ``cost.totalFromProvider: true``."""
    billed = _reported_cost(side.body)
    assert billed is not None, "the recording reports no billed cost"
    out = copy.deepcopy(pi)
    for message in _messages(out):
        message["usage"]["cost"].update({"total": billed, "totalFromProvider": True})
    return out


def openrouter_native_reason(pi: Out, side: Side) -> Out:
    """Changed upstream in 1.5/1.6: OpenRouter's ``native_finish_reason``, when it is not
    the ``finish_reason``, is kept in ``rawStopReason`` as ``"<finish>.<native>"``
    (``"stop.completed"``); pi-ai 1.4.0 keeps the finish reason alone."""
    natives = set(re.findall(rb'"native_finish_reason":\s*"([^"]+)"', side.body))
    out = copy.deepcopy(pi)
    for message in _messages(out):
        raw = message.get("rawStopReason")
        assert isinstance(raw, str) and "." not in raw, raw
        native = side.ours["result"]["rawStopReason"].split(".", 1)[1]
        assert native.encode() in natives, (native, natives)
        message["rawStopReason"] = f"{raw}.{native}"
    return out


def done_without_finish_reason(pi: Out, side: Side) -> Out:
    """``data: [DONE]`` with no ``finish_reason`` (Snowflake Cortex never sends one): pi fails
    the message ("Stream ended without finish_reason"), piagent ends it normally."""
    out = copy.deepcopy(pi)
    assert b"[DONE]" in side.body and b'"finish_reason":"' not in side.body.replace(b" ", b"")
    last = out["log"][-1]
    assert last["type"] == "error" and last["error"]["errorMessage"] == (
        "Stream ended without finish_reason"), last
    calls = any(b["type"] == "toolCall" for b in last["error"]["content"])
    reason = "toolUse" if calls else "stop"
    for message in _messages(out):
        message.pop("errorMessage")
        message["stopReason"] = reason
    out["log"][-1] = {"kind": "event", "message": last["error"], "reason": reason,
                      "type": "done"}
    return out


def _streamed(out: Out) -> dict[int, str]:
    merged: dict[int, str] = {}
    for event in out["log"]:
        if event["type"] in ("text_delta", "thinking_delta"):
            merged[event["contentIndex"]] = merged.get(event["contentIndex"], "") + event["delta"]
    return merged


def deltas_add_up(pi: Out, side: Side) -> Out:
    """pi-ai's deltas of a block do not add up to its final content (Responses: a "\\n\\n"
    after every reasoning summary part that the final block lacks; no delta for the text an
    ``output_item.done`` carries beyond the streamed deltas); piagent's always do."""
    out = copy.deepcopy(pi)
    ends = {e["contentIndex"]: e["content"] for e in out["log"]
            if e["type"] in ("text_end", "thinking_end")}
    assert _streamed(side.ours) == {i: ends[i] for i in _streamed(side.ours)}
    changed = False
    for event in out["log"]:
        if event["type"] in ("text_delta", "thinking_delta"):
            changed |= event["delta"] != ends[event["contentIndex"]]
            event["delta"] = ends[event["contentIndex"]]
    assert changed, "pi's deltas already add up"
    return out


def _check_content(ours: Out, side: Side) -> None:
    """piagent's final message equals what the reference parser reads from the recording."""
    expected, message = side.expected(), ours["result"]
    blocks = message["content"]
    assert "".join(b.get("text", "") for b in blocks if b["type"] == "text") == expected.text
    assert "".join(b.get("thinking", "") for b in blocks
                   if b["type"] == "thinking") == expected.thinking
    calls = [(c["name"], c["arguments"]) for c in blocks if c["type"] == "toolCall"]
    assert calls == [(name, args) for _, name, args in expected.tool_calls]
    assert message["stopReason"] == expected.stop_reason


def mistral_typed_parts(pi: Out, side: Side) -> Out:
    """Mistral's typed content parts (``[{"type": "thinking", ...}]``): pi-ai streams the part
    objects as text deltas and its text reads "[object Object]…"; piagent reads the thinking
    and text parts as thinking and text."""
    text = "".join(b.get("text", "") for b in pi["result"]["content"] if b["type"] == "text")
    assert "[object Object]" in text, text[:80]
    _check_content(side.ours, side)
    return copy.deepcopy(side.ours)


def gemini_streamed_arguments(pi: Out, side: Side) -> Out:
    """Gemini's streamed function-call arguments (``partialArgs``, ``willContinue``): pi-ai
    1.4.0 makes one call per part, most without a name and all with empty arguments;
    piagent assembles each call with its arguments."""
    calls = [b for b in pi["result"]["content"] if b["type"] == "toolCall"]
    assert any(not c["name"] or not c["arguments"] for c in calls), calls
    _check_content(side.ours, side)
    return copy.deepcopy(side.ours)


def gemini_empty_text(pi: Out, side: Side) -> Out:
    """An empty Gemini text part (``{"text": ""}``, the last chunk of many tool-call
    answers): pi-ai keeps it as an empty text block (``text_start``, ``text_end`` and
    ``{"type": "text", "text": ""}`` after the calls); piagent adds no block for it (it
    carries nothing, and replayed to an API that refuses empty text blocks, such as
    Anthropic's, it would fail the next request)."""
    out = copy.deepcopy(pi)
    empty = sorted(i for i, b in enumerate(out["result"]["content"])
                   if b["type"] == "text" and b["text"] == "" and not b.get("textSignature"))
    assert empty, "pi has no empty text block"

    def shift(index: int) -> int:
        return index - sum(1 for e in empty if e < index)

    log = []
    for event in out["log"]:
        if event["type"].startswith("text_") and event.get("contentIndex") in empty:
            continue
        if "contentIndex" in event:
            event["contentIndex"] = shift(event["contentIndex"])
        log.append(event)
    out["log"] = log
    for message in _messages(out):
        message["content"] = [b for i, b in enumerate(message["content"]) if i not in empty]
    return out


def responses_end_at_completed(pi: Out, side: Side) -> Out:
    """A Responses body holding several responses (a capture of consecutive calls): pi-ai
    reads on after ``response.completed`` and merges the later responses into one message;
    piagent ends the message at the first terminal event, as the API defines it."""
    assert side.body.count(b"response.completed") > 1
    ours, theirs = side.ours["result"]["content"], pi["result"]["content"]
    assert len(theirs) > len(ours) and theirs[: len(ours)] == ours, "not a prefix of pi's"
    assert pi["log"][: len(side.ours["log"]) - 1] == side.ours["log"][:-1]
    return copy.deepcopy(side.ours)


ROWS: dict[str, Row] = {
    "provider-gemini-empty-text": Row(gemini_empty_text.__doc__ or "", gemini_empty_text),
    "provider-responses-end-at-completed": Row(responses_end_at_completed.__doc__ or "",
                                               responses_end_at_completed),
    "provider-error-sentence": Row(error_sentence.__doc__ or "", error_sentence),
    "provider-usage-from-wire": Row(usage_from_wire.__doc__ or "", usage_from_wire),
    "provider-usage-from-error-chunk": Row(usage_from_error_chunk.__doc__ or "",
                                           usage_from_error_chunk),
    "provider-done-without-finish-reason": Row(done_without_finish_reason.__doc__ or "",
                                               done_without_finish_reason),
    "provider-deltas-add-up": Row(deltas_add_up.__doc__ or "", deltas_add_up),
    "provider-mistral-typed-parts": Row(mistral_typed_parts.__doc__ or "", mistral_typed_parts),
    "provider-openrouter-billed-cost": Row(openrouter_billed_cost.__doc__ or "",
                                           openrouter_billed_cost, only="1.4.0"),
    "provider-gemini-streamed-arguments": Row(gemini_streamed_arguments.__doc__ or "",
                                              gemini_streamed_arguments),
    "provider-openrouter-native-reason": Row(openrouter_native_reason.__doc__ or "",
                                             openrouter_native_reason, only="1.4.0"),
}

_ERRORS = ["anthropic-http-400", "anthropic-http-404", "completions-groq-http-400-tool-use-failed",
           "completions-groq-http-404", "completions-openai-http-400-developer-role",
           "completions-openai-http-404", "google-http-429-quota", "responses-deepseek-http-400",
           "responses-openai-http-400", "responses-openai-http-400-temperature",
           "responses-openai-http-429-quota", "responses-openai-error-event-quota",
           "completions-groq-event-error-tool-use-failed", "completions-groq-event-error-with-text"]

RECORDINGS: dict[str, list[str]] = {
    **{name: ["provider-error-sentence"] for name in _ERRORS},
    "completions-openrouter-error-chunk-with-choices": [
        "provider-error-sentence", "provider-usage-from-error-chunk"],
    **{f"completions-openrouter-{name}": ["provider-openrouter-billed-cost"] for name in (
        "streaming-reasoning", "cache-write")},
    **{f"completions-openrouter-{name}": ["provider-openrouter-billed-cost",
                                          "provider-openrouter-native-reason"]
       for name in ("native-options", "web-search-usage", "reasoning-details")},
    "completions-groq-thinking-long": ["provider-usage-from-wire"],
    "completions-groq-compound-web-search": ["provider-usage-from-wire"],
    "completions-xai-text": ["provider-usage-from-wire"],
    "completions-xai-tool-call": ["provider-usage-from-wire"],
    "completions-xai-compatible-text": ["provider-usage-from-wire"],
    "completions-xai-compatible-tool-call": ["provider-usage-from-wire"],
    "completions-snowflake-no-finish-reason": ["provider-done-without-finish-reason"],
    "completions-snowflake-thinking": ["provider-done-without-finish-reason"],
    "completions-mistral-magistral-reasoning": ["provider-mistral-typed-parts"],
    "completions-mistral-magistral-typed-parts": ["provider-mistral-typed-parts"],
    "google-tool-call-arguments": ["provider-gemini-streamed-arguments"],
    "google-vertex-tool-call-nested": ["provider-gemini-streamed-arguments"],
    "google-tool-call-no-args": ["provider-gemini-empty-text",
                                 "provider-gemini-streamed-arguments"],
    "google-tool-call": ["provider-gemini-empty-text"],
    "google-tool-call-gemini3": ["provider-gemini-empty-text"],
    "google-tool-call-thought-signature": ["provider-gemini-empty-text"],
    "responses-github-copilot-id-rotation": ["provider-deltas-add-up"],
    "responses-openai-phase": ["provider-deltas-add-up"],
    "responses-openai-reasoning-encrypted": ["provider-deltas-add-up",
                                             "provider-responses-end-at-completed"],
    "responses-openai-reasoning-summary": ["provider-deltas-add-up"],
    "responses-xai-reasoning": ["provider-deltas-add-up"],
    "responses-xai-text": ["provider-deltas-add-up"],
}


_GENERATED_ID = re.compile(r"^(.*)_\d{10,}_\d+$")


def normalise(raw: Json, api: str) -> Json:
    """The comparable form of one side's output (see the test module)."""
    if "driverError" in raw:
        return raw
    log: list[dict[str, Any]] = []
    for event in raw["events"]:
        entry = {"kind": "event", **_clean(event, api)}  # "kind": for the difference's labels
        previous = log[-1] if log else None
        if (entry["type"].endswith("_delta") and previous is not None
                and previous["type"] == entry["type"]
                and previous.get("contentIndex") == entry.get("contentIndex")
                and isinstance(entry.get("delta"), str) and isinstance(previous["delta"], str)):
            previous["delta"] += entry["delta"]
            continue
        log.append(entry)
    return {"log": log, "result": _clean(raw["result"], api)}


# measured on each side (both time the response)
_ASSISTANT_DROPPED = frozenset(("durationMs",))
# usage counters pi-ai writes as 0 when the provider reports none; piagent leaves them out
_USAGE_ZERO_DROPPED = frozenset(("cacheWrite1h", "reasoning"))


def _clean(value: Json, api: str) -> Json:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        assistant = value.get("role") == "assistant"
        for key, item in value.items():
            if key in ("timestamp", "partial") or (assistant and key in _ASSISTANT_DROPPED):
                continue
            if key in _USAGE_ZERO_DROPPED and item == 0 and "cacheRead" in value:
                continue  # usage.cacheWrite1h, usage.reasoning: 0 is "not reported"
            if assistant and key == "responseId" and item == "":
                continue  # pi keeps an empty chunk id (Snowflake's) as the id; piagent none
            if key == "totalFromProvider" and item is False:
                continue  # pi-ai 1.6 writes the default; piagent's JSON only a true one
            if (key == "id" and value.get("type") == "toolCall"
                    and api == "google-generative-ai" and isinstance(item, str)):
                match = _GENERATED_ID.match(item)  # made up on both sides: name_<ms>_<n>
                item = f"{match.group(1)}_<generated>" if match else item
            out[key] = _clean(item, api)
        return out
    if isinstance(value, list):
        return [_clean(v, api) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def rows_for(name: str, version: str) -> list[str]:
    """The rows recording ``name`` shows against pi-ai ``version``."""
    return [row for row in RECORDINGS.get(name, []) if ROWS[row].only in (None, version)]
