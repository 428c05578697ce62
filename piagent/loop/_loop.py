"""The agent loop: call the model, run the tools it asks for, feed the results back, repeat.

``run_agent_loop`` and ``run_agent_loop_continue`` run on the calling thread and call
``emit`` synchronously for every event (each event is a barrier); ``_threaded.py`` runs them
on a new worker thread. None of them mutates the caller's ``context.messages``.

The loop works with ``AgentMessage`` everywhere and turns the transcript into LLM
messages only at the model boundary (``transform_context`` → ``convert_to_llm``).
"""

from __future__ import annotations

import copy
import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any, get_args

from ..abort import AbortSignal
from ..events import (
    AgentEndEvent,
    AgentEvent,
    AgentStartEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from ..messages import AgentMessage, AssistantMessage, ToolCall, ToolResultMessage
from ..stream import (
    AssistantMessageEvent,
    Context,
    DoneEvent,
    ErrorEvent,
    StartEvent,
    StreamFn,
    StreamOptions,
    get_default_stream_fn,
    run_ended,
    run_started,
)
from ._config import (
    AgentContext,
    AgentLoopConfig,
    AgentLoopTurnUpdate,
    AgentTurnContext,
    PrepareRequestContext,
    RequestUpdate,
)
from ._declare import ToolDeclarations
from ._guard import RunGuard, make_guard
from ._tools import ToolRunner, emit_messages, record_despite_failure
from ._trace import start_trace

__all__ = ["Emit", "Resume", "Run", "check_can_continue",
           "run_agent_loop", "run_agent_loop_continue"]

Emit = Callable[[AgentEvent], None]

# the events that change a started message, by exact class: one set lookup per event
# (three failed isinstance checks cost more); any other class (a subclass, say) takes the
# isinstance chain
_UPDATES = frozenset(get_args(AssistantMessageEvent)) - {StartEvent, DoneEvent, ErrorEvent}
_STREAM_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(StreamOptions))
_read_stream_options = operator.attrgetter(*_STREAM_OPTION_FIELDS)  # the config's values, in C


def run_agent_loop(prompts: Sequence[AgentMessage], context: AgentContext,
                   config: AgentLoopConfig, emit: Emit, signal: AbortSignal | None = None,
                   stream_fn: StreamFn | None = None, *,
                   guard: RunGuard | None = None) -> list[AgentMessage]:
    """Run a prompt: add ``prompts`` to a copy of the context and loop until the agent stops.

    ``guard`` (``make_guard``'s, made by the caller that reads its outcome) applies limits
    and a typed output; without it ``config.limits``/``config.output_type`` make one. Either
    way the run closes it. Blocks; returns the run's new messages (the prompts included).
    """
    return Run(context, config, emit, signal, stream_fn, guard).run(list(prompts))


def run_agent_loop_continue(context: AgentContext, config: AgentLoopConfig, emit: Emit,
                            signal: AbortSignal | None = None,
                            stream_fn: StreamFn | None = None, *,
                            guard: RunGuard | None = None) -> list[AgentMessage]:
    """Continue from the context as it is (a retry, say); the last message must not be the model's.

    ``guard`` as ``run_agent_loop``'s. Blocks; returns the run's new messages.
    """
    check_can_continue(context)
    return Run(context, config, emit, signal, stream_fn, guard).run()


def emit_start(emit: Emit) -> None:
    """A run's first two events (inside its trace, so a failure here ends its span)."""
    emit(AgentStartEvent())
    emit(TurnStartEvent())


def check_can_continue(context: AgentContext) -> None:
    if not context.messages:
        msg = "Cannot continue: no messages in context"
        raise ValueError(msg)
    if getattr(context.messages[-1], "role", None) == "assistant":
        msg = "Cannot continue from message role: assistant"
        raise ValueError(msg)


class Run:
    """One run of the loop: its context copy, config, signal, and the state between turns.

    Made by ``Run(...)`` alone, for every entry point (``run_agent_loop`` and its forms,
    which the ``Agent`` calls too): the guard (limits, typed output), then the trace, wrap
    the config, the emit function and the stream function here, once; ``run`` closes what
    was opened (the tool pool, the guard).
    """

    def __init__(self, context: AgentContext, config: AgentLoopConfig, emit: Emit,
                 signal: AbortSignal | None, stream_fn: StreamFn | None,
                 guard: RunGuard | None = None) -> None:
        tools = list(context.tools)
        if guard is None and (config.limits is not None or config.output_type is not None):
            guard = make_guard(config.limits, config.output_type)
            if config.limits is not None:
                config.limits.check_model(config.model)  # a cost limit it can never reach
        self.guard = guard
        if guard is not None:  # through the public hooks and a wrapped stream function
            tools = guard.tools(tools)
            config = guard.config(config)
            stream_fn = guard.stream_fn(stream_fn if stream_fn is not None
                                        else get_default_stream_fn())
        self.context = AgentContext(list(context.messages), tools)
        self.trace, self.config, self.emit, self.stream_fn = start_trace(config, emit, stream_fn)
        self.signal = signal if signal is not None else AbortSignal()
        self.new_messages: list[AgentMessage] = []
        self.declarations = ToolDeclarations()
        self.last_turn: AgentTurnContext | None = None
        self.pending: list[AgentMessage] = []  # steering or follow-ups for the next request
        self.explicit_continuation = False  # finish_turn asked for one more turn

    def run(self, prompts: list[AgentMessage] | None = None, resume: Resume | None = None
            ) -> list[AgentMessage]:
        """The run from its first event to its last: ``prompts`` (a prompt run's input, with
        the tool declarations they need) added and emitted first; returns its new messages."""
        run_started()  # counted while it goes: connection pools keep their idle connections
        try:
            if prompts is None:
                self.trace.run(emit_start, self.emit)
            else:
                self._begin(prompts)
            tools = ToolRunner(self.config, self.signal, self.emit, self.trace)
            try:
                self.trace.run(self._loop, tools, resume)  # inside the run's span, if traced
            finally:
                tools.close()
        finally:
            try:
                if self.guard is not None:
                    self.guard.close()  # charges a budget what the last response spent
            finally:
                run_ended()  # the last run to end closes the pools' surplus connections
        return self.new_messages

    def _begin(self, prompts: list[AgentMessage]) -> None:
        emit = self.emit  # through the run's trace, if any
        initial = self.declarations.declare(self.context.messages, self.context.tools, prompts)
        self.context.messages.extend(initial)
        self.new_messages.extend(initial)
        try:
            self.trace.run(emit_start, emit)  # a listener failing here still ends the span
        except BaseException:
            record_despite_failure(emit, initial)  # the prompts stay in the transcript
            raise
        emit_messages(emit, initial)  # a listener failing at a start still records the prompt

    def _poll(self, getter: Callable[[], Sequence[AgentMessage]] | None) -> list[AgentMessage]:
        if getter is None or self.signal.aborted:  # an aborted run polls no queue
            return []
        return list(getter() or ())

    def _loop(self, tools: ToolRunner, resume: Resume | None) -> None:
        """The seed's ``runLoop``, step by step."""
        has_more_tool_calls = True
        if resume is None:  # steering the user typed while waiting
            self.pending = self._poll(self.config.get_steering_messages)
        else:  # the batch a stopped process left unfinished ends its turn as any batch
            resumed, calls, unknown = resume
            batched = self._execute_tool_calls(tools, resumed, calls, unknown)
            if batched is None:  # calls wait for approval: the run has ended
                return None
            results, has_more_tool_calls = batched
            if self._finish_turn(resumed, results, has_more_tool_calls):
                return None

        while True:  # outer loop: follow-ups arriving when the agent would stop
            while has_more_tool_calls or self.pending:  # inner loop: one turn per pass
                prepared: list[AgentMessage] = []
                if self.last_turn is not None:
                    if self.signal.aborted:
                        return self._close_aborted(turn_open=False)
                    prepared = self._start_next_turn(self.last_turn)
                if not self._inject(prepared):  # prepared and queued messages, then a request
                    return self._close_aborted(turn_open=True)
                self._prepare_request()
                message = self._stream_assistant_response()
                if message is None:  # aborted before the request could start
                    return self._close_aborted(turn_open=True)
                self.new_messages.append(message)
                if message.stop_reason in ("error", "aborted"):
                    return self._end_failed_turn(message)
                batched = self._execute_tool_calls(tools, message)
                if batched is None:  # calls wait for approval: the run has ended
                    return None
                results, has_more_tool_calls = batched
                if self._finish_turn(message, results, has_more_tool_calls):
                    return None

            # the agent would stop here: look for follow-ups
            has_more_tool_calls = True
            follow_ups = self._poll(self.config.get_follow_up_messages)
            if follow_ups:
                self.explicit_continuation = False
                self.pending = follow_ups
                continue
            if self.explicit_continuation and not self.signal.aborted:
                self.explicit_continuation = False  # one context-only turn, as finish_turn asked
                continue
            break
        self.emit(AgentEndEvent(list(self.new_messages)))
        return None

    def _start_next_turn(self, last_turn: AgentTurnContext) -> list[AgentMessage]:
        """``prepare_next_turn``, a steering poll, ``turn_start``; returns the prepared messages."""
        prepared: list[AgentMessage] = []
        if self.config.prepare_next_turn is not None:
            update = self.config.prepare_next_turn(last_turn)
            if update is not None:
                prepared = list(update.messages or ())
                self._adopt(update)
        # preparation can be long (compaction): pick up steering queued meanwhile, only if
        # the earlier poll was empty (one-at-a-time means one per turn)
        if not self.pending:
            self.pending = self._poll(self.config.get_steering_messages)
        self.emit(TurnStartEvent())
        return prepared

    def _adopt(self, update: AgentLoopTurnUpdate | RequestUpdate) -> None:
        """A hook's update: its context replaces the run's, its model and thinking level the
        config's (for the rest of the run)."""
        if update.context is not None:
            self.context = update.context
        model, thinking_level = update.model, update.thinking_level
        if model is None and thinking_level is None:
            return
        changes: dict[str, Any] = {}
        if model is not None:
            changes["model"] = model
        if thinking_level is not None:
            changes["reasoning"] = None if thinking_level == "off" else thinking_level
        self.config = dataclasses.replace(self.config, **changes)

    def _inject(self, prepared: list[AgentMessage]) -> bool:
        """Add the prepared and pending messages (tool changes declared) with their events;
        ``False`` if the run was aborted meanwhile."""
        injected = self.declarations.declare(self.context.messages, self.context.tools,
                                             [*prepared, *self.pending])
        self.pending = []
        emit, signal = self.emit, self.signal
        for queued in injected:
            if signal.aborted:
                return False
            emit(MessageStartEvent(queued))
            emit(MessageEndEvent(queued))
            self.context.messages.append(queued)
            self.new_messages.append(queued)
        return not signal.aborted

    def _prepare_request(self) -> None:
        config = self.config
        if config.prepare_request is not None:
            update = config.prepare_request(PrepareRequestContext(
                self.context, config.model, config.reasoning or "off", self.emit), self.signal)
            if update is not None:
                self._adopt(update)

    def _end_failed_turn(self, message: AssistantMessage) -> None:
        """An error or aborted response ends the run: ``finish_turn`` observes it (its
        decision is ignored), then ``turn_end`` and ``agent_end``."""
        if self.config.finish_turn is not None and not self.signal.aborted:
            self.config.finish_turn(AgentTurnContext(message, [], self.context,
                                                     self.new_messages), self.signal)
        self.emit(TurnEndEvent(message, []))
        self.emit(AgentEndEvent(list(self.new_messages)))

    def _execute_tool_calls(self, tools: ToolRunner, message: AssistantMessage,
                            calls: list[ToolCall] | None = None,
                            unknown: frozenset[str] = frozenset()
                            ) -> tuple[list[ToolResultMessage], bool] | None:
        """Run the response's tool calls (or ``calls``); their results join the context.
        Returns them and whether the loop goes on (no batch asked to terminate); ``None``
        when calls wait for approval (the run ended with ``agent_end``, no ``turn_end``)."""
        if not (calls if calls is not None else message.tool_calls):
            return [], False
        batch = tools.run_batch(self.context, message, self.config, calls, unknown)
        self.context.messages.extend(batch.messages)
        self.new_messages.extend(batch.messages)
        if batch.waiting is not None:
            self.emit(AgentEndEvent(list(self.new_messages)))
            return None
        return batch.messages, not batch.terminate

    def _finish_turn(self, message: AssistantMessage, results: list[ToolResultMessage],
                     has_more_tool_calls: bool) -> bool:
        """``finish_turn``, ``turn_end``, then the steering poll; ``True`` if the run ended
        (``finish_turn`` said "end")."""
        config, signal = self.config, self.signal
        self.last_turn = turn = AgentTurnContext(message, results, self.context,
                                                 self.new_messages)
        decision = (_decision(config.finish_turn(turn, signal))
                    if config.finish_turn is not None and not signal.aborted else None)
        self.emit(TurnEndEvent(message, list(results)))
        if decision == "end":
            self.emit(AgentEndEvent(list(self.new_messages)))
            return True
        self.pending = self._poll(config.get_steering_messages)
        # a natural request satisfies "continue"
        self.explicit_continuation = (decision == "continue" and not has_more_tool_calls
                                      and not self.pending)
        return False

    def _stream_assistant_response(self) -> AssistantMessage | None:
        """Ask the model; keep the streaming message as the context's last entry.

        Returns ``None``, having asked nothing, when the signal is aborted before the request.
        """
        config, signal, emit, messages = self.config, self.signal, self.emit, self.context.messages
        if signal.aborted:
            return None
        view = messages
        if config.transform_context is not None:
            view = config.transform_context(view, signal)
        llm_messages = config.convert_to_llm(view)
        llm_context = Context(llm_messages if isinstance(llm_messages, list) else list(llm_messages))
        api_key = None
        if config.get_api_key is not None and config.model is not None:
            api_key = config.get_api_key(config.model.provider)
        if signal.aborted:  # never start a provider request with an aborted signal
            return None
        options = StreamOptions(**dict(zip(_STREAM_OPTION_FIELDS, _read_stream_options(config),
                                           strict=True)))
        options.api_key = api_key or config.api_key
        options.signal = signal
        response = self.stream_fn(config.model, llm_context, options)

        partial: AssistantMessage | None = None
        final: AssistantMessage | None = None
        for event in response:
            if type(event) not in _UPDATES:  # the usual update event skips the checks
                if isinstance(event, StartEvent):
                    partial = event.partial
                    messages.append(partial)
                    emit(MessageStartEvent(_shallow_copy(partial)))
                    continue
                if isinstance(event, DoneEvent):
                    final = event.message
                    break
                if isinstance(event, ErrorEvent):
                    final = event.error
                    break
            if partial is not None:  # an update (ignored before the start)
                partial = event.partial  # type: ignore[union-attr]  # an update event
                messages[-1] = partial
                emit(MessageUpdateEvent(_shallow_copy(partial), event))
        if final is None:
            final = (response.result(0) if response.has_result() else self._failed(
                "The stream function ended its stream without a done or error event."))
        final.thinking_level = config.reasoning or "off"
        if partial is not None:
            messages[-1] = final
        else:
            messages.append(final)
            emit(MessageStartEvent(_shallow_copy(final)))
        emit(MessageEndEvent(final))
        return final

    def _failed(self, text: str, *, aborted: bool = False) -> AssistantMessage:
        model = self.config.model
        return AssistantMessage(
            content=[], api=model.api if model else "", provider=model.provider if model else "",
            model=model.id if model else "", stop_reason="aborted" if aborted else "error",
            error_message=text, thinking_level=self.config.reasoning or "off")

    def _synthetic_aborted(self) -> AssistantMessage:
        reason = self.signal.reason
        return self._failed(str(reason) if reason is not None else "Operation aborted",
                            aborted=True)

    def _close_aborted(self, *, turn_open: bool) -> None:
        """End an aborted run where it would have made a request: no hook runs any more."""
        if not turn_open:
            self.emit(TurnStartEvent())
        message = self._synthetic_aborted()
        self.emit(MessageStartEvent(_shallow_copy(message)))
        self.emit(MessageEndEvent(message))
        self.context.messages.append(message)
        self.new_messages.append(message)
        self.emit(TurnEndEvent(message, []))
        self.emit(AgentEndEvent(list(self.new_messages)))


Resume = tuple[AssistantMessage, list[ToolCall], frozenset[str]]
"""A resumed run's first batch: the assistant message, its unanswered calls, and the ids
of those that get an unknown-outcome result instead of running."""


def _decision(value: Any) -> str | None:
    """``finish_turn``'s answer: "continue", "end", or pi's ``{"action": ...}`` form."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return value.get("action")
    return getattr(value, "action", None)


def _shallow_copy(message: AssistantMessage) -> AssistantMessage:
    """A distinct message sharing each field's value with ``message`` (as ``copy.copy``).

    The fields are assigned one by one (tests/loop/test_loop.py checks this list against
    the dataclass): reading ``__dict__`` would make CPython build a dict for both
    instances, two more GC-tracked objects per update event. A subclass gets ``copy.copy``
    (which keeps the fields it adds); an attribute set on an instance beyond the declared
    fields is not carried, as with ``dataclasses.replace``.
    """
    if type(message) is not AssistantMessage:
        return copy.copy(message)
    copied = object.__new__(AssistantMessage)
    copied.content = message.content
    copied.api = message.api
    copied.provider = message.provider
    copied.model = message.model
    copied.usage = message.usage
    copied.stop_reason = message.stop_reason
    copied.error_message = message.error_message
    copied.thinking_level = message.thinking_level
    copied.timestamp = message.timestamp
    copied.duration_ms = message.duration_ms
    copied.response_model = message.response_model
    copied.response_id = message.response_id
    copied.provider_thinking_level = message.provider_thinking_level
    copied.raw_stop_reason = message.raw_stop_reason
    copied.end_turn = message.end_turn
    copied.diagnostics = message.diagnostics
    copied.deferred = message.deferred
    copied.extra = message.extra
    return copied
