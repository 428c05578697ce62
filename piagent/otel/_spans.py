"""``RunSpans``: one run's spans: ``invoke_agent``, a ``chat {model}`` per model call and an
``execute_tool {name}`` per tool call, all children of the run's span.

Spans are opened and closed from the run's events, on the run's worker thread; only
``tool_scope`` runs on the thread executing a tool and reads the tool's span (written by
the worker before the call was handed over).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from opentelemetry import context as otel_context, trace

from ..events import AgentEvent
from ..loop import AgentLoopConfig
from ..messages import AgentMessage, AssistantMessage, TextContent, ToolCall, Usage
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamFn, StreamOptions
from ._attributes import (
    add_usage,
    finish_reason,
    input_messages,
    model_attributes,
    output_messages,
    system_instructions,
    usage_attributes,
)

__all__ = ["RunSpans"]

Emit = Callable[[AgentEvent], None]
_NO_SCOPE = nullcontext()
_COMPACTION = frozenset({"compaction_start", "compaction_end"})


def parent_context(telemetry: Any) -> otel_context.Context | None:
    """The context a run's span starts in: ``telemetry`` (a ``Span`` or a ``Context``), or
    ``None`` for the current one. ``TypeError`` for anything else."""
    if telemetry is None:
        return None
    if isinstance(telemetry, trace.Span):
        return trace.set_span_in_context(telemetry)
    if isinstance(telemetry, otel_context.Context):
        return telemetry
    msg = (f"telemetry must be an OpenTelemetry Span or Context, or None, got "
           f"{type(telemetry).__name__}.")
    raise TypeError(msg)


def _fail(span: trace.Span, error_type: str, description: str | None) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(trace.Status(trace.StatusCode.ERROR, description))


class RunSpans:
    """The spans of one run (piagent's ``RunTrace``); built by ``Instrumentation``."""

    def __init__(self, tracer: trace.Tracer, config: AgentLoopConfig, agent_name: str | None,
                 capture: bool) -> None:
        self._tracer = tracer
        self._config = config
        self._agent_name = agent_name
        self._capture = capture
        self._parent = parent_context(config.telemetry)
        self._run: trace.Span | None = None  # invoke_agent, from agent_start to agent_end
        self._run_context: otel_context.Context | None = None
        self._chat: trace.Span | None = None  # the model call being read
        self._chat_token: object = None  # its context attached on the worker thread
        self._chat_started = 0.0
        self._tools: dict[str, trace.Span] = {}  # by call id; written by the worker only
        self._compacting: trace.Span | None = None  # a compaction under way
        self._usage = Usage()
        self._last_stop: str | None = None
        self._last_error: str | None = None

    # --- what the loop calls -----------------------------------------------------------

    def wrapped(self, emit: Emit, stream_fn: StreamFn) -> tuple[AgentLoopConfig, Emit, StreamFn]:
        """The config (polls reported), ``emit`` and stream function the run uses."""
        config = self._config
        changes: dict[str, Any] = {}
        if config.get_steering_messages is not None:
            changes["get_steering_messages"] = self._poll("steer", config.get_steering_messages)
        if config.get_follow_up_messages is not None:
            changes["get_follow_up_messages"] = self._poll("follow_up",
                                                           config.get_follow_up_messages)
        if changes:
            config = dataclasses.replace(config, **changes)

        def observed(event: AgentEvent) -> None:
            self._on_event(event)
            emit(event)

        def traced(model: Model | None, context: Context,
                   options: StreamOptions) -> AssistantMessageEventStream:
            self._start_chat(model, context, options)
            try:
                return stream_fn(model, context, options)
            except BaseException as exc:
                self._end_chat_failed(exc)
                raise

        return config, observed, traced

    def tool_scope(self, call: ToolCall) -> AbstractContextManager[object]:
        span = self._tools.get(call.id)
        if span is None:
            return _NO_SCOPE
        return trace.use_span(span, end_on_exit=False, record_exception=False,
                              set_status_on_exception=False)

    def run(self, body: Callable[..., None], *args: Any) -> None:
        token = otel_context.attach(self._run_context) if self._run_context else None
        try:
            body(*args)
        except BaseException as exc:
            self._end_all_failed(exc)
            raise
        finally:
            if token is not None:
                otel_context.detach(token)  # also drops a model call's left attached

    # --- events ------------------------------------------------------------------------

    def _on_event(self, event: AgentEvent) -> None:
        kind = event.type
        if kind == "message_end":
            message = event.message  # type: ignore[union-attr]
            if isinstance(message, AssistantMessage):
                self._end_chat(message)
        elif kind == "message_start":
            if self._chat is not None and isinstance(event.message,  # type: ignore[union-attr]
                                                     AssistantMessage):
                self._chat.set_attribute("gen_ai.response.time_to_first_chunk",
                                         time.monotonic() - self._chat_started)
        elif kind == "tool_execution_start":
            self._start_tool(event.tool_call_id, event.tool_name,  # type: ignore[union-attr]
                             event.args)  # type: ignore[union-attr]
        elif kind == "tool_execution_end":
            self._end_tool(event)
        elif kind == "agent_start":
            self._start_run()
        elif kind == "tool_approval_request":  # the call waits: its span ends unrun
            span = self._tools.pop(event.tool_call_id, None)  # type: ignore[union-attr]
            if span is not None:
                span.set_attribute("piagent.tool.waiting_for_approval", True)
                span.end()
        elif kind == "agent_end":
            self._end_run()
        elif kind in _COMPACTION:
            self._compaction(event)

    def _start_run(self) -> None:
        config = self._config
        name = self._agent_name
        attributes: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent",
                                      **model_attributes(config.model)}
        attributes.pop("server.address", None)
        attributes.pop("server.port", None)
        if name:
            attributes["gen_ai.agent.name"] = name
        if config.session_id:
            attributes["gen_ai.conversation.id"] = config.session_id
        self._run = self._tracer.start_span(f"invoke_agent {name}" if name else "invoke_agent",
                                            context=self._parent,
                                            kind=trace.SpanKind.INTERNAL, attributes=attributes)
        self._run_context = trace.set_span_in_context(self._run, self._parent)

    def _end_run(self) -> None:
        span, self._run = self._run, None
        if span is None:
            return
        span.set_attributes(usage_attributes(self._usage))  # the sum over its model calls
        if self._last_stop is not None:
            span.set_attribute("piagent.stop_reason", self._last_stop)
            if self._last_stop in ("error", "aborted"):
                _fail(span, self._last_stop, self._last_error)
        span.end()

    def _start_chat(self, model: Model | None, context: Context,
                    options: StreamOptions) -> None:
        model_id = model.id if model is not None else ""
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat",
                                      **model_attributes(model)}
        if options.session_id:
            attributes["gen_ai.conversation.id"] = options.session_id
        if options.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = options.max_tokens
        if options.temperature is not None:
            attributes["gen_ai.request.temperature"] = options.temperature
        if self._capture:
            instructions = system_instructions(context.messages)
            if instructions is not None:
                attributes["gen_ai.system_instructions"] = instructions
            attributes["gen_ai.input.messages"] = input_messages(context.messages)
        self._chat = span = self._tracer.start_span(
            f"chat {model_id}".rstrip(), context=self._run_context or self._parent,
            kind=trace.SpanKind.CLIENT, attributes=attributes)
        self._chat_started = time.monotonic()
        # current while the request is made and read (HTTP spans nest under it); detached
        # at the response's message_end, or with the run's own context if it never comes
        self._chat_token = otel_context.attach(trace.set_span_in_context(span))

    def _end_chat(self, message: AssistantMessage) -> None:
        span, self._chat = self._chat, None
        if span is None:  # no model call: an injected message, or an aborted run's closing one
            if message.stop_reason == "aborted":
                self._last_stop, self._last_error = message.stop_reason, message.error_message
            return
        self._last_stop, self._last_error = message.stop_reason, message.error_message
        add_usage(self._usage, message.usage)
        otel_context.detach(self._chat_token)  # type: ignore[arg-type]
        self._chat_token = None
        span.set_attributes(usage_attributes(message.usage))
        span.set_attribute("gen_ai.response.model", message.response_model or message.model)
        if message.response_id:
            span.set_attribute("gen_ai.response.id", message.response_id)
        span.set_attribute("gen_ai.response.finish_reasons",
                           [finish_reason(message.stop_reason)])
        span.set_attribute("piagent.stop_reason", message.stop_reason)
        if self._capture:
            span.set_attribute("gen_ai.output.messages", output_messages(message))
        if message.stop_reason in ("error", "aborted"):
            _fail(span, message.stop_reason, message.error_message)
        span.end()

    def _end_chat_failed(self, exc: BaseException) -> None:
        span, self._chat = self._chat, None
        if span is not None:
            otel_context.detach(self._chat_token)  # type: ignore[arg-type]
            self._chat_token = None
            span.record_exception(exc)
            _fail(span, type(exc).__qualname__, str(exc))
            span.end()

    def _compaction(self, event: Any) -> None:
        """``compaction {reason}``: from ``compaction_start`` to ``compaction_end``, under
        the run's span (docs/compaction.md); the summary requests' usage and cost."""
        if event.type == "compaction_start":
            self._compacting = self._tracer.start_span(
                f"compaction {event.reason}", context=self._run_context or self._parent,
                kind=trace.SpanKind.INTERNAL,
                attributes={"gen_ai.operation.name": "compaction",
                            "piagent.compaction.reason": event.reason})
            return
        span, self._compacting = self._compacting, None
        if span is None:
            return
        span.set_attribute("piagent.compaction.tokens_before", event.tokens_before)
        span.set_attribute("piagent.compaction.tokens_after", event.tokens_after)
        span.set_attribute("piagent.compaction.will_retry", event.will_retry)
        if event.usage is not None:
            span.set_attributes(usage_attributes(event.usage))
        if event.summary is None:
            _fail(span, "aborted" if event.aborted else "compaction_failed",
                  event.error_message)
        span.end()

    def _start_tool(self, call_id: str, name: str, args: Any) -> None:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
                                      "gen_ai.tool.type": "function"}
        if self._capture:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(args, ensure_ascii=False,
                                                                  default=str)
        self._tools[call_id] = self._tracer.start_span(
            f"execute_tool {name}", context=self._run_context or self._parent,
            kind=trace.SpanKind.INTERNAL, attributes=attributes)

    def _end_tool(self, event: Any) -> None:
        span = self._tools.pop(event.tool_call_id, None)
        if span is None:
            return
        text = "".join(block.text for block in event.result.content or ()
                       if isinstance(block, TextContent))
        if self._capture:
            span.set_attribute("gen_ai.tool.call.result", text)
        if event.is_error:
            _fail(span, "tool_error", text if self._capture else None)
        span.end()

    def _poll(self, kind: str, getter: Callable[[], Sequence[AgentMessage]]
              ) -> Callable[[], Sequence[AgentMessage]]:
        def polled() -> Sequence[AgentMessage]:
            messages = getter()
            if messages and self._run is not None:
                self._run.add_event(f"piagent.{kind}", {"piagent.messages": len(messages)})
            return messages

        return polled

    def _end_all_failed(self, exc: BaseException) -> None:
        """The loop raised: the open spans end with the exception as their error."""
        self._end_chat_failed(exc)
        for tool in self._tools.values():
            _fail(tool, type(exc).__qualname__, str(exc))
            tool.end()
        self._tools.clear()
        run, self._run = self._run, None
        if run is not None:
            run.record_exception(exc)
            _fail(run, type(exc).__qualname__, str(exc))
            run.end()

