"""The private protocol a runs backend implements, and what every backend shares.

A backend keeps, in one store's medium, the runs (state, lease, times), each run's events
(pi-JSON text, numbered from 0) and the control inbox (steer / follow-up per session, abort
per run). The runner above it owns the threads; a backend only stores, claims and wakes.
A new medium (PostgreSQL, say) is one more class with these methods.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Protocol, TypeAlias

from ..errors import AgentBusyError
from ._types import RunInfo, RunState

ControlKind: TypeAlias = Literal["steer", "follow_up", "abort"]
# the owner prefix of a run whose recovery was submitted (``claim_lapsed``): an executor
# takes such a run at once, as one whose lease ran out
RECOVERING = "recovering:"
LAPSED_BATCH = 100  # runs claim_lapsed hands over per call
CONTROL_KINDS: frozenset[str] = frozenset({"steer", "follow_up", "abort"})


@dataclass(frozen=True)
class Control:
    """One inbox entry: ``payload`` is a message's pi-JSON text (steer, follow_up) or the
    abort reason (``None`` for none). ``id`` orders the entries of a session."""

    id: int
    kind: ControlKind
    payload: str | None


@dataclass(frozen=True)
class Take:
    """What an executor found when it asked for a run (``PostgresBackend.take_run``).

    ``fresh``: a queued run, now held by the asker, to be started on its input. ``recover``:
    a running run whose owner's lease ran out, now held by the asker, to be resumed.
    ``held``: another owner's lease holds for ``wait_s`` more seconds. ``final``: nothing to do.
    ``next_seq`` is the number of events the run already has.
    """

    kind: Literal["fresh", "recover", "held", "final"]
    next_seq: int = 0
    wait_s: float = 0.0


class Watch(Protocol):
    """One reader's view of one run: read its events and wait for news (owned by one thread)."""

    def read(self, after: int) -> list[tuple[int, str]]:
        """The events with a sequence number above ``after``, in order (some, maybe not all)."""

    def info(self) -> RunInfo:
        """The run as it is now."""

    def wait(self, timeout: float) -> bool:
        """Block until the run may have changed (new events, new state) or ``timeout`` passes;
        False on timeout. A spurious True is allowed."""

    def __enter__(self) -> Watch: ...

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class RunBackend(Protocol):
    """Where runs live. Every method may be called from any thread of any process that reaches
    the medium; each is atomic on its own."""

    @property
    def control_poll_s(self) -> float | None:
        """How often an executing run looks at the inbox; ``None`` when every sender is in
        this process (its wakers tell the run at once)."""

    def create_run(self, run_id: str, session_id: str, owner: str, lease_s: float) -> None:
        """Record a new ``queued`` run holding the session's lease.

        A live run of the session whose lease has expired is marked ``lost`` first; one whose
        lease holds makes this raise ``AgentBusyError``.
        """

    def set_running(self, run_id: str, owner: str) -> None:
        """``queued`` -> ``running`` (sets ``started_at``)."""

    def renew(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Extend the lease of a live run ``owner`` holds; False if it holds it no more."""

    def finish(self, run_id: str, owner: str, state: RunState, error_message: str | None,
               last_events: tuple[int, Sequence[str]] | None = None) -> None:
        """Record a final state (if ``owner`` still holds the run) and drop the run's
        delivered and undelivered control entries. ``last_events`` (``first_seq`` and the
        texts: the run's ``agent_end``) are stored in the same step, so no reader sees them
        before the final state."""

    def append_events(self, run_id: str, first_seq: int, events: Sequence[str]) -> None:
        """Store events ``first_seq``, ``first_seq + 1``, … (pi-JSON text) and wake readers."""

    def info(self, run_id: str) -> RunInfo | None:
        """The run, ``None`` for an unknown id. A live run whose lease expired reads ``lost``."""

    def watch(self, run_id: str) -> Watch:
        """A reader's handle on the run (a context manager; close it when done)."""

    def send_control(self, session_id: str, run_id: str | None, kind: ControlKind,
                     payload: str | None) -> None:
        """Put an entry in the inbox: steer/follow-up for a session, abort for a run."""

    def claim_controls(self, session_id: str, run_id: str) -> list[Control]:
        """Take, in order, the session's unclaimed steer/follow-up entries and the run's aborts,
        marking them claimed by ``run_id`` so no other run takes them."""

    def release_controls(self, ids: Sequence[int]) -> None:
        """Give claimed entries back to the inbox (the run ended before using them)."""

    def purge(self, older_than: float) -> list[str]:
        """Delete the final runs whose ``ended_at`` is more than ``older_than`` seconds ago
        (by the medium's clock), their events and control entries; their ids. Never a run in
        a live state. In batches, each its own transaction."""

    def add_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        """Call ``wake()`` whenever this process sends control to ``session_id``."""

    def remove_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        """Undo ``add_waker``."""


class Wakers:
    """The in-process wake-ups: which executing run to poke when a control entry is sent.

    A process-wide detail of one backend: entries in another process's medium are found by
    the run's poll, these only make a same-process send arrive at once.
    """

    def __init__(self) -> None:
        # guards _by_session; any thread adds, removes and sets
        self._lock = threading.Lock()
        self._by_session: dict[str, list[Callable[[], None]]] = {}

    def add(self, session_id: str, wake: Callable[[], None]) -> None:
        with self._lock:
            self._by_session.setdefault(session_id, []).append(wake)

    def remove(self, session_id: str, wake: Callable[[], None]) -> None:
        with self._lock:
            wakes = self._by_session.get(session_id, [])
            if wake in wakes:
                wakes.remove(wake)
            if not wakes:
                self._by_session.pop(session_id, None)

    def wake_all(self) -> None:
        with self._lock:
            wakes = [wake for wakes in self._by_session.values() for wake in wakes]
        for wake in wakes:
            wake()

    def wake(self, session_id: str) -> None:
        with self._lock:
            wakes = list(self._by_session.get(session_id, ()))
        for wake in wakes:
            wake()  # sets an Event: cannot block



class WatchedRuns:
    """The runs this process's readers watch, each with how many changes to it this process
    has seen: a reader ``enter``s, reads ``version(run_id)`` under ``cond``, and waits on
    ``cond`` for it to move; whoever learns of a change (a commit of this process, a
    database notice) calls ``changed``. Runs no reader watches are not counted.

    Thread safety: every method from any thread; ``version`` under ``cond``.
    """

    def __init__(self) -> None:
        # guards _entries (and what a backend keeps beside them); notified by changed()
        self.cond = threading.Condition()
        self._entries: dict[str, list[int]] = {}  # run id -> [readers, changes seen]

    def enter(self, run_id: str) -> None:
        with self.cond:
            self._entries.setdefault(run_id, [0, 0])[0] += 1

    def leave(self, run_id: str) -> None:
        with self.cond:
            entry = self._entries.get(run_id)
            if entry is not None:
                entry[0] -= 1
                if entry[0] <= 0:
                    del self._entries[run_id]

    def changed(self, *run_ids: str) -> None:
        """Count a change of each watched run of ``run_ids`` and wake the readers."""
        with self.cond:
            seen = False
            for run_id in run_ids:
                entry = self._entries.get(run_id)
                if entry is not None:
                    entry[1] += 1
                    seen = True
            if seen:
                self.cond.notify_all()

    def version(self, run_id: str) -> int:
        """How many changes of ``run_id`` were counted while it was watched (under ``cond``)."""
        entry = self._entries.get(run_id)
        return 0 if entry is None else entry[1]

class SessionBusy(AgentBusyError):
    """The ``AgentBusyError`` a backend raises: the session's live run is ``run_id``."""

    def __init__(self, session_id: str, run_id: str) -> None:
        super().__init__(busy_message(session_id, run_id))
        self.run_id = run_id


def busy_message(session_id: str, run_id: str) -> str:
    return (f"Session {session_id!r} already has a live run ({run_id!r}); wait for it, abort "
            "it, or steer it instead of starting another.")
