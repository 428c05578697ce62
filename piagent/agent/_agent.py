"""``Agent``: a transcript, two message queues, listeners, and runs on a worker thread.

State changes only through the event reducer (each event updates the state, then every
listener runs, in order, before the loop goes on). A run executes on its own worker thread,
except a blocking call off the main thread, which executes it on the calling thread. On the
main thread the caller waits in short slices, so Ctrl-C aborts the run cleanly.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ..abort import AbortSignal
from ..errors import AgentBusyError
from ..loop import (
    AfterToolCallContext,
    AfterToolCallResult,
    AgentLoopTurnUpdate,
    AgentTurnContext,
    BeforeToolCallContext,
    BeforeToolCallResult,
    Limits,
    PrepareRequestContext,
    RequestUpdate,
    TurnDecision,
    make_guard,
)
from ..messages import AgentMessage, ImageContent, Message, ThinkingLevel
from ..models import Model
from ..sessions import SessionStore
from ..stream import ClientIdentity, ProviderResponse, StreamFn
from ..tools import AgentTool, OutputSchema, ToolExecutionMode
from ..transcript import get_current_system_message
from ._approvals import AgentApprovalMethods, Approvals
from ._checks import check_agent, check_agent_keywords, check_timeout
from ._compact_api import CompactionMethods
from ._input import (
    RunInput,
    check_listener,
    continue_input,
    default_convert_to_llm,
    normalise_input,
    starting_transcript,
)
from ._interrupt import busy_text, still_running, wait_after_interrupt, wait_interruptibly
from ._persistence import StoreLink, check_store, stored_messages
from ._queue_api import QueueMethods
from ._queues import QueueLedger, QueueMode, Takings
from ._record import RunRecord, RunSlot, on_main_thread
from ._resume_warning import warn_unfinished
from ._run import AgentEventIterator, AgentRun, TypedRun
from ._setup import Listener, Listeners, RunSetup
from ._state import AgentState, StateWriter
from ._worker import run_worker

if TYPE_CHECKING:
    from ..compaction import Compaction

__all__ = ["Agent", "Listener"]

T = TypeVar("T")
_A = TypeVar("_A", bound="Agent")
PromptInput = str | AgentMessage | Sequence[AgentMessage]  # what prompt() takes
Images = Sequence[ImageContent] | None

# how long prompt(timeout=...) waits for an aborted run to stop before it gives up waiting
AFTER_ABORT_WAIT_S = 5.0

_BUSY_PROMPT = ("Agent is already processing a prompt. Use steer() or follow_up() to queue "
                "messages, or wait for completion.")
_BUSY_CONTINUE = "Agent is already processing. Wait for completion before continuing."
_BUSY_RESET = "Agent is already processing. Wait for completion before resetting."
_BUSY_RESUME = "Agent is already processing. Wait for completion before resuming."
_BUSY_REPLACE = ("Agent is already processing. Wait for completion before replacing the "
                 "transcript (agent.state.messages) of a session kept in a store.")


class Agent(QueueMethods, AgentApprovalMethods, CompactionMethods):
    """A stateful agent: a transcript, tools, hooks, two queues and listeners.

    Every option is a keyword, checked at the call (docs/errors.md); ``model`` may be a
    ``"PROVIDER/MODEL"`` str (``piagent.providers.resolve_model``). Hooks and options are
    public attributes: replace or wrap them between runs.

    With ``store=`` (a ``piagent.sessions`` store) and ``session_id=``, the transcript is
    loaded from the store when ``messages`` is empty, every message is appended at its
    ``message_end`` before any listener sees it, each tool call is marked started just
    before its ``execute``, and ``resume()`` recovers a run a stopped process left
    (docs/sessions.md). ``attach_store()`` does the same later.

    ``limits=`` (a ``Limits``, with an optional shared ``Budget``) ends each run at a
    request, tool-call, token, cost or time limit (docs/limits.md); ``output_type=`` asks
    every run for a typed final result, ``run.output`` (docs/output.md). Both are public
    attributes too, read when a run starts. ``compaction=`` (a ``piagent.compaction.Compaction``)
    summarises the older part of a long conversation before it overflows the model's
    context; ``compact()`` does it on demand (docs/compaction.md).

    ``before_poll`` (a public attribute, ``None`` by default) is called with no argument on
    the run's thread at each poll point, before the steering or follow-up queue is read: a
    runner (``piagent.runs``) reads its store's inbox there.

    Thread safety: every method may be called from any thread, including listeners and
    tools (``steer``, ``follow_up``, ``abort``, the queue methods, ``subscribe``). A
    second run while one is active raises ``AgentBusyError``. Listeners run on the run's
    worker thread, in subscription order, each a barrier; tools run on a pool thread. Do
    not wait for the agent's own run from inside a listener: that deadlocks.
    """

    def __new__(cls: type[_A], *args: Any, **kwargs: Any) -> _A:
        # a keyword __init__ does not take fails here, saying piagent's spelling for it
        check_agent_keywords(cls.__init__, args, kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        *,
        system_prompt: str = "",
        model: Model | str | None = None,
        tools: Iterable[AgentTool] = (),
        messages: Iterable[AgentMessage] = (),
        thinking_level: ThinkingLevel = "off",
        stream_fn: StreamFn | None = None,
        convert_to_llm: Callable[[list[AgentMessage]], Sequence[Message]] | None = None,
        transform_context: Callable[[list[AgentMessage], AbortSignal],
                                    list[AgentMessage]] | None = None,
        before_tool_call: Callable[[BeforeToolCallContext, AbortSignal],
                                   BeforeToolCallResult | None] | None = None,
        after_tool_call: Callable[[AfterToolCallContext, AbortSignal],
                                  AfterToolCallResult | None] | None = None,
        finish_turn: Callable[[AgentTurnContext, AbortSignal],
                              TurnDecision | None] | None = None,
        prepare_request: Callable[[PrepareRequestContext, AbortSignal],
                                  RequestUpdate | None] | None = None,
        prepare_next_turn: Callable[[AgentTurnContext, AbortSignal],
                                    AgentLoopTurnUpdate | None] | None = None,
        get_api_key: Callable[[str], str | None] | None = None,
        steering_mode: QueueMode = "one-at-a-time",
        follow_up_mode: QueueMode = "one-at-a-time",
        tool_execution: ToolExecutionMode = "parallel",
        max_parallel_tools: int | None = None,
        tool_executor: Executor | None = None,
        tool_timeout: float | None = None,
        session_id: str | None = None,
        api_key: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        max_retry_delay_ms: int | None = None,
        on_payload: Callable[[Any, Model], Any] | None = None,
        on_response: Callable[[ProviderResponse, Model], None] | None = None,
        on_provider_stream_event: Callable[[Any, Model], None] | None = None,
        identity: ClientIdentity | None = None,
        timeout_ms: float | None = None,
        env: Mapping[str, str] | None = None,
        telemetry: Any = None,
        store: SessionStore | None = None,
        limits: Limits | None = None,
        output_type: Any = None,
        compaction: Compaction | None = None,
    ) -> None:
        # every argument is checked here, at the call (docs/errors.md): a "PROVIDER/MODEL"
        # str comes back resolved, the tools and messages as lists (empty messages, the
        # default: "not given", the store's are used)
        model, tools, messages = check_agent(locals())
        self.limits, self.output_type = limits, output_type
        self.compaction = compaction  # checked by the property (docs/compaction.md)
        make_guard(limits, output_type)  # a wrong limits= or output_type= fails here
        if limits is not None:
            limits.check_model(model)  # a cost limit the model can never reach, too
        stored = [] if store is None else stored_messages(store, session_id, messages)
        # the session store and the session it keeps (``session_id`` is the same value, but
        # it is a public option for the provider that the caller may change)
        self._link: StoreLink | None = None
        self._state = AgentState(model, thinking_level, tools, list(stored) if stored else
                                 starting_transcript(messages, system_prompt, tools))
        self._writer = StateWriter(self._state)  # the state's one writer (reducer, resets)
        self.stream_fn = stream_fn
        self.convert_to_llm = convert_to_llm or default_convert_to_llm
        self.transform_context = transform_context
        self.before_tool_call = before_tool_call
        self.after_tool_call = after_tool_call
        self.finish_turn = finish_turn
        self.prepare_request = prepare_request
        self.prepare_next_turn = prepare_next_turn
        self.get_api_key = get_api_key
        self.tool_execution = tool_execution
        self.max_parallel_tools = max_parallel_tools
        self.tool_executor = tool_executor
        self.tool_timeout = tool_timeout
        self.session_id = session_id
        self.api_key = api_key
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.max_retry_delay_ms = max_retry_delay_ms
        self.on_payload, self.on_response = on_payload, on_response
        self.on_provider_stream_event, self.identity = on_provider_stream_event, identity
        self.timeout_ms, self.env = timeout_ms, env
        self.telemetry = telemetry  # the explicit parent of the runs' spans (piagent.otel)
        self._queues = QueueLedger(steering_mode, follow_up_mode)
        self._listeners = Listeners()
        self._slot = RunSlot()  # the one active run, its lock, the latest worker thread
        # the poll hook: called on the run's thread at each poll point, before the queues
        # are read (a runner of piagent.runs reads its store's inbox there, so input sent
        # from another process by then is in them). Read when a run starts; None (the
        # default) costs nothing.
        self.before_poll: Callable[[], None] | None = None
        # calls waiting for approval (docs/approvals.md)
        self._approvals = Approvals(self._writer, self._slot)
        if store is not None and session_id is not None:
            self._connect(store, session_id, stored)

    def _connect(self, store: SessionStore, session_id: str,
                 stored: list[AgentMessage]) -> None:
        """Make ``store`` the agent's (see ``StoreLink``)."""
        self._link = self._approvals.link = StoreLink(store, session_id, self._writer, stored)
        self.session_id = session_id
        self._writer.hand_assignments_to(self._assign_messages)
        self._approvals.waiting = True  # the session may hold a waiting batch: checked once

    def __repr__(self) -> str:
        model = self._state.model.id if self._state.model is not None else None
        run = "running" if self._slot.active is not None else "idle"
        return (f"<Agent model={model!r} messages={len(self._state.messages)} "
                f"tools={len(self._state.tools)} {run}>")

    # --- state and configuration ---------------------------------------------------------

    @property
    def state(self) -> AgentState:
        """The live state."""
        return self._state

    @property
    def tool_executor(self) -> Executor | None:
        """The caller-owned executor tools run on; ``None``: a pool per run (the default).

        Never shut down by the agent. Assigning anything but a ``concurrent.futures.Executor``
        or ``None`` raises ``TypeError``; a new value takes effect at the next run.
        """
        return self._tool_executor

    @tool_executor.setter
    def tool_executor(self, executor: Executor | None) -> None:
        if executor is not None and not isinstance(executor, Executor):
            msg = (f"tool_executor must be a concurrent.futures.Executor (a "
                   f"ThreadPoolExecutor, say) or None, not {type(executor).__name__}.")
            raise TypeError(msg)
        self._tool_executor = executor

    @property
    def signal(self) -> AbortSignal | None:
        """The active run's abort signal, or ``None`` when idle."""
        run = self._slot.active
        return run.signal if run is not None else None

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event, signal)`` for every event; returns the unsubscribe function.

        Raises ``TypeError`` at once if ``listener`` is not callable or cannot take the two
        arguments (``lambda event: ...`` is the usual slip: write ``lambda event, signal: ...``).
        """
        check_listener(listener)
        return self._listeners.add(listener)

    # --- runs ---------------------------------------------------------------------------

    @overload
    def prompt(self, input: PromptInput, images: Images = None, *, block: bool = True,
               timeout: float | None = None, output_type: None = None) -> AgentRun: ...

    @overload
    def prompt(self, input: PromptInput, images: Images = None, *, block: bool = True,
               timeout: float | None = None, output_type: OutputSchema[T]) -> TypedRun[T]: ...

    @overload
    def prompt(self, input: PromptInput, images: Images = None, *, block: bool = True,
               timeout: float | None = None, output_type: type[T]) -> TypedRun[T]: ...

    @overload
    def prompt(self, input: PromptInput, images: Images = None, *, block: bool = True,
               timeout: float | None = None, output_type: object) -> TypedRun[Any]: ...

    def prompt(self, input: PromptInput, images: Images = None, *, block: bool = True,
               timeout: float | None = None, output_type: object = None) -> AgentRun:
        """Start a run with new input; by default wait until it settles.

        ``input`` is a str (with optional ``images``), a message or a list of messages.
        With ``timeout`` the run is aborted and waited for, then ``TimeoutError`` raised.
        ``output_type`` (else the agent's) asks for a typed final result (docs/output.md).
        """
        prompts = normalise_input(input, images)
        self._approvals.check_idle("prompt()")
        warn_unfinished(self._link, self._slot.active is not None, "prompt()")
        return self._call(_BUSY_PROMPT, lambda takings: (prompts, False, None), block, timeout,
                          output_type)

    def continue_(self, *, block: bool = True, timeout: float | None = None) -> AgentRun:
        """Continue from the transcript (a retry after an error, or queued input).

        With a user or tool-result tail the loop continues as is. With an assistant tail
        the queued steering (else follow-up) messages are run as a prompt.
        """
        self._approvals.check_idle("continue_()")
        warn_unfinished(self._link, self._slot.active is not None, "continue_()")
        return self._call(_BUSY_CONTINUE, lambda takings: continue_input(
            self._state.messages, self._queues, takings), block, timeout)

    def resume(self, *, block: bool = True, timeout: float | None = None) -> AgentRun:
        """Finish what a stopped process left unfinished, then go on (docs/sessions.md).

        When the transcript ends in tool calls without results, they run now in one batch
        with the usual events: a call the store never marked started runs through the
        usual hooks; one that started runs again only if its tool's ``replay`` is
        ``"safe"``, otherwise its result is an error saying the process stopped while it
        ran, its outcome is unknown, and it was not repeated. The loop then goes on as
        after any batch. Any other transcript resumes as ``continue_()`` (a complete
        assistant answer is a ``ValueError``). Needs a session store.
        """
        return self._call(_BUSY_RESUME, self._resume_input, block, timeout)

    def stream(self, input: str | AgentMessage | Sequence[AgentMessage],
               images: Sequence[ImageContent] | None = None) -> AgentEventIterator:
        """Start a run and iterate its events as they happen; closing it aborts the run."""
        return AgentEventIterator(self.prompt(input, images, block=False))

    def abort(self, reason: object = None) -> None:
        """Abort the active run (no-op when idle)."""
        run = self._slot.active
        if run is not None:
            run.abort(reason)

    def wait_for_idle(self, timeout: float | None = None) -> bool:
        """Wait until no run is active; False if ``timeout`` seconds pass first."""
        timeout = check_timeout(timeout)
        run = self._slot.active
        if run is not None:
            return wait_interruptibly(run, timeout)
        worker = self._slot.last_worker
        if worker is not None and worker is not threading.current_thread() \
                and worker.ident is not None:
            worker.join(timeout)  # settling is its last act: this returns at once
            return not worker.is_alive()
        return True

    def reset(self) -> None:
        """Back to the replayed system message alone; clears the queues and errors.

        With a session store the stored transcript is replaced the same way first.
        """
        with self._slot.lock:
            if self._slot.active is not None:
                raise AgentBusyError(_BUSY_RESET)
            head = get_current_system_message(self._state.messages)
            messages: list[AgentMessage] = [head] if head is not None else []
            self._replace_stored(messages)
            self._writer.reset(messages)
            self._queues.clear()

    # --- session store ------------------------------------------------------------------

    @property
    def store(self) -> SessionStore | None:
        """The session store the transcript is kept in, or ``None``."""
        link = self._link
        return link.store if link is not None else None

    def attach_store(self, store: SessionStore, session_id: str) -> None:
        """Keep the transcript in ``store`` under ``session_id`` from now on.

        As ``Agent(store=..., session_id=...)`` does: a session the store holds messages
        for becomes the agent's transcript; an empty one receives the agent's current
        messages (its initial system message). ``session_id`` also becomes the provider
        session id. ``AgentBusyError`` while a run is active.
        """
        check_store(store, session_id, "attach_store()")
        with self._slot.lock:
            if self._slot.active is not None:
                msg = "Agent is already processing. Wait for completion before attaching a store."
                raise AgentBusyError(msg)
            self._connect(store, session_id, store.load(session_id))

    def _replace_stored(self, messages: list[AgentMessage]) -> None:
        """Make ``messages`` the stored transcript (no-op without a store)."""
        if self._link is not None:
            self._link.replace(messages)

    def _assign_messages(self, messages: list[AgentMessage]) -> None:
        """An assignment to ``state.messages`` with a store: refused while a run is live
        (its own appends would race the replacement), except on the run's own thread (a
        listener), where nothing else touches the transcript meanwhile."""
        with self._slot.lock:
            run = self._slot.active
            if run is not None and run.thread is not threading.current_thread():
                raise AgentBusyError(_BUSY_REPLACE)
            self._replace_stored(messages)
            self._writer.assign(messages)

    # --- run machinery --------------------------------------------------------------------

    def _resume_input(self, takings: Takings) -> RunInput:
        if self._link is None:
            msg = ("resume() needs a session store: create the agent with "
                   "Agent(store=..., session_id=...) or call attach_store(store, session_id).")
            raise ValueError(msg)
        return self._approvals.resume_input(self._link.resume_input(self._queues, takings))

    def _call(self, busy_message: str, choose: Callable[[Takings], RunInput],
              block: bool, timeout: float | None, output_type: object = None) -> AgentRun:
        """Start a run, then wait for it as asked.

        A ``KeyboardInterrupt`` anywhere after the worker thread was created (``Thread.start``
        waits for the new thread, so Ctrl-C often lands there) aborts the run and waits for
        it to settle, as one during the wait does; a second one escapes at once.
        """
        timeout = check_timeout(timeout)
        guard = make_guard(self.limits, self.output_type if output_type is None else output_type)
        if self.limits is not None:
            self.limits.check_model(self._state.model)  # the model may have changed since
        record = RunRecord(self._queues.takings(), guard)
        run = (TypedRun if guard is not None and guard.output is not None else AgentRun)(record)
        # blocking, no timeout, off the main thread: nothing else needs the caller, and no
        # Ctrl-C can reach it, so the run executes right here (no worker thread)
        here = block and timeout is None and not on_main_thread()
        try:
            self._start(record, busy_message, choose, here)
            if here or (not block and timeout is None):
                return run
            settled = record.wait(timeout)
        except KeyboardInterrupt:
            if record.thread is not None:
                wait_after_interrupt(record)  # says what lingers; a second one stops waiting
            raise
        if not settled:
            run.abort()
            if not run.wait(AFTER_ABORT_WAIT_S):
                msg = (f"The run did not finish within {timeout} seconds, so it was aborted, "
                       f"but {still_running(record)} has not stopped {AFTER_ABORT_WAIT_S:g} s "
                       "after the abort (it ignores its signal). The run ends when it "
                       "returns; until then the agent is busy (agent.wait_for_idle()).")
                raise TimeoutError(msg)
            msg = f"The run did not finish within {timeout} seconds, so it was aborted."
            raise TimeoutError(msg)
        return run

    def _start(self, run: RunRecord, busy_message: str,
               choose: Callable[[Takings], RunInput], here: bool = False) -> None:
        """Start ``run`` on a worker thread, or with ``here`` execute it on this thread
        (returning once it has settled). Either way it runs in a copy of the caller's
        contextvars context, with the one ``RunSetup`` built here."""
        context = contextvars.copy_context()
        slot = self._slot
        with slot.lock:
            if slot.active is not None:
                raise AgentBusyError(busy_text(slot.active, busy_message))
            prompts, skip_poll, started = choose(run.takings)
            setup = RunSetup(run, self._writer, self, self._link, self._listeners, self._queues,
                             self._approvals.loop_options(run), self._settle, prompts,
                             skip_poll, started)
            slot.active = run
            self._writer.run_started()
            if here:
                run.thread, run.dedicated = threading.current_thread(), False
                slot.last_worker = None  # no thread to join for "idle"
            else:
                thread = threading.Thread(target=context.run, args=(run_worker, setup),
                                          name="piagent-run", daemon=True)
                # known before the thread starts, so a wait that sees the run settled joins it
                run.thread = slot.last_worker = thread
                run.worker_started = worker_up = threading.Event()
        if here:
            context.run(run_worker, setup)
            return
        try:
            thread.start()
        except BaseException:
            # Ctrl-C inside start(), or "can't start new thread": if the worker never runs,
            # undo the start here, or the agent would stay busy for ever
            if not worker_up.wait(1.0):
                run.thread = None
                with slot.lock:
                    slot.last_worker = None
                run.takings.restore()
                self._settle(run)
            raise

    def _start_decided(self) -> AgentRun:
        """The run that completes a batch whose last call was just decided (on a worker
        thread, as ``continue_(block=False)``)."""
        return self._call(_BUSY_CONTINUE, self._approvals.continue_input, False, None)

    def _settle(self, run: RunRecord) -> None:
        with self._slot.lock:
            self._writer.run_settled()
            self._slot.active = None
        run.settle()

