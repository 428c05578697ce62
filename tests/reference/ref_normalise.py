"""Normalise the raw output of either driver and report the first difference readably.

Both drivers print pi's JSON (events as ``event_to_dict`` / pi's objects, messages as pi's
transcript JSON). Normalising removes what legitimately differs between two runs: wall-clock
``timestamp`` values and measured ``durationMs`` (kept as the marker ``"<ms>"``, so a missing
one still shows), and the chunking of streamed deltas (consecutive deltas of one content block
become one entry; text and thinking deltas are joined, tool-argument deltas only counted as one,
since the two sides serialise the arguments' JSON with different spacing).
"""

from __future__ import annotations

import json
from typing import Any

Json = Any

MS = "<ms>"


def scrub(value: Json) -> Json:
    """Drop timestamps, mark durations; recursively."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == "timestamp":
                continue
            if key == "traceback" and isinstance(item, str):
                out[key] = "<traceback>"  # paths and line numbers differ by machine
                continue
            if key == "durationMs" and isinstance(item, (int, float)) and not isinstance(item, bool):
                out[key] = MS
                continue
            out[key] = scrub(item)
        return out
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def normalise_log(log: list[Json]) -> list[Json]:
    out: list[Json] = []
    for raw in log:
        entry = scrub(raw)
        if entry.get("kind") == "event" and entry.get("type") == "message_update":
            ame = entry.get("assistantMessageEvent", {})
            kind = ame.get("type", "")
            compact: dict[str, Any] = {"kind": "event", "type": "message_update", "event": kind}
            if "contentIndex" in ame:
                compact["contentIndex"] = ame["contentIndex"]
            for key in ("content", "toolCall", "reason", "message", "error", "partial"):
                if key in ame:
                    compact[key] = ame[key]
            if kind.endswith("_delta"):
                previous = out[-1] if out else None
                if (previous is not None and previous.get("type") == "message_update"
                        and previous.get("event") == kind
                        and previous.get("contentIndex") == compact.get("contentIndex")):
                    if kind != "toolcall_delta":
                        previous["delta"] += ame.get("delta", "")
                    continue
                if kind != "toolcall_delta":
                    compact["delta"] = ame.get("delta", "")
            out.append(compact)
            continue
        out.append(entry)
    return out


def normalise(output: Json, entry: str = "agent") -> Json:
    """The comparable form of one driver's output for one entry.

    Under ``agent_loop`` the events are read from a stream that does not hold the loop back,
    so only the order of the events, and separately the order of everything else (requests,
    hooks, tool executions), are defined; the log is split into ``log`` and ``sidelog``.
    """
    if "driverError" in output:
        return output
    result = {key: scrub(value) for key, value in output.items() if key != "log"}
    log = normalise_log(output.get("log", []))
    if entry.startswith("agent_loop"):
        result["sidelog"] = [e for e in log if e.get("kind") != "event"]
        log = [e for e in log if e.get("kind") == "event"]
        # The partial assistant message of a message_start shares its content list with the
        # message the loop goes on streaming into (pi's `{ ...partial }` and piagent's shallow
        # copy alike); a reader behind the loop sees a later state. Only its role is defined.
        # The same holds for a message_update's partial (pi's stream mutates it in place).
        for event in log:
            if event.get("type") == "message_start" and event["message"].get("role") == "assistant":
                event["message"] = {"role": "assistant"}
            if event.get("type") == "message_update" and "partial" in event:
                event["partial"] = {"role": "assistant"}
    result["log"] = log
    return result


def _short(value: Json, limit: int = 900) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + " …"


def _first_path(a: Json, b: Json, path: str = "") -> str | None:
    if type(a) is not type(b):
        return path or "."
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}"
            found = _first_path(a[key], b[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, list):
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            found = _first_path(x, y, f"{path}[{index}]")
            if found is not None:
                return found
        return None if len(a) == len(b) else f"{path}[len {len(a)} vs {len(b)}]"
    return None if a == b else (path or ".")


def first_difference(pi: Json, py: Json) -> str | None:
    """None when equal; else a readable description of the first difference."""
    if pi == py:
        return None
    if "driverError" in pi or "driverError" in py:
        return f"driver error:\n  pi:      {pi.get('driverError')}\n  piagent: {py.get('driverError')}"
    log_a, log_b = pi.get("log", []), py.get("log", [])
    for index, (x, y) in enumerate(zip(log_a, log_b, strict=False)):
        if x != y:
            context = " | ".join(_label(e) for e in log_a[max(0, index - 3):index])
            return (f"log[{index}] differs at {_first_path(x, y)} (after: {context})\n"
                    f"  pi:      {_short(x)}\n  piagent: {_short(y)}")
    if len(log_a) != len(log_b):
        index = min(len(log_a), len(log_b))
        extra_a = [_label(e) for e in log_a[index:index + 4]]
        extra_b = [_label(e) for e in log_b[index:index + 4]]
        return (f"log length {len(log_a)} (pi) vs {len(log_b)} (piagent); from [{index}]:\n"
                f"  pi:      {extra_a}\n  piagent: {extra_b}")
    for key in sorted(set(pi) | set(py)):
        if key == "log":
            continue
        if pi.get(key) != py.get(key):
            return (f"{key} differs at {_first_path(pi.get(key), py.get(key))}\n"
                    f"  pi:      {_short(pi.get(key))}\n  piagent: {_short(py.get(key))}")
    return "differs (no path found)"


def _label(entry: Json) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    kind = entry.get("kind")
    if kind == "event":
        extra = entry.get("event") or (entry.get("message") or {}).get("role") or entry.get("toolCallId") or ""
        return f"{entry.get('type')}({extra})"
    if kind == "hook":
        return f"hook:{entry.get('hook')}"
    return str(kind)
