"""``RunRecord``: one run's record on the Agent's side, what its worker, its waiters and its
iterators share (``AgentRun`` is the caller's view of it).

A record holds the run's abort controller, its buffered events, the messages it added, the
queue input it took (``Takings``), its limits and output guard, the calls it ended waiting
for, and the event its callers wait on. The run's worker thread (``run_worker``) feeds it
through ``observe`` and settles it through ``settle``; any thread may wait for it.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import TYPE_CHECKING, Final

from ..abort import AbortController, AbortSignal
from ..events import AgentEvent
from ..messages import AgentMessage
from ._eventlog import EventLog
from ._queues import Takings

if TYPE_CHECKING:
    from ..loop import PendingApproval, RunGuard

__all__ = ["RUN_SETTLED", "WAIT_SLICE", "RunRecord", "RunSettled", "RunSlot", "on_main_thread"]

WAIT_SLICE = 0.05  # seconds: blocking waits on the main thread wake this often (Ctrl-C)


def on_main_thread() -> bool:
    """True on the thread that receives ``KeyboardInterrupt``: only its waits are sliced.

    Python runs signal handlers (and ``_thread.interrupt_main()``) on the main thread alone,
    so a wait anywhere else sleeps until it is woken, with no periodic wake-ups.
    """
    return threading.current_thread() is threading.main_thread()


class RunSettled(enum.Enum):
    """The type of ``RUN_SETTLED``."""

    SETTLED = "settled"


_PROVIDER_ABORT = "Request was aborted"  # pi-ai's words for a request the signal ended


def aborted_text(reason: object) -> str:
    """An aborted run's ``error_message``: the abort's reason, or "Operation aborted"."""
    return str(reason) if reason is not None and str(reason) else "Operation aborted"


RUN_SETTLED: Final = RunSettled.SETTLED
"""What ``AgentEventIterator.poll()`` returns once the run has settled and every event was read."""


class RunRecord:
    """One run's record. Written by the run's worker thread (``events``, ``messages``,
    ``error_message``, ``drop_marks``, ``pending``) and, before the worker starts, by the
    Agent that made it (``thread``, ``dedicated``); read by any thread.

    ``events_cond`` guards ``closed`` and ``readers``; it is notified when an event is
    recorded while a reader waits, and at ``settle``.
    """

    __slots__ = ("closed", "controller", "dedicated", "drop_marks", "error_message",
                 "events", "events_cond", "guard", "messages", "pending", "readers",
                 "settled", "takings", "thread", "worker_started")

    def __init__(self, takings: Takings, guard: RunGuard | None) -> None:
        self.takings = takings
        self.guard = guard  # limits and output (piagent.loop's RunGuard); read once settled
        self.controller = AbortController()
        self.settled = threading.Event()
        # the thread the run executes on: its own worker, or (a blocking call off the main
        # thread) the caller's; dedicated tells which, so a waiter joins only a worker
        self.thread: threading.Thread | None = None
        self.dedicated = True
        # set first thing on a dedicated worker thread (made with it; a run on the caller's
        # thread has none)
        self.worker_started: threading.Event | None = None
        self.events_cond = threading.Condition(threading.Lock())  # never taken twice
        self.readers = 0  # iterators waiting on events_cond (guarded by it)
        self.events = EventLog()  # appended by the worker only
        self.closed = False
        self.messages: list[AgentMessage] = []
        self.error_message: str | None = None
        # set by the worker when the run goes on past a stopped process's unfinished batch:
        # its start marks are dropped once the first assistant message is stored
        self.drop_marks = False
        self.pending: list[PendingApproval] | None = None  # set when it ends waiting

    @property
    def signal(self) -> AbortSignal:
        """The run's abort signal."""
        return self.controller.signal

    @property
    def done(self) -> bool:
        """True once the run has settled."""
        return self.settled.is_set()

    def abort(self, reason: object = None) -> None:
        """Abort the run (no-op once it is done)."""
        self.controller.abort(reason)

    # --- waiting ----------------------------------------------------------------------------

    def wait(self, timeout: float | None) -> bool:
        """Wait until the run settles (in slices on the main thread, so Ctrl-C arrives);
        False if ``timeout`` seconds pass first."""
        if not on_main_thread():  # nothing to interrupt it: one wake-up, when the run settles
            if not self.settled.wait(timeout):
                return False
            self._join_worker()
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            slice_ = WAIT_SLICE
            if deadline is not None:
                slice_ = min(slice_, max(0.0, deadline - time.monotonic()))
            if self.settled.wait(slice_):
                self._join_worker()
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _join_worker(self) -> None:
        thread = self.thread
        if self.dedicated and thread is not None and thread is not threading.current_thread():
            thread.join()  # settling is its last act: this returns at once

    def next_event(self, index: int, timeout: float | None) -> AgentEvent | RunSettled | None:
        """Event ``index``; ``None`` if it does not arrive within ``timeout`` seconds;
        ``RUN_SETTLED`` once the run has settled and every event was read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        sliced = on_main_thread()  # elsewhere: woken by the next event (or the settling)
        with self.events_cond:
            self.readers += 1  # before the check, so observe cannot miss a waiter
            try:
                while index >= len(self.events) and not self.closed:
                    slice_: float | None = WAIT_SLICE if sliced else None
                    if deadline is not None:
                        slice_ = deadline - time.monotonic()
                        if slice_ <= 0:
                            return None
                        slice_ = min(slice_, WAIT_SLICE) if sliced else slice_
                    self.events_cond.wait(slice_)
            finally:
                self.readers -= 1
            if index < len(self.events):
                return self.events[index]
        self.wait(None)  # closed just before settling: returns at once
        return RUN_SETTLED

    # --- the worker's -------------------------------------------------------------------------

    def observe(self, event: AgentEvent) -> None:
        """The worker thread's record of one event, before the listeners see it."""
        if event.type == "message_end":
            self.messages.append(event.message)
            self.takings.delivered(event.message)
        elif event.type == "turn_end":
            message = event.message
            if message.error_message:
                self.error_message = message.error_message
                if message.stop_reason == "aborted" and self.controller.signal.aborted \
                        and message.error_message.startswith(_PROVIDER_ABORT):
                    # one shape whatever the moment (docs/errors.md): the reason, not a
                    # provider's "Request was aborted: ..." (a hook's exception stays)
                    self.error_message = aborted_text(self.controller.signal.reason)
        elif event.type == "agent_end":
            self.takings.restore()  # before listeners, so they see the queues right
        self.events.append(event)
        if self.readers:  # nobody waiting (the usual case): no lock, no notify
            self.wake_readers()

    def wake_readers(self) -> None:
        """Wake the iterators waiting for the next event (the worker thread, after
        recording one)."""
        with self.events_cond:
            self.events_cond.notify_all()

    def kept(self, message: AgentMessage) -> None:
        """A message that reached the transcript but whose ``message_end`` failed before
        the listeners saw it (its store raised): the run added it, and it was delivered."""
        self.messages.append(message)
        self.takings.delivered(message)

    def settle(self) -> None:
        """The worker thread's last act: close the event buffer, wake every waiter."""
        with self.events_cond:
            self.closed = True
            self.events_cond.notify_all()
        self.settled.set()


class RunSlot:
    """An Agent's one run at a time. ``lock`` guards ``active`` (the check-and-set that
    starts a run, and its clearing) and ``last_worker``: the worker thread of the latest run
    (set with ``active``; after ``active`` is cleared the thread still has a few
    instructions to run, and ``wait_for_idle`` joins it so "idle" means it has ended)."""

    __slots__ = ("active", "last_worker", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: RunRecord | None = None
        self.last_worker: threading.Thread | None = None
