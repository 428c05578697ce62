"""What a recording says, read straight from its bytes (shares nothing with piagent).

Written from the wire-format descriptions in ``/work/shared/design/providers.md`` (§3–§6)
and the providers' API references, not from the adapters: its own SSE line parser, its own
JSON handling, its own mapping of stop reasons and usage. ``expect(meta, body)`` returns an
``Expected``: the text, thinking, signatures, tool calls (id, name, parsed arguments),
usage numbers and stop reason a correct adapter ends with, or the provider's own error text.

Normalisation (the contract of providers.md §1.2): ``usage.input`` = prompt tokens that were
neither read from nor written to the cache; ``output`` includes reasoning tokens; totals are
the sum of the four counts unless the API reports one (Responses, Gemini).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Expected:
    text: str = ""
    thinking: str = ""
    tool_calls: list[tuple[str | None, str, Any]] = field(default_factory=list)
    """(id or None when the wire has none, name, parsed arguments), in order."""
    stop_reason: str = "stop"
    usage: dict[str, int] | None = None
    """input, output, cache_read, cache_write, total_tokens; None: the wire reports none."""
    error: list[str] = field(default_factory=list)
    """Substrings the error message must contain (provider's own text, HTTP status)."""
    signatures: list[str] = field(default_factory=list)
    """Thinking signatures (Anthropic ``signature``/redacted ``data``, Gemini call signatures)."""


@dataclass
class SSEEvent:
    event: str
    data: str


def parse_sse(body: bytes) -> tuple[list[SSEEvent], str]:
    """The events of an SSE body (WHATWG rules), and any non-SSE text left at the end."""
    text = body.decode("utf-8")
    events: list[SSEEvent] = []
    kind, data, junk = "", [], []
    for line in re.split(r"\r\n|\r|\n", text):
        if line == "":
            if data:
                events.append(SSEEvent(kind or "message", "\n".join(data)))
            kind, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value
        elif name in ("id", "retry"):
            pass
        else:
            junk.append(line)
    if data:
        events.append(SSEEvent(kind or "message", "\n".join(data)))
    return events, "\n".join(junk)


def _json(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _args(raw: Any) -> Any:
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    value = json.loads(raw)
    return value


def _error_text(error: Any) -> list[str]:
    if isinstance(error, dict):
        inner = error.get("error") if isinstance(error.get("error"), dict) else error
        message = inner.get("message")
        if message:
            return [str(message)]
        return [json.dumps(inner)[:60]]
    return [str(error)]


def expect(meta: dict[str, Any], body: bytes) -> Expected:
    if meta["status"] >= 300:
        return _http_error(meta, body)
    return {"openai-completions": _completions, "openai-responses": _responses,
            "anthropic-messages": _anthropic,
            "google-generative-ai": _google}[meta["api"]](body)


def _http_error(meta: dict[str, Any], body: bytes) -> Expected:
    payload = _json(body.decode("utf-8"))
    if isinstance(payload, list) and payload:
        payload = payload[0]
    texts = _error_text(payload.get("error", payload)) if isinstance(payload, dict) else []
    return Expected(stop_reason="error", error=[str(meta["status"]), *texts], usage=None)


# --- OpenAI Chat Completions (providers.md §3.2–3.4) ----------------------------------------

_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_text")
_COMPLETION_STOPS = {"stop": "stop", "end": "stop", "length": "length",
                     "tool_calls": "toolUse", "function_call": "toolUse"}


def _completions(body: bytes) -> Expected:
    events, _ = parse_sse(body)
    out = Expected()
    calls: list[dict[str, Any]] = []
    by_index: dict[Any, dict[str, Any]] = {}
    finish: str | None = None
    done = False
    usage: dict[str, Any] | None = None
    for event in events:
        if event.data.strip() == "[DONE]":
            done = True
            break
        chunk = _json(event.data)
        if event.event == "error":
            out.error = _error_text(chunk if chunk is not None else event.data)
            break
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error") is not None or chunk.get("object") == "error":
            out.error = _error_text(chunk.get("error") or chunk)
            break
        chunk_usage = chunk.get("usage") or (chunk.get("x_groq") or {}).get("usage")
        choices = chunk.get("choices") or []
        if choices:
            choice = choices[0]
            chunk_usage = chunk_usage or choice.get("usage")
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str):
                out.text += content
            elif isinstance(content, list):  # Mistral typed parts
                for part in content:
                    if part.get("type") == "text":
                        out.text += part.get("text") or ""
                    elif part.get("type") == "thinking":
                        for inner in part.get("thinking") or []:
                            out.thinking += inner.get("text") or ""
            for key in _REASONING_KEYS:
                if delta.get(key):
                    out.thinking += delta[key]
                    break
            for tool in delta.get("tool_calls") or []:
                key = tool.get("index", tool.get("id"))
                call = by_index.get(key)
                if call is None or (tool.get("id") and call["id"] and tool["id"] != call["id"]):
                    call = {"id": None, "name": "", "args": ""}
                    by_index[key] = call
                    calls.append(call)
                call["id"] = call["id"] or tool.get("id")
                function = tool.get("function") or {}
                call["name"] = call["name"] or function.get("name") or ""
                args = function.get("arguments")
                call["args"] += args if isinstance(args, str) else json.dumps(args or {})
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
        if chunk_usage:
            usage = chunk_usage
    out.tool_calls = [(c["id"], c["name"], _args(c["args"])) for c in calls]
    if usage:
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        prompt_details = usage.get("prompt_tokens_details") or {}
        reasoning = int((usage.get("completion_tokens_details") or {})
                        .get("reasoning_tokens") or 0)
        cached = int(prompt_details.get("cached_tokens") or usage.get("prompt_cache_hit_tokens")
                     or usage.get("cached_tokens") or 0)
        written = int(prompt_details.get("cache_write_tokens") or 0)
        if reasoning and usage.get("total_tokens") == prompt + completion + reasoning:
            completion += reasoning  # xAI: reasoning billed outside completion_tokens
        out.usage = {"input": max(prompt - cached - written, 0), "output": completion,
                     "cache_read": cached, "cache_write": written}
    if out.error:
        out.stop_reason = "error"
    elif finish is None:
        out.stop_reason = ("toolUse" if calls else "stop") if done else "error"
        if not done:
            out.error = ["ended"]
    else:
        out.stop_reason = _COMPLETION_STOPS.get(finish, "error")
        if out.stop_reason == "stop" and calls:
            out.stop_reason = "toolUse"
        if out.stop_reason == "error":
            out.error = [finish]
    return _total(out)


def _total(out: Expected, total: int | None = None) -> Expected:
    if out.usage is not None:
        out.usage["total_tokens"] = total if total is not None else sum(out.usage.values())
    return out


# --- OpenAI Responses (providers.md §4.2–4.3) ----------------------------------------------


def _responses(body: bytes) -> Expected:
    events, _ = parse_sse(body)
    out = Expected()
    items: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    terminal: dict[str, Any] | None = None
    for event in events:
        data = _json(event.data)
        if not isinstance(data, dict):
            continue
        kind = data.get("type") or event.event
        position = data.get("output_index")
        if kind == "response.output_item.added":
            items[position] = {"added": data.get("item") or {}, "deltas": {}, "args": None,
                               "done": None, "text": ""}
            order.append(position)
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            if position in items:
                items[position]["text"] += data.get("delta") or ""
        elif kind in ("response.reasoning_summary_text.delta",
                      "response.reasoning_text.delta"):
            if position in items:
                index = (kind, data.get("summary_index", data.get("content_index", 0)))
                parts = items[position]["deltas"]
                parts[index] = parts.get(index, "") + (data.get("delta") or "")
        elif kind == "response.function_call_arguments.done":
            if position in items:
                items[position]["args"] = data.get("arguments")
        elif kind == "response.output_item.done":
            if position in items:
                items[position]["done"] = data.get("item") or {}
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            terminal = data.get("response") or {}
            break
        elif kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else data
            out.error = [str(error.get("message"))]
            if error.get("code"):
                out.error.append(str(error["code"]))
            break
    thinking: list[str] = []
    for position in order:
        item = items[position]
        final = item["done"] or item["added"]
        kind = final.get("type")
        if kind == "message":
            streamed = item["text"]
            whole = "".join(p.get("text") or p.get("refusal") or ""
                            for p in final.get("content") or [])
            out.text += whole if item["done"] is not None and whole else streamed
        elif kind == "reasoning":
            summary = [s.get("text", "") for s in final.get("summary") or []]
            content = [c.get("text", "") for c in final.get("content") or []]
            if item["done"] is None or not (summary or content):
                streamed = [v for k, v in sorted(item["deltas"].items())]
                thinking.append("\n\n".join(streamed))
            else:
                thinking.append("\n\n".join(summary) if summary else "\n\n".join(content))
        elif kind == "function_call":
            raw = item["args"] if item["args"] is not None else final.get("arguments")
            out.tool_calls.append((f"{final.get('call_id')}|{final.get('id')}",
                                   final.get("name") or "", _args(raw)))
    out.thinking = "".join(thinking)
    if terminal is not None and terminal.get("usage"):
        usage = terminal["usage"]
        details = usage.get("input_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0)
        written = int(details.get("cache_write_tokens") or 0)
        out.usage = {"input": max(int(usage.get("input_tokens") or 0) - cached - written, 0),
                     "output": int(usage.get("output_tokens") or 0), "cache_read": cached,
                     "cache_write": written}
        _total(out, usage.get("total_tokens"))
    if out.error:
        out.stop_reason = "error"
        return out
    if terminal is None:
        return Expected(out.text, out.thinking, out.tool_calls, "error", out.usage, ["ended"])
    status = terminal.get("status")
    if status == "completed":
        out.stop_reason = "toolUse" if out.tool_calls else "stop"
    elif status == "incomplete":
        reason = (terminal.get("incomplete_details") or {}).get("reason")
        out.stop_reason = "length" if reason == "max_output_tokens" else "error"
        if out.stop_reason == "error":
            out.error = [str(reason)]
    else:
        out.stop_reason = "error"
        error = terminal.get("error") or {}
        out.error = [str(error.get("message") or status)]
    return out


# --- Anthropic Messages (providers.md §5.2) ------------------------------------------------

_ANTHROPIC_STOPS = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
                    "max_tokens": "length", "tool_use": "toolUse"}


def _anthropic(body: bytes) -> Expected:
    events, _ = parse_sse(body)
    out = Expected()
    blocks: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    usage: dict[str, int] = {}
    stop: str | None = None
    stopped = False
    for event in events:
        data = _json(event.data)
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if kind == "message_start":
            usage.update({k: v for k, v in ((data.get("message") or {}).get("usage") or {})
                          .items() if isinstance(v, int)})
        elif kind == "content_block_start":
            index = data["index"]
            blocks[index] = {"block": data.get("content_block") or {}, "text": "", "json": "",
                             "signature": ""}
            order.append(index)
        elif kind == "content_block_delta":
            block = blocks.get(data.get("index"))
            delta = data.get("delta") or {}
            if block is None:
                continue
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] += delta.get("text") or ""
            elif dtype == "thinking_delta":
                block["text"] += delta.get("thinking") or ""
            elif dtype == "signature_delta":
                block["signature"] += delta.get("signature") or ""
            elif dtype == "input_json_delta":
                block["json"] += delta.get("partial_json") or ""
        elif kind == "message_delta":
            usage.update({k: v for k, v in (data.get("usage") or {}).items()
                          if isinstance(v, int)})
            stop = (data.get("delta") or {}).get("stop_reason") or stop
        elif kind == "message_stop":
            stopped = True
        elif kind == "error" or event.event == "error":
            out.error = _error_text(data.get("error") or data)
            break
    for index in order:
        block = blocks[index]
        btype = block["block"].get("type")
        if btype == "text":
            out.text += block["text"] or block["block"].get("text") or ""
        elif btype == "thinking":
            out.thinking += block["text"] or block["block"].get("thinking") or ""
            out.signatures.append(block["signature"] or block["block"].get("signature") or "")
        elif btype == "redacted_thinking":
            out.thinking += "[Reasoning redacted]"
            out.signatures.append(block["block"].get("data") or "")
        elif btype == "tool_use":
            raw = block["json"] or block["block"].get("input") or {}
            out.tool_calls.append((block["block"].get("id"), block["block"].get("name") or "",
                                   _args(raw)))
    if usage:
        out.usage = {"input": usage.get("input_tokens", 0),
                     "output": usage.get("output_tokens", 0),
                     "cache_read": usage.get("cache_read_input_tokens", 0),
                     "cache_write": usage.get("cache_creation_input_tokens", 0)}
        _total(out)
    if out.error:
        out.stop_reason = "error"
    elif not stopped or stop is None:
        out.stop_reason, out.error = "error", ["ended"]
    else:
        out.stop_reason = _ANTHROPIC_STOPS.get(stop, "error")
        if out.stop_reason == "error":
            out.error = ["refused" if stop == "refusal" else stop]
    return out


# --- Google Gemini streamGenerateContent (providers.md §6.2–6.4) ---------------------------


def _set_path(root: dict[str, Any], piece: dict[str, Any]) -> None:
    """One streamed argument: ``{"jsonPath": "$.a[0].b", "stringValue": ...}``; strings
    arrive in pieces (appended)."""
    tokens: list[Any] = [int(t[1:-1]) if t.startswith("[") else t
                         for t in re.findall(r"\[\d+\]|[^.\[\]$]+", piece["jsonPath"])]
    for key in ("stringValue", "numberValue", "boolValue", "nullValue"):
        if key in piece:
            value = None if key == "nullValue" else piece[key]
            break
    else:
        return
    node: Any = root
    for i, token in enumerate(tokens):
        last = i == len(tokens) - 1
        if isinstance(token, int):
            node.extend([None] * (token + 1 - len(node)))
        if last:
            old = node[token] if isinstance(token, int) else node.get(token)
            node[token] = old + value if isinstance(old, str) and isinstance(value, str) \
                else value
            return
        child = node[token] if isinstance(token, int) else node.get(token)
        if child is None:
            child = [] if isinstance(tokens[i + 1], int) else {}
            node[token] = child
        node = child


def _google(body: bytes) -> Expected:
    events, tail = parse_sse(body)
    out = Expected()
    finish: str | None = None
    usage: dict[str, Any] | None = None
    open_call: dict[str, Any] | None = None  # a call streamed as partialArgs
    for event in events:
        chunk = _json(event.data)
        if isinstance(chunk, list):
            chunk = chunk[0] if chunk else None
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error"):
            out.error = _error_text(chunk["error"])
            break
        usage = chunk.get("usageMetadata") or usage
        for candidate in (chunk.get("candidates") or [])[:1]:
            for part in (candidate.get("content") or {}).get("parts") or []:
                if "functionCall" in part:
                    call = part["functionCall"]
                    if open_call is not None and not call.get("name"):
                        for piece in call.get("partialArgs") or []:
                            _set_path(open_call, piece)
                        if not call.get("willContinue"):
                            open_call = None
                        continue
                    open_call = None
                    args = call.get("args") or {}
                    if call.get("willContinue") and "args" not in call:
                        open_call = args  # filled in place by the partialArgs that follow
                    out.tool_calls.append((call.get("id"), call.get("name") or "", args))
                    if part.get("thoughtSignature"):
                        out.signatures.append(part["thoughtSignature"])
                elif part.get("thought") and isinstance(part.get("text"), str):
                    out.thinking += part["text"]
                elif isinstance(part.get("text"), str):
                    out.text += part["text"]
            finish = candidate.get("finishReason") or finish
    if tail.strip() and not out.error:
        payload = _json(tail.strip())
        if isinstance(payload, dict) and payload.get("error"):
            out.error = _error_text(payload["error"])
    if usage:
        cached = int(usage.get("cachedContentTokenCount") or 0)
        out.usage = {"input": int(usage.get("promptTokenCount") or 0) - cached,
                     "output": int(usage.get("candidatesTokenCount") or 0)
                     + int(usage.get("thoughtsTokenCount") or 0),
                     "cache_read": cached, "cache_write": 0}
        _total(out, usage.get("totalTokenCount"))
    if out.error:
        out.stop_reason = "error"
    elif finish is None:
        out.stop_reason, out.error = "error", ["finish reason"]
    elif finish == "STOP":
        out.stop_reason = "toolUse" if out.tool_calls else "stop"
    elif finish == "MAX_TOKENS":
        out.stop_reason = "length"
    else:
        out.stop_reason, out.error = "error", [finish]
    return out
