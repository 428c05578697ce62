"""How piagent is expected to differ from pi, as transforms of pi's normalised output.

``DELIBERATE`` are the documented choices (docs/reference.md, "Deliberate differences"): a scenario that declares one
asserts that piagent differs from pi and that applying the transform to pi's output gives
piagent's exactly. ``DEFECTS`` are undeclared differences found by this suite; a scenario that
names one is an ``xfail(strict=True)`` whose reason is the defect's text, and the suite still
checks that the named defect is the *only* difference (where a transform can say so), so a
second, unknown difference cannot hide behind it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Json = Any
Transform = Callable[[Json, dict[str, Any]], Json]


@dataclass(frozen=True)
class Difference:
    """A row: ``upstream`` marks one changed upstream in 1.5/1.6 (piagent follows pi 1.6.0 /
    1.6.1, the reference), which applies to pi 1.4.0's output only."""

    id: str
    text: str
    transform: Transform | None
    upstream: bool = False
    # an upstream row no transform can write: pi 1.4.0's output is replaced by 1.6.0's
    # (the test asserts the two differ, and that piagent's equals 1.6.0's)
    as_reference: bool = False

    def applies_to(self, version: str) -> bool:
        return not self.upstream or version == "1.4.0"


def _events(out: Json) -> list[Json]:
    return [e for e in out.get("log", []) if e.get("kind") == "event"]


def _text_of(message: Json) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


# --- deliberate ---------------------------------------------------------------------------

def _drop(out: Json, unwanted: Callable[[Json], bool]) -> Json:
    """Remove entries from the log (and the side log of agent_loop entries)."""
    out = copy.deepcopy(out)
    for key in ("log", "sidelog"):
        if key in out:
            out[key] = [e for e in out[key] if not unwanted(e)]
    return out


def _each_dict(value: Any, visit: Callable[[dict[str, Any]], None]) -> None:
    """Call ``visit`` on every dict inside ``value`` (lists and dicts, depth first)."""
    if isinstance(value, dict):
        visit(value)
        for item in list(value.values()):
            _each_dict(item, visit)
    elif isinstance(value, list):
        for item in value:
            _each_dict(item, visit)


def no_request_when_aborted(out: Json, scenario: dict[str, Any]) -> Json:
    return _drop(out, lambda e: e.get("kind") == "request" and bool(e.get("signalAborted")))


def no_hooks_after_abort(out: Json, scenario: dict[str, Any]) -> Json:
    return _drop(out, lambda e: e.get("kind") == "hook" and bool(e.get("aborted")))


def queued_input_kept(out: Json, scenario: dict[str, Any]) -> Json:
    """Messages pi polled after the abort and delivered stay queued in piagent."""
    out = copy.deepcopy(out)
    texts = set(scenario.get("keptOnAbort", []))
    aborted_at = next((i for i, e in enumerate(out["log"]) if e.get("kind") == "action"), 0)

    def kept(message: Json) -> bool:
        return message.get("role") == "user" and _text_of(message) in texts

    moved: list[Json] = []
    log: list[Json] = []
    for index, entry in enumerate(out["log"]):
        if (index > aborted_at and entry.get("kind") == "event"
                and entry.get("type") in ("message_start", "message_end")
                and kept(entry["message"])):
            if entry["type"] == "message_end":
                moved.append(entry["message"])
            continue
        if entry.get("kind") == "event" and entry.get("type") == "agent_end":
            entry["messages"] = [m for m in entry["messages"] if not kept(m)]
        log.append(entry)
    out["log"] = log
    for key in ("transcript", "result", "callerMessages"):
        if isinstance(out.get(key), list):
            out[key] = [m for m in out[key] if not kept(m)]
    if "queues" in out:
        out["queues"]["steering"] = moved + out["queues"]["steering"]
    if "state" in out and moved:  # the Agent's peek: one message, or all in "all" mode
        steering = moved + out["state"]["peekQueuedMessages"]
        all_mode = scenario.get("config", {}).get("steeringMode") == "all"
        out["state"]["hasQueuedMessages"] = True
        out["state"]["peekQueuedMessages"] = steering if all_mode else steering[:1]
    return out


def caller_list_not_mutated(out: Json, scenario: dict[str, Any]) -> Json:
    out = copy.deepcopy(out)
    added = len(out.get("result") or [])
    if added:
        out["callerMessages"] = out["callerMessages"][:-added]
    return out


def agent_end_run_messages(out: Json, scenario: dict[str, Any]) -> Json:
    """agent_end after a failure carries every message of the run, not only the failure."""
    out = copy.deepcopy(out)
    start = max(i for i, e in enumerate(out["log"])
                if e.get("kind") == "event" and e.get("type") == "agent_start")
    messages = [e["message"] for e in out["log"][start:]
                if e.get("kind") == "event" and e.get("type") == "message_end"]
    for entry in out["log"][start:]:
        if entry.get("kind") == "event" and entry.get("type") == "agent_end":
            entry["messages"] = messages
    return out


def failed_run_names_its_type(out: Json, scenario: dict[str, Any]) -> Json:
    """A run that fails (a hook or listener raised) says the exception's type: the driver
    raises RuntimeError, so pi's "bad message" is piagent's "RuntimeError: bad message"."""
    thrown: set[str] = set()

    _each_dict(scenario.get("hooks", {}), lambda rule: thrown.update(
        item for key, item in rule.items() if key == "throw" and isinstance(item, str)))
    if "throw" in (scenario.get("hooks", {}).get("finishTurn") or {}).values():
        thrown.add("finishTurn failed")
    thrown.update(rule.get("message", "listener failed")
                  for rule in scenario.get("listenerThrows", []))
    out = copy.deepcopy(out)

    def name_type(value: dict[str, Any]) -> None:
        if value.get("errorMessage") in thrown:  # the failure message, the state
            value["errorMessage"] = f"RuntimeError: {value['errorMessage']}"

    _each_dict(out, name_type)
    return out


def agent_loop_error_not_hang(out: Json, scenario: dict[str, Any]) -> Json:
    out = copy.deepcopy(out)
    match = re.search(r"unhandled rejection: (.*)\)$", out.get("error") or "")
    if match:
        out["error"] = f"The agent loop stopped because RuntimeError was raised: {match.group(1)}"
    return out


def python_names(out: Json, scenario: dict[str, Any]) -> Json:
    out = copy.deepcopy(out)
    for entry in out["log"]:
        if entry.get("kind") in ("step", "actionResult") and entry.get("error"):
            entry["error"] = (entry["error"].replace("followUp()", "follow_up()"))
    return out


def tool_error_names_its_type(out: Json, scenario: dict[str, Any]) -> Json:
    """A tool that raised: the text names the exception type, details hold it (issue 14)."""
    out = copy.deepcopy(out)
    thrown = {t["default"]["throw"] for t in scenario.get("tools", [])
              if isinstance(t, dict) and isinstance(t.get("default"), dict)
              and "throw" in t["default"]}

    def name_type(value: dict[str, Any]) -> None:
        content = value.get("content")
        if (isinstance(content, list) and len(content) == 1
                and isinstance(content[0], dict) and content[0].get("text") in thrown):
            text = content[0]["text"]
            content[0]["text"] = f"RuntimeError: {text}"
            value["details"] = {"error": {"message": text, "traceback": "<traceback>",
                                          "type": "RuntimeError"}}

    _each_dict(out, name_type)
    return out


def prompt_images_refused(out: Json, scenario: dict[str, Any]) -> Json:
    """``prompt(message_or_list, images)`` raises TypeError at the call: no run happens.

    pi drops the images and runs the prompt: that run's log entries and its messages
    disappear, and the step's outcome is piagent's TypeError. (A refused step must be the
    scenario's last run: later requests would carry pi's extra messages.)
    """
    out = copy.deepcopy(out)
    steps = scenario.get("steps", [])
    refused = {i for i, step in enumerate(steps)
               if step.get("images") and not isinstance(step.get("prompt", ""), str)}
    log: list[Json] = []
    segment: list[Json] = []
    step_index = 0
    for entry in out["log"]:
        if entry.get("kind") != "step":
            segment.append(entry)
            continue
        if step_index in refused:
            prompt = steps[step_index]["prompt"]
            kind = "list" if isinstance(prompt, list) else {
                "user": "UserMessage", "assistant": "AssistantMessage",
                "toolResult": "ToolResultMessage", "system": "SystemMessage"}[prompt["role"]]
            for event in segment:
                if event.get("kind") == "event" and event.get("type") == "message_end":
                    out["transcript"].remove(event["message"])
            entry = {**entry, "error": f"prompt(): images= goes with a str input, not {kind}."}
            segment = []
        log += [*segment, entry]
        segment = []
        step_index += 1
    out["log"] = log + segment
    return out


def duplicate_tool_names_refused(out: Json, scenario: dict[str, Any]) -> Json:
    """``state.tools = [...]`` with two tools of one name raises ValueError at the assignment
    (the tools stay as they were); pi takes the list. (A refused step must be the scenario's
    last: later requests would carry pi's list.)"""
    out = copy.deepcopy(out)
    steps = [e for e in out["log"] if e.get("kind") == "step"]
    for step, entry in zip(scenario.get("steps", []), steps, strict=True):
        names = step.get("setTools") or []
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:
            first, second = names.index(twice), names.index(twice, names.index(twice) + 1)
            entry["error"] = (f"state.tools has two tools named {twice!r} (state.tools[{first}] "
                              f"and state.tools[{second}]): the model calls a tool by its name, "
                              f"so each needs its own; rename one (@tool(name=...)).")
    return out


def option_values_checked(out: Json, scenario: dict[str, Any]) -> Json:
    """An out-of-range request option (``temperature`` here) fails ``AgentLoopConfig(...)``:
    the loop never starts, so nothing is logged and the caller's list is as it was."""
    out = copy.deepcopy(out)
    temperature = scenario.get("config", {}).get("temperature")
    out.update(log=[], result=None,
               error=f"temperature must be from 0 to 2, got {temperature!r}.")
    return out


def results_kept_after_listener_failure(out: Json, scenario: dict[str, Any]) -> Json:
    """A listener failed during a tool batch: the result message of every call that ran is
    still recorded (events and transcript), in source order, before the failure message."""
    out = copy.deepcopy(out)
    log, calls, ends = out["log"], [], {}
    for index, entry in enumerate(log):
        if entry.get("kind") != "event":
            continue
        kind, message = entry.get("type"), entry.get("message") or {}
        if kind == "message_end" and message.get("role") == "assistant":
            if message.get("stopReason") == "error" and ends:
                break
            calls = [c["id"] for c in message.get("content", []) if c.get("type") == "toolCall"]
            ends = {}
        elif kind == "message_start" and message.get("role") == "toolResult":
            ends = {}  # this batch recorded its results itself
        elif kind == "tool_execution_end":
            ends[entry["toolCallId"]] = entry
        elif kind == "message_start" and message.get("stopReason") == "error" and ends:
            results = [_result_message(ends[c]) for c in calls if c in ends]
            log[index:index] = [{"kind": "event", "type": t, "message": m}
                                for m in results for t in ("message_start", "message_end")]
            failed_at = next(i for i, m in enumerate(out.get("transcript", []))
                             if m.get("stopReason") == "error")
            out["transcript"][failed_at:failed_at] = results
            break
    return out


def _result_message(end: Json) -> Json:
    message = {"role": "toolResult", "toolCallId": end["toolCallId"],
               "toolName": end["toolName"], "content": end["result"].get("content", [])}
    if "details" in end["result"]:
        message["details"] = end["result"]["details"]
    message["isError"] = end["isError"]
    if "durationMs" in end:
        message["durationMs"] = end["durationMs"]
    return message


def details_none_is_no_details(out: Json, scenario: dict[str, Any]) -> Json:
    """A tool result's ``details: null`` is written as no key (Python's None is both)."""
    out = copy.deepcopy(out)

    def drop_null(value: dict[str, Any]) -> None:
        if "details" in value and value["details"] is None:
            del value["details"]

    _each_dict(out, drop_null)
    return out


def approval_waits(out: Json, scenario: dict[str, Any]) -> Json:
    """The call of a tool marked ``needsApproval`` waits: after its ``tool_execution_start`` the
    run reports it (``tool_approval_request``) and ends (``agent_end`` with its messages so
    far; the prompt step returns); the approve step's run starts (``agent_start``,
    ``turn_start``, the call's start again) and goes on as pi's one run does, its
    ``agent_end`` carrying the messages it added. (One waiting call, in the first batch.)"""
    from piagent.sessions import approval_digest

    out = copy.deepcopy(out)
    log = out["log"]
    guarded = {t["name"] for t in scenario.get("tools", []) if t.get("needsApproval") is True}
    at = next(i for i, e in enumerate(log) if e.get("kind") == "event"
              and e.get("type") == "tool_execution_start" and e.get("toolName") in guarded)
    start = log[at]
    so_far = [e["message"] for e in log[:at]
              if e.get("kind") == "event" and e.get("type") == "message_end"]
    last_end = max(i for i, e in enumerate(log) if e.get("type") == "agent_end")
    log[last_end] = {**log[last_end], "messages": log[last_end]["messages"][len(so_far):]}
    first_step = next(i for i, e in enumerate(log) if e.get("kind") == "step")
    del log[first_step]
    # callKey: the asking assistant message's position in piagent's transcript, then the
    # call's index among its tool calls (piagent's per-session key of a waiting call). That
    # transcript begins with the system message declaring the tools (docs/transcripts.md),
    # which pi's log does not carry: one position more.
    asking = max(i for i, m in enumerate(so_far) if m.get("role") == "assistant")
    position = 1 + asking
    calls = [b for b in so_far[asking]["content"] if b.get("type") == "toolCall"]
    index = next(i for i, b in enumerate(calls) if b.get("id") == start["toolCallId"])
    log[at + 1:at + 1] = [
        {"kind": "event", "type": "tool_approval_request", "toolCallId": start["toolCallId"],
         "toolName": start["toolName"], "args": start["args"],
         "digest": approval_digest(start["toolName"], start["args"]),
         "callKey": f"{position}:{index}"},
        {"kind": "event", "type": "agent_end", "messages": so_far},
        {"kind": "step", "error": None},
        {"kind": "event", "type": "agent_start"}, {"kind": "event", "type": "turn_start"},
        copy.deepcopy(start)]
    return out


# --- changed upstream in 1.5/1.6 (pi-agent-core 1.6.0 is the reference from issue 46) ----

_ABORTED = {"content": [{"type": "text", "text": "Operation aborted"}], "details": {}}


def _sequential(scenario: dict[str, Any], names: set[str]) -> bool:
    return scenario.get("config", {}).get("toolExecution") == "sequential" or any(
        isinstance(t, dict) and t.get("name") in names
        and t.get("executionMode") == "sequential" for t in scenario.get("tools", []))


def _join_results(value: Any, last_id: str, results: list[Json]) -> None:
    """In every list inside ``value`` holding the result of ``last_id`` (not yet
    ``results``): ``results`` inserted after it."""
    if isinstance(value, list):
        ids = [m.get("toolCallId") if isinstance(m, dict) else None for m in value]
        if last_id in ids and results[0]["toolCallId"] not in ids:
            place = ids.index(last_id) + 1
            value[place:place] = copy.deepcopy(results)
        for item in value:
            _join_results(item, last_id, results)
    elif isinstance(value, dict):
        for item in value.values():
            _join_results(item, last_id, results)


def abort_answers_every_call(out: Json, scenario: dict[str, Any]) -> Json:
    """pi-agent-core 1.6.0 (#9986): the calls of a batch pi 1.4.0 left without a result after
    an abort get ``tool_execution_start``, an "Operation aborted" ``tool_execution_end`` and
    a result message: parallel, each start and end after the batch's last end and each
    message after its last result message; sequential, all four after its last result
    message. The messages join every list holding the batch's results (``turn_end``,
    ``agent_end``, the transcript, the returned messages)."""
    out = copy.deepcopy(out)
    log = out["log"]
    asking = [e for e in log if e.get("kind") == "event" and e.get("type") == "message_end"
              and e["message"].get("role") == "assistant"]
    for entry in asking:
        calls = [b for b in entry["message"]["content"] if b.get("type") == "toolCall"]
        if not calls:
            continue
        at = next(i for i, e in enumerate(log) if e is entry)
        batch_end = next((i for i in range(at + 1, len(log)) if log[i].get("kind") == "event"
                          and log[i].get("type") in ("turn_end", "agent_end")), len(log))
        started = {e["toolCallId"] for e in log[at:batch_end]
                   if e.get("type") == "tool_execution_start"}
        missing = [c for c in calls if c["id"] not in started]
        if not started or not missing:
            continue
        last_result = max(i for i in range(at, batch_end) if log[i].get("type") == "message_end"
                          and log[i]["message"].get("role") == "toolResult")
        last_id = log[last_result]["message"]["toolCallId"]
        stamp = {k: v for k, v in log[last_result]["message"].items() if k == "timestamp"}
        results = [{"role": "toolResult", "toolCallId": c["id"], "toolName": c["name"],
                    **copy.deepcopy(_ABORTED), "isError": True, **stamp} for c in missing]
        pairs = [[{"kind": "event", "type": "tool_execution_start", "toolCallId": c["id"],
                   "toolName": c["name"], "args": c["arguments"]},
                  {"kind": "event", "type": "tool_execution_end", "toolCallId": c["id"],
                   "toolName": c["name"], "result": copy.deepcopy(_ABORTED), "isError": True}]
                 for c in missing]
        messages = [[{"kind": "event", "type": kind, "message": copy.deepcopy(m)}
                     for kind in ("message_start", "message_end")] for m in results]
        if _sequential(scenario, {c["name"] for c in calls}):
            log[last_result + 1:last_result + 1] = [
                e for pair, msgs in zip(pairs, messages, strict=True)
                for e in pair + msgs]
        else:
            log[last_result + 1:last_result + 1] = [e for msgs in messages for e in msgs]
            last_end = max(i for i in range(at, last_result)
                           if log[i].get("type") == "tool_execution_end")
            log[last_end + 1:last_end + 1] = [e for pair in pairs for e in pair]

        _join_results({k: v for k, v in out.items() if k != "log"}, last_id, results)
        for e in log:
            if e.get("type") in ("turn_end", "agent_end"):
                _join_results(e, last_id, results)
    return out


DELIBERATE: dict[str, Difference] = {d.id: d for d in [
    Difference("abort-answers-every-call",
               "changed upstream in 1.5/1.6 (pi-agent-core 1.6.0, #9986): once the signal is "
               "aborted, every call of the batch not yet finished still gets "
               "tool_execution_start, an error tool_execution_end and the result \"Operation "
               "aborted\", checked before the lookup, validation and before_tool_call; pi "
               "1.4.0 left the calls after the abort without a result (a provider answers 400 "
               "to such a transcript).",
               abort_answers_every_call, upstream=True),
    Difference("validation-pi-schema",
               "changed upstream in 1.5/1.6 (pi-ai 1.6.1 validates tool arguments with "
               "pi-schema): its coercion (a single value where an array is expected becomes a "
               "one-element array, conversion through $ref and unions, an integer's fraction "
               "cut, null -> \"null\" for a string) and its error words (\"path: missing\", "
               "\"a.1: expected number, got string\", \"extra: unknown field\"); pi 1.4.0 "
               "used TypeBox's (\"must have required properties path\").",
               None, upstream=True, as_reference=True),
    Difference("approval-waits",
               "A call whose tool (needs_approval) or before_tool_call asks for approval does "
               "not run: the run reports it (tool_approval_request, an event pi does not have) "
               "and ends waiting once the rest of the batch is done; approve() or deny() starts "
               "the run that completes the batch. pi has no approvals: the call runs at once.",
               approval_waits),
    Difference("tool-error-names-its-type",
               "A tool that raises gives the model \"KeyError: 'file'\" (type and message), and "
               "the result's details hold the type, message and traceback; pi sends the message "
               "alone (issue 14: debuggable failures).",
               tool_error_names_its_type),
    Difference("no-request-when-aborted",
               "A provider request is never started with an aborted signal; the turn ends with a "
               "synthetic aborted assistant message instead.",
               no_request_when_aborted),
    Difference("no-hooks-after-abort",
               "Once the signal is aborted no further hook runs (finish_turn, prepare_next_turn, "
               "prepare_request, transform_context, convert_to_llm, after_tool_call).",
               no_hooks_after_abort),
    Difference("queued-input-kept",
               "Once aborted, no queue is polled: queued input stays queued for the next run "
               "instead of being taken into the aborted run.",
               queued_input_kept),
    Difference("caller-list-not-mutated",
               "None of the loop entry points mutates the caller's context.messages; pi's "
               "agentLoopContinue appends to it.",
               caller_list_not_mutated),
    Difference("results-kept-after-listener-failure",
               "A listener that fails during a tool batch fails the run, but every call that "
               "ran still gets its result message (in source order, before the failure "
               "message), so the transcript and a session store keep what the tools did and a "
               "resumed run does not run a side-effecting tool again; pi drops them.",
               results_kept_after_listener_failure),
    Difference("details-none-is-no-details",
               "A tool result whose details are None (Python's default, and its null) has no "
               "details key in tool_execution_end.result and the toolResult message, as pi "
               "writes a result without details; pi keeps an explicit details: null. Writing "
               "null for None would put \"details\": null into the transcript of every tool "
               "that has no details.",
               details_none_is_no_details),
    Difference("agent-end-run-messages",
               "agent_end.messages after a failure are all the messages the run added, "
               "including the synthetic failure message; pi's handleRunFailure sends only the "
               "failure message.",
               agent_end_run_messages),
    Difference("failed-run-names-its-type",
               "A run that fails because a hook or a listener raised ends with an error message "
               "that names the exception type (\"RuntimeError: bad message\"); pi's "
               "handleRunFailure keeps the message alone.",
               failed_run_names_its_type),
    Difference("agent-loop-error-not-hang",
               "A hook that raises under agent_loop ends the stream with AgentLoopError; pi's "
               "agentLoop leaves an unhandled rejection and a stream that never ends.",
               agent_loop_error_not_hang),
    Difference("prompt-images-refused",
               "prompt(message_or_list, images=...) raises TypeError at the call; pi drops the "
               "images silently and runs the prompt without them.",
               prompt_images_refused),
    Difference("duplicate-tool-names-refused",
               "Two tools of one name (Agent(tools=...), state.tools = ..., AgentContext) are a "
               "ValueError at the call; pi takes them: the model is offered the last one "
               "and a call of the name runs the first.",
               duplicate_tool_names_refused),
    Difference("option-values-checked",
               "Request options out of range (temperature outside 0-2, max_tokens < 1, "
               "max_retries or max_retry_delay_ms < 0) are a ValueError when the options or the "
               "loop's config are built; pi sends them to the provider.",
               option_values_checked),
    Difference("python-names",
               "Error texts name the Python methods (follow_up(), continue_()).",
               python_names),
]}


# --- defects (undeclared differences found by this suite) ---------------------------------

DEFECTS: dict[str, Difference] = {d.id: d for d in [
]}


def declared(scenario: dict[str, Any], key: str, entry: str,
             version: str | None = None) -> list[str]:
    """A scenario's ``differences`` or ``defects``: a list, or a dict by entry point; with
    ``version``, only the rows that apply to that pi (a row changed upstream in 1.5/1.6
    applies to 1.4.0 only)."""
    value = scenario.get(key, [])
    ids = list(value.get(entry, []) if isinstance(value, dict) else value)
    if version is None:
        return ids
    table = DELIBERATE if key == "differences" else DEFECTS
    return [i for i in ids if i not in table or table[i].applies_to(version)]


def apply(ids: list[str], table: dict[str, Difference], out: Json,
          scenario: dict[str, Any]) -> Json:
    for ident in ids:
        transform = table[ident].transform
        if transform is not None:
            out = transform(out, scenario)
    return out
