"""An Agent's compaction (docs/compaction.md): the hooks a run gets when
``Agent(compaction=...)`` is set, and one compaction of the transcript.

Loaded only when compaction is configured: an agent without it runs no code of this module.
The transcript (``state.messages`` and the session store) keeps every message; a compaction
appends a ``CompactionSummaryMessage`` to both, and the requests are built from
``piagent.compaction.project`` of it. Per request: ``prepare_request`` swaps in the
projection when the transcript holds a summary the run's context has not taken in yet,
then compacts when the estimated context leaves less than ``reserve_tokens`` of the model's
window; the stream function, wrapped, compacts once and sends the request again when the
provider refuses it as too long; ``finish_turn`` compacts after a response that overflowed
the window silently, and drops, compacts and asks again a response cut short for lack of
room (pi-coding-agent's checks of a response, once until a response completes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Literal

from ..abort import AbortSignal
from ..compaction import (
    Compaction,
    CompactionError,
    CompactionOutcome,
    RunningEstimate,
    compact,
    latest_summary,
    prepare,
    project,
    should_compact,
)
from ..events import AgentEvent, CompactionEndEvent, CompactionStartEvent
from ..loop import (
    AgentContext,
    AgentLoopConfig,
    AgentTurnContext,
    PrepareRequestContext,
    RequestUpdate,
    TurnDecision,
)
from ..messages import AgentMessage, AssistantMessage, CompactionSummaryMessage, ThinkingLevel
from ..models import Model
from ..providers import is_context_overflow, is_recoverable_length
from ..stream import (
    AssistantMessageEvent,
    AssistantMessageEventStream,
    Context,
    ErrorEvent,
    StartEvent,
    StreamFn,
    StreamOptions,
    get_default_stream_fn,
)
from ._persistence import StoreLink
from ._record import RunRecord
from ._state import AgentState

__all__ = ["CompactionRun", "check_compaction", "compact_transcript", "run_hooks",
           "summary_options"]

Reason = Literal["threshold", "overflow", "manual"]
NOTHING = "Nothing to compact: every message fits in the kept part."
# pi-coding-agent's texts when a compact-and-retry was not enough
OVERFLOW_FAILED = ("Context overflow recovery failed after one compact-and-retry attempt. Try "
                   "reducing context or switching to a larger-context model.")
LENGTH_FAILED = "Truncated response recovery failed after one compact-and-retry attempt."


def check_compaction(value: object) -> None:
    """``Agent(compaction=...)``: a ``piagent.compaction.Compaction`` or ``None``."""
    if value is not None and not isinstance(value, Compaction):
        msg = (f"compaction must be a piagent.compaction.Compaction (e.g. Compaction() for "
               f"pi's defaults) or None, not {type(value).__name__}.")
        raise TypeError(msg)


def summary_options(config: Any, model: Model, reasoning: ThinkingLevel | None
                    ) -> StreamOptions:
    """The request options of a summary: the key, session, environment and identity of
    ``config`` (a run's ``AgentLoopConfig`` or the ``Agent``), and as pi the agent's
    thinking level for a model that reasons."""
    api_key = config.get_api_key(model.provider) if config.get_api_key is not None else None
    return StreamOptions(api_key=api_key or config.api_key, session_id=config.session_id,
                         env=config.env, identity=config.identity, timeout_ms=config.timeout_ms,
                         max_retry_delay_ms=config.max_retry_delay_ms,
                         reasoning=reasoning if model.reasoning and reasoning != "off" else None)


def compact_transcript(state: AgentState, link: StoreLink | None, run: RunRecord | None,
                       settings: Compaction, reason: Reason, *, model: Model,
                       stream_fn: StreamFn, options: StreamOptions, signal: AbortSignal,
                       emit: Callable[[AgentEvent], None], instructions: str | None = None,
                       will_retry: bool = False) -> CompactionEndEvent:
    """One compaction of ``state.messages``: events around it, the summary appended to the
    transcript and stored (one atomic append). A failure leaves the transcript unchanged
    and is reported in the end event (``summary is None``). The caller owns the state."""
    log = state.messages
    preparation = prepare(log, settings.keep_recent_tokens)
    if preparation is None:  # as pi: no events when there is nothing to summarise
        return CompactionEndEvent(reason, error_message=NOTHING)
    emit(CompactionStartEvent(reason))
    outcome: CompactionOutcome | None = None
    error: str | None = None
    try:
        outcome = compact(log, keep_recent_tokens=settings.keep_recent_tokens,
                          model=settings.model or model, stream_fn=settings.stream_fn or stream_fn,
                          instructions=instructions or settings.instructions, signal=signal,
                          options=options, preparation=preparation)
        if outcome is not None and link is not None:  # stored first: kept only if stored
            if link.count != len(log):
                link.replace(log)  # earlier messages missing from the store: the whole first
            link.store.append(link.session_id, [outcome.summary])
    except CompactionError as exc:
        error, outcome = str(exc), None
    except Exception as exc:  # a stream function or a store that raised: reported, run goes on
        error, outcome = f"Compaction failed: {type(exc).__name__}: {exc}", None
    if outcome is None:
        end = CompactionEndEvent(reason, error_message=error or NOTHING, aborted=signal.aborted)
        emit(end)
        return end
    summary = outcome.summary
    log.append(summary)
    if link is not None:
        link.count = len(log)
    if run is not None:
        run.messages.append(summary)
    end = CompactionEndEvent(reason, summary, outcome.tokens_before, outcome.tokens_after,
                             outcome.usage, will_retry=will_retry)
    emit(end)
    return end


class CompactionRun:
    """One run's compaction hooks. Used on the run's worker thread only (the loop calls
    ``prepare_request`` and the stream function there), so it needs no lock."""

    def __init__(self, settings: Compaction, state: AgentState, link: StoreLink | None,
                 run: RunRecord, config: AgentLoopConfig, emit: Callable[[AgentEvent], None],
                 stream_fn: StreamFn | None) -> None:
        self.settings, self.state, self.link, self.run = settings, state, link, run
        self.config, self.emit = config, emit
        self.inner = stream_fn if stream_fn is not None else get_default_stream_fn()
        self.user_prepare = config.prepare_request
        self.context: list[AgentMessage] | None = None  # the list the loop's context holds
        self.after = 0  # where, in it, the messages after the latest summary start
        self.failed = False  # a threshold compaction of this run failed
        self.estimate: RunningEstimate | None = None  # of the loop's context list
        self.model: Model | None = None  # the model of the latest request
        self.user_finish = config.finish_turn
        # a compact-and-retry was made since the last complete response: not a second one
        self.retried = False

    def install(self) -> tuple[AgentLoopConfig, StreamFn]:
        """The run's config with the ``prepare_request`` hook (and, when automatic, the
        ``finish_turn`` one), and the stream function."""
        if not self.settings.auto:
            return dataclasses.replace(self.config, prepare_request=self.prepare_request), \
                self.inner
        config = dataclasses.replace(self.config, prepare_request=self.prepare_request,
                                     finish_turn=self.finish_turn)
        return config, self.stream

    # --- before each request ------------------------------------------------------------

    def _project(self) -> list[AgentMessage]:
        log = self.state.messages
        view = project(log)
        self.after = 0 if view.summary_at < 0 else \
            len(view.messages) - (len(log) - 1 - view.summary_at)
        return view.messages

    def prepare_request(self, ctx: PrepareRequestContext, signal: AbortSignal
                        ) -> RequestUpdate | None:
        if ctx.emit is not None:  # the run's event path (tracing sees the events too)
            self.emit = ctx.emit
        user = self.user_prepare(ctx, signal) if self.user_prepare is not None else None
        context = user.context if user is not None and user.context is not None else ctx.context
        model = (user.model if user is not None and user.model is not None else None) or ctx.model
        self.model = model
        replaced = False
        if self.context is None and (user is None or user.context is None):
            # the run's first request, or the first after an overflow's compaction: the
            # context takes in the transcript's latest summary, if any
            if latest_summary(self.state.messages) >= 0:
                context = AgentContext(self._project(), context.tools)
                replaced = True
            else:
                self.after = 0
            self.context = context.messages
        elif context.messages is not self.context:  # a hook gave a list of its own: kept
            self.context = context.messages
            self.after = _after_summary(context.messages)
        if self.settings.auto and not self.failed and model is not None and should_compact(
                self._tokens(context.messages), model.context_window,
                self.settings.reserve_tokens):
            end = self._compact("threshold", model, signal)
            if end.summary is not None:
                context = AgentContext(self._project(), context.tools)
                self.context, replaced = context.messages, True
            else:  # not again in this run (an overflow still gets its one attempt)
                self.failed = True
        if not replaced:
            return user
        return RequestUpdate(context=context, model=user.model if user else None,
                             thinking_level=user.thinking_level if user else None)

    def _tokens(self, messages: list[AgentMessage]) -> int:
        """The estimated context of ``messages``, counted incrementally per request."""
        estimate = self.estimate
        if estimate is None or not estimate.tracks(messages):
            self.estimate = estimate = RunningEstimate(messages, self.after)
        return estimate.tokens()

    def _compact(self, reason: Reason, model: Model, signal: AbortSignal,
                 will_retry: bool = False) -> CompactionEndEvent:
        return compact_transcript(
            self.state, self.link, self.run, self.settings, reason, model=model,
            stream_fn=self.inner, signal=signal,
            options=summary_options(self.config, self.settings.model or model,
                                    self.config.reasoning),
            emit=self.emit, will_retry=will_retry)

    # --- after a response ----------------------------------------------------------------

    def finish_turn(self, turn: AgentTurnContext, signal: AbortSignal) -> TurnDecision | None:
        """pi's checks of a completed response: a silent overflow (a ``"stop"`` whose input
        exceeds the window) is compacted after its turn, without a retry; a response cut at
        its output limit because the context left too little room (a ``"length"`` with no
        output that filled the window, or pi-ai's ``is_recoverable_length``) is dropped,
        compacted and asked again, once."""
        decision = self.user_finish(turn, signal) if self.user_finish is not None else None
        message, model = turn.message, self.model
        stop = message.stop_reason
        if model is None or stop in ("error", "aborted"):
            return decision
        if stop != "length":
            self.retried = False
            if stop == "stop" and not self.failed and is_context_overflow(
                    message, model.context_window):
                end = self._compact("overflow", model, signal)
                if end.summary is not None:
                    self.context = None  # a next request of this run takes the projection
                else:  # not again in this run
                    self.failed = True
            return decision
        overflow = is_context_overflow(message, model.context_window)
        if not overflow and not is_recoverable_length(
                message, self.config.max_tokens or model.max_tokens):
            return decision
        if self.retried:  # as pi: the second time, the run ends saying why
            self.emit(CompactionEndEvent(
                "overflow", error_message=OVERFLOW_FAILED if overflow else LENGTH_FAILED))
            return decision
        if decision == "end" or turn.tool_results or message.tool_calls:
            return decision  # a batch ran on it: the response stays
        return "continue" if self._drop_and_compact(message, model, signal) else decision

    def _drop_and_compact(self, message: AssistantMessage, model: Model,
                          signal: AbortSignal) -> bool:
        """The cut-short response leaves the transcript (and the store, rewritten with the
        summary), as a refused request never enters it; the older part is summarised. If
        the compaction fails, the response is put back. Whether the turn is asked again."""
        log = self.state.messages
        last = log[-1] if log else None
        if not (isinstance(last, AssistantMessage) and last.timestamp == message.timestamp
                and last.stop_reason == "length"):
            return False
        log.pop()
        end = self._compact("overflow", model, signal, will_retry=True)
        if end.summary is None:
            log.append(last)
            return False
        run_messages = self.run.messages
        for index in range(len(run_messages) - 1, -1, -1):
            if run_messages[index] is last:
                del run_messages[index]
                break
        self.retried = True
        self.context = None  # the retried request takes the projection
        return True

    # --- a refused request ----------------------------------------------------------------

    def stream(self, model: Model | None, context: Context, options: StreamOptions
               ) -> AssistantMessageEventStream:
        """The stream function: the agent's, compacting once and asking again when the
        provider refuses the request as too long for the model."""
        first = self.inner(model, context, options)
        if model is None:
            return first
        out = AssistantMessageEventStream()
        out.pull_from(self._relay(first, model, options), options.signal)
        return out

    def _relay(self, first: AssistantMessageEventStream, model: Model,
               options: StreamOptions) -> Iterator[AssistantMessageEvent]:
        held: list[AssistantMessageEvent] = []
        events = iter(first)
        for event in events:
            if type(event) is StartEvent:
                held.append(event)
                continue
            if type(event) is ErrorEvent and event.error.stop_reason == "error" \
                    and is_context_overflow(event.error):
                if not self.retried:
                    yield from self._retry(event, model, options)
                    return
                # compacted and sent again, refused again: as pi, the run ends saying so
                self.emit(CompactionEndEvent("overflow", error_message=OVERFLOW_FAILED))
            yield from held
            yield event
            yield from events
            return
        yield from held

    def _retry(self, refused: ErrorEvent, model: Model, options: StreamOptions
               ) -> Iterator[AssistantMessageEvent]:
        signal = options.signal if options.signal is not None else AbortSignal()
        end = self._compact("overflow", model, signal, will_retry=True)
        if end.summary is None:
            refused.error.error_message = (
                f"{refused.error.error_message} (context overflow recovery failed: "
                f"{end.error_message})")
            yield refused
            return
        view: list[AgentMessage] = self._project()
        self.context = None  # the loop's context takes the projection at its next request
        self.retried = True
        config = self.config
        if config.transform_context is not None:
            view = config.transform_context(view, signal)
        retried = Context(list(config.convert_to_llm(view)))
        yield from self._relay(self.inner(model, retried, options), model, options)


def _after_summary(messages: list[AgentMessage]) -> int:
    """Where, in a context a hook made, the messages after its latest summary start: those
    made after the summary (the kept part before them is older). 0 without a summary."""
    for index in range(len(messages) - 1, -1, -1):
        summary = messages[index]
        if type(summary) is CompactionSummaryMessage:
            after = index + 1
            while after < len(messages) and \
                    getattr(messages[after], "timestamp", 0) <= summary.timestamp:
                after += 1
            return after
    return 0


def run_hooks(settings: Any, state: AgentState, link: StoreLink | None, run: RunRecord,
              config: AgentLoopConfig, emit: Callable[[AgentEvent], None],
              stream_fn: StreamFn | None) -> tuple[AgentLoopConfig, StreamFn]:
    """A run's config and stream function with compaction (``settings``) installed."""
    return CompactionRun(settings, state, link, run, config, emit, stream_fn).install()
