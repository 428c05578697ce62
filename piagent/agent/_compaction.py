"""An Agent's compaction (docs/compaction.md): the hooks a run gets when
``Agent(compaction=...)`` is set, and one compaction of the transcript.

Loaded only when compaction is configured: an agent without it runs no code of this module.
The transcript (``state.messages`` and the session store) keeps every message; a compaction
appends a ``CompactionSummaryMessage`` to both, and the requests are built from
``piagent.compaction.project`` of it. Per request: ``prepare_request`` swaps in the
projection when the transcript holds a summary the run's context has not taken in yet,
then compacts when the estimated context leaves less than ``reserve_tokens`` of the model's
window; the stream function, wrapped, compacts once and sends the request again when the
provider refuses it as too long.
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
from ..loop import AgentContext, AgentLoopConfig, PrepareRequestContext, RequestUpdate
from ..messages import AgentMessage, CompactionSummaryMessage, ThinkingLevel
from ..models import Model
from ..providers import is_context_overflow
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

    def install(self) -> tuple[AgentLoopConfig, StreamFn]:
        """The run's config with the ``prepare_request`` hook, and the stream function."""
        config = dataclasses.replace(self.config, prepare_request=self.prepare_request)
        return config, (self.stream if self.settings.auto else self.inner)

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
                yield from self._retry(event, model, options)
                return
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
        config = self.config
        if config.transform_context is not None:
            view = config.transform_context(view, signal)
        retried = Context(list(config.convert_to_llm(view)))
        yield from self.inner(model, retried, options)


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
