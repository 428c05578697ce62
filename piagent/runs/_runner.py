"""``LocalRunner``: runs addressed by id, executing on threads of the process that starts them.

Each run is one ``Agent`` (from ``make_agent``, attached to the store) and one supervisor
thread, ``piagent-runner``, owned by the run: it writes the run's events to the backend in
batches, renews the lease every ``lease_s / 3``, polls the control inbox and hands steer,
follow-up and abort to the Agent, and records the final state. It ends when the run ends.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ..abort import AbortSignal
from ..agent import Agent, AgentRun
from ..events import AgentEvent, event_to_dict
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
    message_from_dict,
    message_to_dict,
)
from ..sessions import MemoryStore, PostgresStore, SessionStore, SQLiteStore, check_session_id
from ._backend import Control, ControlKind, RunBackend, SessionBusy
from ._memory_backend import MemoryBackend
from ._postgres_backend import PostgresBackend
from ._sqlite_backend import SQLiteBackend
from ._types import (
    FINAL_STATES,
    RunEvent,
    RunInfo,
    RunNotFoundError,
    RunState,
    event_id,
    parse_event_id,
)

__all__ = ["LocalRunner", "Runner"]

logger = logging.getLogger("piagent.runs")

WAIT_SLICE_S = 0.25  # blocking waits wake this often (Ctrl-C, a lease that expired)
# start(): how long a session's run whose agent_end is stored may take to record its end
# before a new run of the session is refused as busy (readers see agent_end a moment first)
END_GRACE_S = 5.0
SUPERVISOR_ABORT_WAIT_S = 10.0  # after the supervisor fails: how long it waits for the Agent

# one backend per store object, shared by every runner on it in this process, so in-process
# readers and senders wake at once. Guarded by _BACKENDS_LOCK (any thread creating a runner).
_BACKENDS: weakref.WeakKeyDictionary[object, RunBackend] = weakref.WeakKeyDictionary()
_BACKENDS_LOCK = threading.Lock()


def backend_for(store: object) -> RunBackend:
    """The runs backend that lives beside ``store`` (``TypeError`` for stores without one)."""
    with _BACKENDS_LOCK:
        backend = _BACKENDS.get(store)
        if backend is None:
            if isinstance(store, MemoryStore):
                backend = MemoryBackend()
            elif isinstance(store, SQLiteStore):
                backend = SQLiteBackend(store)
            elif isinstance(store, PostgresStore):
                backend = PostgresBackend(store)
            else:
                msg = (f"a runner keeps its runs beside a MemoryStore, an SQLiteStore or a "
                       f"PostgresStore; {type(store).__name__} has no runs backend.")
                raise TypeError(msg)
            _BACKENDS[store] = backend
        return backend


def _check_timeout(value: object, name: str, none_ok: bool) -> float | None:
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        accepted = "None or a number of seconds >= 0" if none_ok else "a number of seconds > 0"
        msg = f"{name} must be {accepted}, got {value!r}."
        raise ValueError(msg)
    return float(value)


def _queued_message(message: object, where: str) -> str:
    """A steer/follow-up message as the pi-JSON text the inbox keeps."""
    if isinstance(message, str):
        message = UserMessage(content=[TextContent(message)])
    role = getattr(message, "role", None)
    if not isinstance(role, str):
        msg = (f"{where} accepts a str or a message (UserMessage(...), or a registered "
               f"application message), got {type(message).__name__}.")
        raise TypeError(msg)
    return json.dumps(message_to_dict(message), ensure_ascii=False)  # type: ignore[arg-type]


def _needs_resume(messages: Sequence[AgentMessage]) -> bool:
    """True when a transcript stops mid-run: a user or tool-result tail, or tool calls unanswered."""
    tail = next((m for m in reversed(messages) if not isinstance(m, SystemMessage)), None)
    if isinstance(tail, (UserMessage, ToolResultMessage)):
        return True
    return isinstance(tail, AssistantMessage) and tail.stop_reason == "toolUse" and any(
        getattr(block, "type", None) == "toolCall" for block in tail.content)


def _input_messages(input: str | AgentMessage | Sequence[AgentMessage],
                    images: Sequence[ImageContent] | None) -> list[AgentMessage]:
    """A run's input as messages (for queueing it behind a recovery)."""
    if isinstance(input, str):
        return [UserMessage(content=[TextContent(input), *(images or ())])]
    if images:
        msg = f"start(): images= goes with a str input, not {type(input).__name__}."
        raise TypeError(msg)
    if isinstance(input, (list, tuple)):
        return list(input)
    return [input]  # type: ignore[list-item]  # a message; the Agent checks its shape


@runtime_checkable
class Runner(Protocol):
    """What every runner offers (``LocalRunner``, ``QueuedRunner``, ``CeleryRunner``): type a
    view's runner with it to accept any of them."""

    def start(self, session_id: str, input: str | AgentMessage | Sequence[AgentMessage],
              images: Sequence[ImageContent] | None = None) -> str: ...

    def events(self, run_id: str, after: str | None = None,
               timeout: float = 15.0) -> Iterator[RunEvent | None]: ...

    def steer(self, session_id: str, message: str | AgentMessage) -> None: ...

    def follow_up(self, session_id: str, message: str | AgentMessage) -> None: ...

    def abort(self, run_id: str, reason: str | None = None) -> None: ...

    def status(self, run_id: str) -> RunInfo: ...

    def wait(self, run_id: str, timeout: float | None = None) -> bool: ...


class _Runner:
    """What every runner shares: reading a run by id, waiting for it, steering, aborting."""

    store: SessionStore
    _backend: RunBackend
    # how long a run whose lease ran out (a live state, no end recorded) still counts as
    # live to readers and waiters, because something may take it over (a redelivery)
    _lost_grace_s: float = 0.0

    def _final(self, info: RunInfo, lost_since: list[float]) -> bool:
        if info.state not in FINAL_STATES:
            lost_since.clear()
            return False
        if info.state == "lost" and info.ended_at is None and self._lost_grace_s > 0:
            now = time.monotonic()
            if not lost_since:
                lost_since.append(now)
            return now - lost_since[0] >= self._lost_grace_s
        return True

    def _create_run(self, run_id: str, session_id: str, owner: str, lease_s: float) -> None:
        """``create_run``; a live run that has stored its ``agent_end`` is waited for (at most
        ``END_GRACE_S``) instead of refused: its reader may have seen the end already."""
        try:
            self._backend.create_run(run_id, session_id, owner, lease_s)
        except SessionBusy as busy:
            if not self._stored_end(busy.run_id):
                raise
            self._wait_stored(busy.run_id, time.monotonic() + END_GRACE_S)
            self._backend.create_run(run_id, session_id, owner, lease_s)

    def _stored_end(self, run_id: str) -> bool:
        """Whether the run's last stored event is ``agent_end``."""
        last, after = None, -1
        with self._backend.watch(run_id) as watch:
            while rows := watch.read(after):
                after, last = rows[-1]
        return last is not None and json.loads(last).get("type") == "agent_end"

    # --- reading ----------------------------------------------------------------------

    def _info(self, run_id: str) -> RunInfo:
        if not isinstance(run_id, str):
            msg = f"run_id must be a str (from start()), got {type(run_id).__name__}."
            raise TypeError(msg)
        info = self._backend.info(run_id)
        if info is None:
            msg = f"No run {run_id!r} in {self.store!r}."
            raise RunNotFoundError(msg)
        return info

    def status(self, run_id: str) -> RunInfo:
        """The run as the store knows it (``RunNotFoundError`` for an unknown id)."""
        return self._info(run_id)

    def events(self, run_id: str, after: str | None = None,
               timeout: float = 15.0) -> Iterator[RunEvent | None]:
        """Every event of the run from ``agent_start`` (or from just after the event ``after``),
        then live ones, until ``agent_end``; ``None`` each time ``timeout`` seconds pass with
        no event. Ends early, after the last stored event, if the run is lost.
        """
        self._info(run_id)
        start = -1 if after is None else parse_event_id(after)
        idle = _check_timeout(timeout, "timeout", none_ok=False)
        if not idle:
            msg = f"timeout must be a number of seconds > 0, got {timeout!r}."
            raise ValueError(msg)
        if start >= 0:
            self._check_seen(run_id, start)
        return self._events(run_id, start, idle)

    def _check_seen(self, run_id: str, seq: int) -> None:
        """``ValueError`` unless the run has stored event ``seq``: a reader can only have
        seen those (a later id would skip events, ``agent_end`` among them, or wait for ever)."""
        with self._backend.watch(run_id) as watch:
            rows = watch.read(seq - 1)
        if not rows or rows[0][0] != seq:
            msg = (f"after={event_id(seq)!r} names no event of run {run_id!r} (its events so "
                   f"far: {len(self._stored_ids(run_id))}); pass an id this run's events() "
                   "yielded, or None for every event.")
            raise ValueError(msg)

    def _stored_ids(self, run_id: str) -> list[int]:
        ids: list[int] = []
        after = -1
        with self._backend.watch(run_id) as watch:
            while rows := watch.read(after):
                ids.extend(seq for seq, _ in rows)
                after = rows[-1][0]
        return ids

    def _events(self, run_id: str, after: int, idle: float) -> Iterator[RunEvent | None]:
        with self._backend.watch(run_id) as watch:
            deadline = time.monotonic() + idle
            lost_since: list[float] = []
            while True:
                rows = watch.read(after)
                for seq, text in rows:
                    event = json.loads(text)
                    after = seq
                    yield RunEvent(event_id(seq), event)
                    if event.get("type") == "agent_end":
                        return
                if rows:
                    deadline = time.monotonic() + idle
                    continue
                if self._final(watch.info(), lost_since):
                    if not watch.read(after):  # everything was stored before the final state
                        return
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    yield None
                    deadline = time.monotonic() + idle
                    continue
                watch.wait(min(left, WAIT_SLICE_S))

    def wait(self, run_id: str, timeout: float | None = None) -> bool:
        """Wait until the run is final (done, error, aborted, lost); False if ``timeout``
        seconds pass first."""
        self._info(run_id)
        limit = _check_timeout(timeout, "timeout", none_ok=True)
        deadline = None if limit is None else time.monotonic() + limit
        return self._wait_stored(run_id, deadline)

    def _wait_stored(self, run_id: str, deadline: float | None) -> bool:
        lost_since: list[float] = []
        with self._backend.watch(run_id) as watch:
            while not self._final(watch.info(), lost_since):
                left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                watch.wait(min(left, WAIT_SLICE_S))
        return True

    # --- control ----------------------------------------------------------------------

    def steer(self, session_id: str, message: str | AgentMessage) -> None:
        """Queue a steering message for the session's live run, else for its next run."""
        self._send(session_id, "steer", _queued_message(message, "steer()"))

    def follow_up(self, session_id: str, message: str | AgentMessage) -> None:
        """Queue a follow-up message for the session's live run, else for its next run."""
        self._send(session_id, "follow_up", _queued_message(message, "follow_up()"))

    def _send(self, session_id: str, kind: ControlKind, payload: str) -> None:
        check_session_id(session_id)
        self._backend.send_control(session_id, None, kind, payload)

    def abort(self, run_id: str, reason: str | None = None) -> None:
        """Fire the run's abort signal where it executes (no-op once it is final)."""
        if reason is not None and not isinstance(reason, str):
            msg = f"reason must be None or a str (it may travel between processes), got " \
                  f"{type(reason).__name__}."
            raise TypeError(msg)
        info = self._info(run_id)
        if info.live:
            self._backend.send_control(info.session_id, run_id, "abort", reason)


class LocalRunner(_Runner):
    """Runs addressed by id (docs/sessions.md), executing on threads of this process.

    ``make_agent(session_id)`` returns an ``Agent`` with tools, model and hooks but no store;
    the runner attaches ``store`` and the session id, which loads the transcript. Every
    method may be called from any thread; with an ``SQLiteStore``, ``events``, ``steer``,
    ``follow_up``, ``abort``, ``status`` and ``wait`` work from any process on the machine.
    """

    def __init__(self, store: SessionStore, make_agent: Callable[[str], Agent],
                 lease_s: float = 30.0) -> None:
        self._backend = backend_for(store)
        if not callable(make_agent):
            msg = f"make_agent must be a callable session_id -> Agent, got {make_agent!r}."
            raise TypeError(msg)
        lease = _check_timeout(lease_s, "lease_s", none_ok=False)
        if not lease:
            msg = f"lease_s must be a number of seconds > 0, got {lease_s!r}."
            raise ValueError(msg)
        self.store = store
        self.make_agent = make_agent
        self.lease_s = lease
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # guards _local: the runs this runner executes, by id, until a wait or a later start
        # finds them finished. Any thread that starts or waits.
        self._lock = threading.Lock()
        self._local: dict[str, _LocalRun] = {}

    def __repr__(self) -> str:
        return f"LocalRunner({self.store!r}, lease_s={self.lease_s:g})"

    # --- starting ---------------------------------------------------------------------

    def start(self, session_id: str, input: str | AgentMessage | Sequence[AgentMessage],
              images: Sequence[ImageContent] | None = None) -> str:
        """Start a run of ``session_id`` on ``input``; returns its id at once.

        ``AgentBusyError`` if the session has a live run in any process. When the stored
        transcript stops mid-run (a process died), the run first recovers it with
        ``agent.resume()`` and takes ``input`` as a follow-up.
        """
        check_session_id(session_id)
        agent = self.make_agent(session_id)
        if not isinstance(agent, Agent):
            msg = f"make_agent({session_id!r}) must return an Agent, got {type(agent).__name__}."
            raise TypeError(msg)
        with self._lock:
            self._local = {k: v for k, v in self._local.items() if v.thread.is_alive()}
        run_id = uuid.uuid4().hex
        self._create_run(run_id, session_id, self._owner, self.lease_s)
        local = _LocalRun(self._backend, run_id, session_id, agent, self._owner, self.lease_s)
        try:
            agent.attach_store(self.store, session_id)
            local.begin(input, images)
        except BaseException as exc:
            local.fail_to_start(exc)
            raise
        with self._lock:
            self._local[run_id] = local
        return run_id

    def wait(self, run_id: str, timeout: float | None = None) -> bool:
        """Wait until the run is final (done, error, aborted, lost); False if ``timeout``
        seconds pass first. A run executing here is waited for until its thread has ended."""
        self._info(run_id)
        limit = _check_timeout(timeout, "timeout", none_ok=True)
        deadline = None if limit is None else time.monotonic() + limit
        with self._lock:
            local = self._local.get(run_id)
        if local is not None:
            while local.thread.is_alive():
                left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                local.thread.join(min(left, WAIT_SLICE_S))
            with self._lock:
                self._local.pop(run_id, None)
            return True
        return self._wait_stored(run_id, deadline)

class _LocalRun:
    """One run executing in this process: its Agent, its events on their way, its supervisor."""

    def __init__(self, backend: RunBackend, run_id: str, session_id: str, agent: Agent,
                 owner: str, lease_s: float, next_seq: int = 0) -> None:
        self.backend = backend
        self.run_id = run_id
        self.session_id = session_id
        self.agent = agent
        self.owner = owner
        self.lease_s = lease_s
        # events from the Agent's worker thread (the listener appends) to the supervisor
        # (which pops): a deque, so both ends are thread-safe without a lock
        self._pending: deque[dict[str, Any]] = deque()
        self._next_seq = next_seq  # supervisor only; a recovered run goes on after its events
        self._saw_end = False  # supervisor only
        # set by the listener (an event), by a same-process send (control) and at the end
        self._wake = threading.Event()
        self._control_due = threading.Event()  # a same-process send: poll the inbox now
        self._claimed: list[tuple[Control, AgentMessage | None]] = []  # supervisor/start only
        self._unsubscribe: Callable[[], None] | None = None
        self.agent_run: AgentRun | None = None
        self.state: RunState = "running"  # the final state once the supervisor recorded it
        self.thread = threading.Thread(target=self._supervise, name="piagent-runner",
                                       daemon=True)

    # --- the start, on the caller's thread ------------------------------------------------

    def _listener(self, event: AgentEvent, signal: AbortSignal) -> None:
        self._pending.append(event_to_dict(event))  # a snapshot now: the partial moves on
        self._wake.set()

    def _on_control(self) -> None:
        self._control_due.set()
        self._wake.set()

    def begin(self, input: str | AgentMessage | Sequence[AgentMessage] | None,
              images: Sequence[ImageContent] | None, *, thread: bool = True) -> None:
        """Start the Agent on ``input`` (recovering a transcript left mid-run first), or,
        with ``input=None``, only recover it; then the supervisor, on its own thread or (with
        ``thread=False``) when the caller calls ``supervise()``."""
        self._unsubscribe = self.agent.subscribe(self._listener)
        self.backend.add_waker(self.session_id, self._on_control)
        self._deliver()  # steering and follow-ups that waited for this run
        if input is None:
            self.agent_run = self.agent.resume(block=False)
        elif _needs_resume(self.agent.state.messages):
            for message in _input_messages(input, images):
                self.agent.follow_up(message)
            self.agent_run = self.agent.resume(block=False)
        else:
            self.agent_run = self.agent.prompt(input, images, block=False)
        self.backend.set_running(self.run_id, self.owner)
        if thread:
            self.thread.start()

    def fail_to_start(self, exc: BaseException) -> None:
        """Undo a start that raised: the Agent stopped, the run recorded as an error."""
        if self.agent_run is not None and not self.thread.is_alive():
            self.agent_run.abort("the run could not start its supervisor")
            self.agent_run.wait(SUPERVISOR_ABORT_WAIT_S)
        self._cleanup()
        self.backend.finish(self.run_id, self.owner, "error", f"{type(exc).__name__}: {exc}")

    # --- the supervisor thread ------------------------------------------------------------

    def supervise(self) -> RunState:
        """The supervisor on the calling thread (a run begun with ``thread=False``)."""
        self._supervise()
        return self.state

    def _supervise(self) -> None:
        assert self.agent_run is not None
        failure: Exception | None = None
        try:
            self._loop(self.agent_run)
        except Exception as exc:
            failure = exc
            logger.exception("run %s: the supervisor failed; aborting the run", self.run_id)
            self.agent_run.abort(f"the run's supervisor failed: {exc}")
            self.agent_run.wait(SUPERVISOR_ABORT_WAIT_S)
        try:
            self._end(self.agent_run, failure)
        except Exception:
            logger.exception("run %s: its end could not be recorded; its lease will expire "
                             "and it will read 'lost'", self.run_id)

    def _loop(self, run: AgentRun) -> None:
        poll_s = self.backend.control_poll_s
        now = time.monotonic()
        poll_at = now if poll_s is not None else float("inf")
        renew_at = now + self.lease_s / 3
        while True:
            done = run.done  # read first: every event came before it settled
            self._flush()
            if done:
                return
            now = time.monotonic()
            if self._control_due.is_set() or now >= poll_at:
                self._control_due.clear()
                self._deliver()
                if poll_s is not None:
                    poll_at = now + poll_s
            if now >= renew_at:
                renew_at = now + self.lease_s / 3
                if not self.backend.renew(self.run_id, self.owner, self.lease_s):
                    self._lose(run)
            left = max(0.0, min(poll_at, renew_at) - time.monotonic())
            if self._saw_end and not self._wake.is_set():
                run.wait(left)  # agent_end is stored: only the settle is left
            else:
                self._wake.wait(left)
                self._wake.clear()

    def _lose(self, run: AgentRun) -> None:
        """The lease ran out (this process stalled longer than ``lease_s``): the run reads
        ``lost`` from now on, as it may already have to others, and the Agent stops."""
        text = (f"the run lost its lease (its process did not renew it within "
                f"{self.lease_s:g} s), so it was stopped")
        logger.error("run %s: %s", self.run_id, text)
        self.backend.finish(self.run_id, self.owner, "lost", text)
        run.abort(text)

    def _flush(self) -> None:
        batch = []
        while self._pending:
            event = self._pending.popleft()
            self._saw_end = self._saw_end or event.get("type") == "agent_end"
            batch.append(json.dumps(event, ensure_ascii=False, separators=(",", ":")))
        if batch:
            self.backend.append_events(self.run_id, self._next_seq, batch)
            self._next_seq += len(batch)

    def _deliver(self) -> None:
        for control in self.backend.claim_controls(self.session_id, self.run_id):
            if control.kind == "abort":
                self._claimed.append((control, None))
                if self.agent_run is not None:
                    self.agent_run.abort(control.payload)
                else:
                    self.agent.abort(control.payload)
                continue
            message = message_from_dict(json.loads(control.payload or "null"))
            self._claimed.append((control, message))
            if control.kind == "steer":
                self.agent.steer(message)
            else:
                self.agent.follow_up(message)

    def _cleanup(self) -> None:
        """Stop listening, and hand the inbox entries the Agent never used back to it."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.backend.remove_waker(self.session_id, self._on_control)
        unused = self.agent.take_queued_messages(lambda message: True)
        back = [c.id for c, m in self._claimed if m is not None and any(m is u for u in unused)]
        if back:
            self.backend.release_controls(back)

    def _end(self, run: AgentRun, failure: Exception | None) -> None:
        run.wait(SUPERVISOR_ABORT_WAIT_S)  # settled already: this joins the Agent's worker
        self._cleanup()
        error = run.error_message
        state: RunState = "done"
        if failure is not None:
            state, error = "error", f"the run's supervisor failed: {type(failure).__name__}: " \
                                    f"{failure}"
        elif error is not None:
            state = "aborted" if run.signal.aborted else "error"
        self.state = state
        self.backend.finish(self.run_id, self.owner, state, error)
