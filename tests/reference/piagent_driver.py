"""Runs reference scenarios through piagent's public API and returns each run's raw log.

The mirror of ``pi_driver.mjs``: the same scenario file means the same tools, hooks, latches,
actions and scripted responses, so the two raw logs can be normalised (``normalise.py``) and
compared entry by entry. Every wait is bounded (``LATCH_S``); tools finish by latches released
on observed events, never by timing.

usage: python piagent_driver.py <scenario.json>... [--entry NAME]  (prints JSON like the node
driver's, for looking at one side by hand)
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from piagent import (
    AbortController,
    AbortSignal,
    AfterToolCallContext,
    AfterToolCallResult,
    Agent,
    AgentContext,
    AgentEvent,
    AgentLoopConfig,
    AgentLoopTurnUpdate,
    AgentMessage,
    AgentTool,
    AgentToolResult,
    AgentTurnContext,
    AssistantMessageEventStream,
    BeforeToolCallContext,
    BeforeToolCallResult,
    Context,
    Model,
    PrepareRequestContext,
    RequestUpdate,
    StreamOptions,
    TextContent,
    ToolExecutionEndEvent,
    UserMessage,
    agent_loop,
    agent_loop_continue,
    create_initial_system_message,
    default_convert_to_llm,
    event_to_dict,
    get_current_system_prompt,
    get_current_tools,
    message_from_dict,
    message_to_dict,
    now_ms,
    register_message_type,
    run_agent_loop,
    run_agent_loop_continue,
    to_tool_declaration,
)
from piagent.messages import content_from_dict, usage_from_dict
from piagent.stream import ErrorEvent, ToolCallDeltaEvent, ToolCallStartEvent
from piagent.testing import ScriptedStreamFn

LATCH_S = 5.0
RUN_TIMEOUT_S = 30.0
Json = Any

MODEL = Model(id="scripted", api="scripted", provider="scripted",
              base_url="https://example.invalid", name="Scripted model")


@dataclasses.dataclass
class NoteMessage:
    """An application message (role ``appNote``): pi's declaration merging, piagent's registry.

    The roles are the driver's own (``appNote``, ``bashExecution``): a registration replaces
    an earlier one of the same role process-wide, and other tests register ``note``."""

    text: str
    timestamp: int = 0
    role: str = "appNote"


@dataclasses.dataclass
class BashExecutionMessage:
    """A second application message, with a camelCase field (``exitCode``)."""

    command: str
    output: str
    exit_code: int = 0
    timestamp: int = 0
    role: str = "bashExecution"


register_message_type("appNote", NoteMessage)
register_message_type("bashExecution", BashExecutionMessage)


def app_text(message: Any) -> str:
    """The text an application message shows when convert_to_llm maps it to a user message."""
    body = getattr(message, "text", None)
    if body is None:
        body = getattr(message, "command", "")
    return f"[{message.role}] {body}"


def clear_tools_in_place(messages: list[AgentMessage]) -> None:
    """Delete the tool declarations of the first system message, editing the message object."""
    first = next((m for m in messages if m.role == "system"), None)
    if first is not None:
        first.tools_added = None  # type: ignore[union-attr]  # a SystemMessage by its role
        first.tools_removed = None  # type: ignore[union-attr]


def text_block(text: str) -> list[Any]:
    return [TextContent(text)]


def canon(value: Json) -> str:
    """Canonical JSON (sorted keys, compact), identical to the node driver's."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def as_message(spec: Json) -> AgentMessage:
    if isinstance(spec, str):
        spec = {"role": "user", "content": [{"type": "text", "text": spec}]}
    data = {"timestamp": now_ms(), **copy.deepcopy(spec)}
    return message_from_dict(data)


def matches_event(on: dict[str, Any], event: dict[str, Any]) -> bool:
    message = event.get("message") or {}
    checks = {
        "type": event.get("type"),
        "toolCallId": event.get("toolCallId"),
        "role": message.get("role"),
        "event": (event.get("assistantMessageEvent") or {}).get("type"),
        "stopReason": message.get("stopReason"),
    }
    return all(on[key] == value for key, value in checks.items() if on.get(key))


def entries_of(scenario: dict[str, Any]) -> list[str]:
    return list(scenario.get("entries", ["agent", "run_loop"]))


def result_to_dict(result: AgentToolResult, is_error: bool) -> Json:
    """A tool result as piagent's events serialise it."""
    return event_to_dict(ToolExecutionEndEvent("x", "x", result, is_error))["result"]


def _starting_now(message: Any) -> Any:
    """A scripted response stamped when requested, so its stream times it (pi-ai's rule)."""
    return lambda context, options: dataclasses.replace(message, timestamp=now_ms())


class Harness:
    """One run of one scenario through one entry point."""

    def __init__(self, scenario: dict[str, Any], entry: str) -> None:
        self.s = scenario
        self.entry = entry
        self.log: list[Json] = []
        self._lock = threading.Condition()
        self.requests = 0
        self.counts: dict[int, int] = {}
        self.actions_done: set[int] = set()
        self.started: set[str] = set()
        self.ended: set[str] = set()
        self.hook_counts: dict[str, int] = {}
        self.steering: list[AgentMessage] = []
        self.follow_ups: list[AgentMessage] = []
        self.agent: Agent | None = None
        self.controller: AbortController | None = None
        responses: list[Any] = [
            message_from_dict({"timestamp": 1700000000000 + i, "api": "scripted",
                               "provider": "scripted", "model": "scripted", **copy.deepcopy(r)})
            for i, r in enumerate(scenario.get("responses", []), start=1)]
        if scenario.get("timedStream"):  # as pi_driver: each response starts at its request
            responses = [_starting_now(r) for r in responses]
        self.scripted = ScriptedStreamFn(responses)
        self.tools_by_name = {spec["name"]: self.make_tool(spec) for spec in scenario.get("tools", [])}

    def record(self, entry: Json) -> None:
        with self._lock:
            self.log.append(json.loads(json.dumps(entry)))

    def hook_call(self, name: str) -> int:
        with self._lock:
            self.hook_counts[name] = self.hook_counts.get(name, 0) + 1
            return self.hook_counts[name]

    @property
    def aborted(self) -> bool:
        if self.agent is not None:
            return bool(self.agent.signal is not None and self.agent.signal.aborted)
        return bool(self.controller is not None and self.controller.signal.aborted)

    def abort(self, reason: Any = None) -> None:
        if self.agent is not None:
            self.agent.abort()
        else:
            assert self.controller is not None
            self.controller.abort(reason)

    # ---- latches
    def wait_until(self, ready: Callable[[], bool], signal: AbortSignal | None) -> bool:
        unregister = signal.on_abort(lambda _reason=None: self._notify()) if signal else None
        try:
            with self._lock:
                return self._lock.wait_for(ready, timeout=LATCH_S)
        finally:
            if unregister is not None:
                unregister()

    def _notify(self) -> None:
        with self._lock:
            self._lock.notify_all()

    def latch_for(self, tool_call_id: str, signal: AbortSignal) -> bool:
        order: list[str] = next((g for g in self.s.get("finishOrder", []) if tool_call_id in g), [])
        if tool_call_id not in order:
            return True
        index = order.index(tool_call_id)
        if index == 0:
            return self.wait_until(lambda: all(i in self.started for i in order) or signal.aborted,
                                   signal)
        return self.wait_until(lambda: order[index - 1] in self.ended or signal.aborted, signal)

    # ---- tools
    def make_tool(self, spec: dict[str, Any]) -> AgentTool:
        name = spec["name"]

        def execute(tool_call_id: str, params: dict[str, Any], signal: AbortSignal,
                    on_update: Callable[[AgentToolResult], None]) -> AgentToolResult:
            behaviour = {**spec.get("default", {}), **spec.get("results", {}).get(tool_call_id, {})}
            if not self.latch_for(tool_call_id, signal):
                return AgentToolResult(content=[content_from_dict({"type": "text", "text": "LATCH TIMEOUT"})], details={})
            self.record({"kind": "execute", "toolCallId": tool_call_id, "tool": name,
                         "params": params})
            for update in behaviour.get("updates", []):
                on_update(self.tool_result(update))
            if "steer" in behaviour:
                self.queue_steer(behaviour["steer"])
            if "followUp" in behaviour:
                self.queue_follow_up(behaviour["followUp"])
            if behaviour.get("abortRun"):
                self.abort(behaviour.get("abortReason"))
            if behaviour.get("waitAbort") and not self.wait_until(lambda: signal.aborted, signal):
                return AgentToolResult(content=[content_from_dict({"type": "text", "text": "ABORT TIMEOUT"})], details={})
            if "throw" in behaviour:
                raise RuntimeError(behaviour["throw"])
            content = behaviour.get("content") or [
                {"type": "text", "text": behaviour.get("text", f"{name} {canon(params)}")}]
            result = self.tool_result({
                "content": content,
                "details": behaviour.get("details", {"tool": name}),
                **{k: behaviour[k] for k in ("isError", "terminate", "structuredContent", "usage")
                   if k in behaviour}})
            return result

        prepare = None
        if "prepareArguments" in spec:
            merge = spec["prepareArguments"].get("merge", {})

            def prepare(raw: Any) -> Any:
                return {**raw, **copy.deepcopy(merge)}

        return AgentTool(name=name, description=spec.get("description", f"The {name} tool"),
                         parameters=copy.deepcopy(spec.get("parameters",
                                                           {"type": "object", "properties": {}})),
                         execute=execute, label=spec.get("label", name),
                         prepare_arguments=prepare, execution_mode=spec.get("executionMode"),
                         needs_approval=self.needs_approval(spec))

    @staticmethod
    def needs_approval(spec: dict[str, Any]) -> Any:
        """``needsApproval``: ``true``, or ``"never"`` (a function that always says no)."""
        ask = spec.get("needsApproval", False)
        return (lambda args: False) if ask == "never" else bool(ask)

    @staticmethod
    def tool_result(data: dict[str, Any]) -> AgentToolResult:
        return AgentToolResult(
            content=[content_from_dict(b) for b in data.get("content", [])],
            details=copy.deepcopy(data.get("details")),
            structured_content=copy.deepcopy(data.get("structuredContent")),
            usage=usage_from_dict(data["usage"]) if data.get("usage") else None,
            is_error=bool(data.get("isError", False)),
            terminate=bool(data.get("terminate", False)))

    def tools(self, names: Sequence[str]) -> list[AgentTool]:
        return [self.tools_by_name[n] for n in names]

    def initial_tools(self) -> list[AgentTool]:
        return self.tools([t["name"] for t in self.s.get("tools", []) if not t.get("hidden")])

    # ---- queues
    def queue_steer(self, spec: Json) -> None:
        if self.agent is not None:
            self.agent.steer(as_message(spec))
        else:
            with self._lock:
                self.steering.append(as_message(spec))

    def queue_follow_up(self, spec: Json) -> None:
        if self.agent is not None:
            self.agent.follow_up(as_message(spec))
        else:
            with self._lock:
                self.follow_ups.append(as_message(spec))

    def drain(self, queue: list[AgentMessage], mode: str | None) -> list[AgentMessage]:
        with self._lock:
            count = len(queue) if mode == "all" else min(1, len(queue))
            taken = queue[:count]
            del queue[:count]
            return taken

    # ---- the stream function
    def stream_fn(self, model: Model | None, context: Context,
                  options: StreamOptions) -> AssistantMessageEventStream:
        with self._lock:
            self.requests += 1
            number = self.requests
        signal = options.signal
        self.record({
            "kind": "request", "n": number, "model": model.id if model else None,
            "reasoning": options.reasoning,
            "signalAborted": bool(signal is not None and signal.aborted),
            "messages": [message_to_dict(m) for m in context.messages],
            "tools": [t.name for t in get_current_tools(context.messages)],
            "systemPrompt": get_current_system_prompt(context.messages),
        })
        stream = self.scripted(model, context, options)
        cut = self.s.get("cutToolCall", {}).get(str(number))
        if cut is None:
            return stream
        index = len(self.s["responses"][number - 1]["content"]) - 1
        cut_stream = AssistantMessageEventStream()
        cut_stream.pull_from(cut_events(stream, index, cut))
        return cut_stream

    # ---- hooks
    @staticmethod
    def rule_matches(rule: dict[str, Any], tool_call: Any) -> bool:
        match = rule.get("match", {})
        if match.get("toolCallId") and match["toolCallId"] != tool_call.id:
            return False
        return not (match.get("toolName") and match["toolName"] != tool_call.name)

    def hooks(self) -> dict[str, Any]:
        h: dict[str, Any] = self.s.get("hooks", {})
        out: dict[str, Any] = {}
        if "beforeToolCall" in h:
            def before(ctx: BeforeToolCallContext, signal: AbortSignal) -> BeforeToolCallResult | None:
                self.record({"kind": "hook", "hook": "beforeToolCall",
                             "toolCallId": ctx.tool_call.id, "args": ctx.args,
                             "messages": len(ctx.context.messages), "aborted": signal.aborted})
                rule = next((r for r in h["beforeToolCall"] if self.rule_matches(r, ctx.tool_call)), None)
                if rule is None:
                    return None
                if "setArgs" in rule:
                    ctx.args.update(copy.deepcopy(rule["setArgs"]))
                for key, values in rule.get("appendArgInPlace", {}).items():
                    ctx.args[key].extend(copy.deepcopy(values))
                if rule.get("abort"):
                    self.abort()
                if "throw" in rule:
                    raise RuntimeError(rule["throw"])
                if rule.get("block"):
                    return BeforeToolCallResult(block=True, reason=rule.get("reason"),
                                                terminate=bool(rule.get("terminate")))
                return None
            out["before_tool_call"] = before
        if "afterToolCall" in h:
            def after(ctx: AfterToolCallContext, signal: AbortSignal) -> AfterToolCallResult | None:
                self.record({"kind": "hook", "hook": "afterToolCall",
                             "toolCallId": ctx.tool_call.id, "isError": ctx.is_error,
                             "result": result_to_dict(ctx.result, ctx.is_error),
                             "aborted": signal.aborted})
                rule = next((r for r in h["afterToolCall"] if self.rule_matches(r, ctx.tool_call)), None)
                if rule is None:
                    return None
                if "throw" in rule:
                    raise RuntimeError(rule["throw"])
                if "appendContentInPlace" in rule:
                    ctx.result.content.extend(content_from_dict(b)
                                              for b in rule["appendContentInPlace"])
                return AfterToolCallResult(
                    content=[content_from_dict(b) for b in rule["content"]] if "content" in rule else None,
                    details=copy.deepcopy(rule.get("details")),
                    structured_content=copy.deepcopy(rule.get("structuredContent")),
                    usage=usage_from_dict(rule["usage"]) if "usage" in rule else None,
                    is_error=rule.get("isError"), terminate=rule.get("terminate"))
            out["after_tool_call"] = after
        if "finishTurn" in h:
            def finish(turn: AgentTurnContext, signal: AbortSignal) -> Any:
                n = self.hook_call("finishTurn")
                self.record({"kind": "hook", "hook": "finishTurn", "n": n,
                             "stopReason": turn.message.stop_reason,
                             "toolResults": len(turn.tool_results),
                             "newMessages": len(turn.new_messages), "aborted": signal.aborted})
                rule = h["finishTurn"].get(str(n), h["finishTurn"].get("*"))
                if isinstance(rule, dict):
                    if "editToolResultsInPlace" in rule:
                        for m in turn.tool_results:
                            m.content[:] = text_block(rule["editToolResultsInPlace"])
                    if "appendInPlace" in rule:
                        turn.context.messages.append(as_message(rule["appendInPlace"]))
                    rule = rule.get("action")
                if rule == "throw":
                    raise RuntimeError("finishTurn failed")
                return rule
            out["finish_turn"] = finish
        if "prepareNextTurn" in h:
            def prepare_next(ctx: AgentTurnContext) -> AgentLoopTurnUpdate | None:
                n = self.hook_call("prepareNextTurn")
                self.record({"kind": "hook", "hook": "prepareNextTurn", "n": n,
                             "stopReason": ctx.message.stop_reason,
                             "messages": len(ctx.context.messages), "aborted": self.aborted})
                rule = h["prepareNextTurn"].get(str(n))
                if not rule:
                    return None
                if "throw" in rule:
                    raise RuntimeError(rule["throw"])
                update = AgentLoopTurnUpdate()
                changed = False
                if "replaceFirstSystem" in rule:
                    ctx.context.messages[0] = as_message(rule["replaceFirstSystem"])
                if "appendInPlace" in rule:
                    ctx.context.messages.append(as_message(rule["appendInPlace"]))
                if "toolsInPlace" in rule:
                    ctx.context.tools[:] = self.tools(rule["toolsInPlace"])
                if rule.get("clearToolsInPlace"):
                    clear_tools_in_place(ctx.context.messages)
                if "tools" in rule:
                    update.context = AgentContext(ctx.context.messages, self.tools(rule["tools"]))
                    changed = True
                if "messages" in rule:
                    update.messages = [as_message(m) for m in rule["messages"]]
                    changed = True
                if "thinkingLevel" in rule:
                    update.thinking_level = rule["thinkingLevel"]
                    changed = True
                if rule.get("abort"):
                    self.abort()
                if "steer" in rule:
                    self.queue_steer(rule["steer"])
                return update if changed else None
            out["prepare_next_turn"] = prepare_next
        if "prepareRequest" in h:
            def prepare_request(ctx: PrepareRequestContext, signal: AbortSignal) -> RequestUpdate | None:
                n = self.hook_call("prepareRequest")
                self.record({"kind": "hook", "hook": "prepareRequest", "n": n,
                             "thinkingLevel": ctx.thinking_level,
                             "messages": len(ctx.context.messages), "aborted": signal.aborted})
                rule = h["prepareRequest"].get(str(n))
                if not rule:
                    return None
                if "throw" in rule:
                    raise RuntimeError(rule["throw"])
                update = RequestUpdate()
                changed = False
                if "thinkingLevel" in rule:
                    update.thinking_level = rule["thinkingLevel"]
                    changed = True
                if "tools" in rule:
                    update.context = AgentContext(ctx.context.messages, self.tools(rule["tools"]))
                    changed = True
                if "dropLast" in rule:
                    base = update.context or ctx.context
                    update.context = AgentContext(list(ctx.context.messages)[:-rule["dropLast"]],
                                                  base.tools)
                    changed = True
                if "dropLastInPlace" in rule:
                    del ctx.context.messages[-rule["dropLastInPlace"]:]
                if "toolsInPlace" in rule:
                    ctx.context.tools[:] = self.tools(rule["toolsInPlace"])
                if rule.get("clearToolsInPlace"):
                    clear_tools_in_place(ctx.context.messages)
                if rule.get("abort"):
                    self.abort()
                return update if changed else None
            out["prepare_request"] = prepare_request
        if "transformContext" in h:
            def transform(messages: list[AgentMessage], signal: AbortSignal) -> list[AgentMessage]:
                n = self.hook_call("transformContext")
                self.record({"kind": "hook", "hook": "transformContext", "n": n,
                             "roles": [m.role for m in messages], "aborted": signal.aborted})
                rule = h["transformContext"].get(str(n), h["transformContext"].get("*"))
                if not rule:
                    return messages
                if "throw" in rule:
                    raise RuntimeError(rule["throw"])
                result = messages
                if "replaceFirstSystem" in rule:
                    messages[0] = as_message(rule["replaceFirstSystem"])
                if "appendInPlace" in rule:
                    messages.append(as_message(rule["appendInPlace"]))
                if rule.get("clearToolsInPlace"):
                    clear_tools_in_place(messages)
                if "dropRolesInPlace" in rule:
                    messages[:] = [m for m in messages if m.role not in rule["dropRolesInPlace"]]
                if "editToolResultsInPlace" in rule:
                    for m in messages:
                        if m.role == "toolResult":
                            m.content[:] = text_block(rule["editToolResultsInPlace"])
                if "editToolResults" in rule:
                    result = [dataclasses.replace(m, content=text_block(rule["editToolResults"]))
                              if m.role == "toolResult" else m for m in result]
                if "dropRoles" in rule:
                    result = [m for m in result if m.role not in rule["dropRoles"]]
                if "keepLast" in rule:
                    systems = [m for m in result if m.role == "system"][:1]
                    rest = [m for m in result if m.role != "system"][-rule["keepLast"]:]
                    result = systems + rest
                if "appendUser" in rule:
                    result = [*result, as_message(rule["appendUser"])]
                if "append" in rule:
                    result = [*result, as_message(rule["append"])]
                return result
            out["transform_context"] = transform
        convert_rules = h.get("convertToLlm")

        def convert(messages: list[AgentMessage]) -> list[Any]:
            if convert_rules is not None:
                n = self.hook_call("convertToLlm")
                self.record({"kind": "hook", "hook": "convertToLlm", "n": n,
                             "roles": [m.role for m in messages], "aborted": self.aborted})
                rule = convert_rules.get(str(n), convert_rules.get("*", {}))
                if "throw" in rule:
                    raise RuntimeError(rule["throw"])
                if "dropRolesInPlace" in rule:
                    messages[:] = [m for m in messages if m.role not in rule["dropRolesInPlace"]]
                if "mapRoles" in rule:
                    messages = [UserMessage(content=text_block(app_text(m)), timestamp=m.timestamp)
                                if m.role in rule["mapRoles"] else m for m in messages]
                if "dropRoles" in rule:
                    messages = [m for m in messages if m.role not in rule["dropRoles"]]
            return default_convert_to_llm(messages)
        out["convert_to_llm"] = convert
        return out

    # ---- events
    def observe(self, event: AgentEvent) -> None:
        raw: dict[str, Any] = {"kind": "event", **event_to_dict(event)}
        if raw["type"] == "message_update":
            raw.pop("message", None)
            if not self.s.get("keepPartial"):
                raw["assistantMessageEvent"].pop("partial", None)
        self.record(raw)
        with self._lock:
            if raw["type"] == "tool_execution_start":
                self.started.add(raw["toolCallId"])
            if raw["type"] == "tool_execution_end":
                self.ended.add(raw["toolCallId"])
        for index, action in enumerate(self.s.get("actions", [])):
            if index in self.actions_done or not matches_event(action["on"], raw):
                continue
            self.counts[index] = self.counts.get(index, 0) + 1
            if self.counts[index] != action.get("nth", 1):
                continue
            self.actions_done.add(index)
            self.record({"kind": "action", "index": index})
            for step in action["do"]:
                self.perform(step)
        self._notify()

    def perform(self, step: dict[str, Any]) -> None:
        if ("prompt" in step or "continue" in step) and self.agent is not None:
            error: str | None = None
            try:
                if "prompt" in step:
                    self.agent.prompt(step["prompt"], block=False)
                else:
                    self.agent.continue_(block=False)
            except Exception as exc:  # the busy error is the point
                error = str(exc)
            self.record({"kind": "actionResult", "error": error})
        if "steer" in step:
            self.queue_steer(step["steer"])
        if "followUp" in step:
            self.queue_follow_up(step["followUp"])
        if "abort" in step:
            self.abort(step.get("reason"))
        if "setTools" in step and self.agent is not None:
            self.agent.state.tools = self.tools(step["setTools"])

    # ---- entries
    def loop_config(self) -> AgentLoopConfig:
        c = self.s.get("config", {})
        level = c.get("thinkingLevel")
        hooks = self.hooks()
        return AgentLoopConfig(
            model=MODEL, reasoning=level if level and level != "off" else None,
            tool_execution=c.get("toolExecution", "parallel"),
            get_steering_messages=lambda: self.drain(self.steering, c.get("steeringMode")),
            get_follow_up_messages=lambda: self.drain(self.follow_ups, c.get("followUpMode")),
            **hooks)

    def run_loop(self) -> Json:
        step = self.s.get("steps", [{"prompt": "hi"}])[0]
        tools = self.initial_tools()
        messages = [as_message(m) for m in self.s.get("messages", [])]
        initial = create_initial_system_message(self.s.get("systemPrompt"),
                                                [to_tool_declaration(t) for t in tools])
        if initial is not None and (not messages or messages[0].role != "system"):
            messages.insert(0, initial)
        context = AgentContext(messages, tools)
        for q in self.s.get("queued", {}).get("steering", []):
            self.steering.append(as_message(q))
        for q in self.s.get("queued", {}).get("followUp", []):
            self.follow_ups.append(as_message(q))
        self.controller = AbortController()
        if self.s.get("abortBeforeRun"):
            self.controller.abort()
        config = self.loop_config()
        signal = self.controller.signal
        result: list[AgentMessage] | None = None
        error: str | None = None
        try:
            if self.entry.startswith("agent_loop"):
                if step.get("continue"):
                    stream = agent_loop_continue(context, config, signal, self.stream_fn)
                else:
                    stream = agent_loop(prompt_messages(step), context, config, signal, self.stream_fn)
                for event in stream:
                    self.observe(event)
                result = stream.result(timeout=RUN_TIMEOUT_S)
            elif step.get("continue"):
                result = run_agent_loop_continue(context, config, self.observe, signal, self.stream_fn)
            else:
                result = run_agent_loop(prompt_messages(step), context, config, self.observe,
                                        signal, self.stream_fn)
        except Exception as exc:  # reported, compared with pi's rejection
            error = str(exc)
        return {
            "log": self.log,
            "result": [message_to_dict(m) for m in result] if result is not None else None,
            "error": error,
            "callerMessages": [message_to_dict(m) for m in context.messages],
            "queues": {"steering": [message_to_dict(m) for m in self.steering],
                       "followUp": [message_to_dict(m) for m in self.follow_ups]},
        }

    def run_agent(self) -> Json:
        c = self.s.get("config", {})
        hooks = self.hooks()
        prepare_next = hooks.pop("prepare_next_turn", None)
        if self.s.get("defaultConvert"):
            hooks.pop("convert_to_llm")  # the Agent's own default_convert_to_llm
        agent = Agent(
            system_prompt=self.s.get("systemPrompt", ""), model=MODEL, tools=self.initial_tools(),
            messages=[as_message(m) for m in self.s.get("messages", [])],
            thinking_level=c.get("thinkingLevel", "off"), stream_fn=self.stream_fn,
            steering_mode=c.get("steeringMode", "one-at-a-time"),
            follow_up_mode=c.get("followUpMode", "one-at-a-time"),
            tool_execution=c.get("toolExecution", "parallel"),
            prepare_next_turn=(lambda ctx, _signal: prepare_next(ctx)) if prepare_next else None,
            **hooks)
        self.agent = agent
        failing = copy.deepcopy(self.s.get("listenerThrows", []))

        def listener(event: AgentEvent, _signal: AbortSignal) -> None:
            self.observe(event)
            raw = event_to_dict(event)
            rule = next((r for r in failing if not r.get("fired") and matches_event(r["on"], raw)),
                        None)
            if rule is not None:
                rule["fired"] = True
                raise RuntimeError(rule.get("message", "listener failed"))

        agent.subscribe(listener)
        for q in self.s.get("queued", {}).get("steering", []):
            agent.steer(as_message(q))
        for q in self.s.get("queued", {}).get("followUp", []):
            agent.follow_up(as_message(q))
        for step in self.s.get("steps", [{"prompt": "hi"}]):
            error: str | None = None
            try:
                if "prompt" in step:
                    prompt = step["prompt"]
                    value: Any
                    if isinstance(prompt, str):
                        value = prompt
                    elif isinstance(prompt, list):
                        value = [as_message(m) for m in prompt]
                    else:
                        value = as_message(prompt)
                    images = [content_from_dict(i) for i in step.get("images", [])] or None
                    agent.prompt(value, images, timeout=RUN_TIMEOUT_S)
                elif step.get("continue"):
                    agent.continue_(timeout=RUN_TIMEOUT_S)
                elif "steer" in step:
                    agent.steer(as_message(step["steer"]))
                elif "followUp" in step:
                    agent.follow_up(as_message(step["followUp"]))
                elif "setTools" in step:
                    agent.state.tools = self.tools(step["setTools"])
                elif "setThinkingLevel" in step:
                    agent.state.thinking_level = step["setThinkingLevel"]
                elif "setMessages" in step:
                    agent.state.messages = [as_message(m) for m in step["setMessages"]]
                elif "dropLastMessages" in step:
                    agent.state.messages = list(agent.state.messages)[:-step["dropLastMessages"]]
                elif "reset" in step:
                    agent.reset()
                elif "clearQueues" in step:
                    agent.clear_all_queues()
                elif "approve" in step or "deny" in step:  # pi has no approvals: no-ops there
                    decide = agent.approve if "approve" in step else agent.deny
                    run = decide(step.get("approve", step.get("deny")), reason=step.get("reason"))
                    if run is not None:
                        run.wait(RUN_TIMEOUT_S)
            except Exception as exc:  # reported, compared with pi's rejection
                error = str(exc)
            self.record({"kind": "step", "error": error})
        state = agent.state
        return {
            "log": self.log,
            "transcript": [message_to_dict(m) for m in state.messages],
            "state": {
                "systemPrompt": state.system_prompt,
                "errorMessage": state.error_message,
                "isStreaming": state.is_streaming,
                "pendingToolCalls": len(state.pending_tool_calls),
                "hasQueuedMessages": agent.has_queued_messages(),
                "peekQueuedMessages": [message_to_dict(m) for m in agent.peek_queued_messages()],
            },
        }


def cut_events(stream: AssistantMessageEventStream, index: int, cut: str) -> Iterator[Any]:
    """The scripted events, failing inside the tool call at ``index`` (the last block): after
    its ``toolcall_start`` come deltas of the JSON prefix ``cut``, then the terminal event
    with the scripted message (no ``toolcall_end``), as the node driver's ``scriptedEvents``."""
    events = iter(stream)
    for event in events:
        yield event
        if isinstance(event, ToolCallStartEvent) and event.content_index == index:
            for start in range(0, len(cut), 16):
                yield ToolCallDeltaEvent(index, cut[start:start + 16], event.partial)
            break
    for _ in events:  # the rest of the script, unseen
        pass
    planned = stream.result(LATCH_S)
    yield ErrorEvent(planned.stop_reason, planned)  # type: ignore[arg-type]  # error or aborted


def prompt_messages(step: dict[str, Any]) -> list[AgentMessage]:
    prompt = step["prompt"]
    if isinstance(prompt, list):
        return [as_message(m) for m in prompt]
    return [as_message(prompt)]


def run_scenario(scenario: dict[str, Any], entry: str) -> Json:
    harness = Harness(scenario, entry)
    output = harness.run_agent() if entry == "agent" else harness.run_loop()
    return json.loads(json.dumps(output))


def main(argv: list[str]) -> int:
    only = None
    files: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--entry":
            only = next(args)
        else:
            files.append(arg)
    out: dict[str, Any] = {}
    for file in files:
        scenario = json.loads(Path(file).read_text())
        name = scenario.get("name", Path(file).stem)
        out[name] = {e: run_scenario(scenario, e) for e in entries_of(scenario)
                     if only is None or e == only}
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
