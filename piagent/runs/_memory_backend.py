"""The runs of a ``MemoryStore``: kept in this process's memory, readers woken by a Condition."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from ._backend import Control, ControlKind, SessionBusy, Wakers
from ._types import LIVE_STATES, RunInfo, RunState


@dataclass
class _Run:
    session_id: str
    owner: str
    lease_expires_at: float
    created_at: float
    changed: threading.Condition  # on the backend's lock: notified when the run changes
    state: RunState = "queued"
    error_message: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    events: list[str] = field(default_factory=list)  # pi-JSON texts, index = seq
    version: int = 0  # grows on every change readers may wait for

    def info(self, run_id: str, now: float) -> RunInfo:
        state = self.state
        if state in LIVE_STATES and self.lease_expires_at < now:
            state = "lost"
        return RunInfo(run_id, self.session_id, state, self.error_message, self.created_at,
                       self.started_at, self.ended_at)


@dataclass
class _Entry:
    control: Control
    session_id: str
    run_id: str | None
    claimed_by: str | None = None


class MemoryBackend:
    """Runs, events and the control inbox in dicts under one Condition."""

    control_poll_s: float | None = None  # every sender is in this process: its wakers tell the run

    def __init__(self) -> None:
        # guards _runs, _live, _inbox and every run's fields; each run's Condition is built on
        # it (readers of one run wake for that run only). Shared by every thread of the
        # process that starts, reads or controls these runs.
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._live: dict[str, str] = {}  # session_id -> its live run's id
        self._inbox: list[_Entry] = []  # in id order
        self._ids = itertools.count(1)  # inbox ids (next() under _lock)
        self._wakers = Wakers()

    def _changed(self, run: _Run) -> None:
        run.version += 1
        run.changed.notify_all()

    def create_run(self, run_id: str, session_id: str, owner: str, lease_s: float) -> None:
        now = time.time()
        with self._lock:
            live_id = self._live.get(session_id)
            if live_id is not None:
                live = self._runs[live_id]
                if live.state in LIVE_STATES and live.lease_expires_at >= now:
                    raise SessionBusy(session_id, live_id)
                if live.state in LIVE_STATES:
                    live.state, live.ended_at = "lost", live.lease_expires_at
                    self._changed(live)
                    # what the lost run had taken died with it (at most once)
                    self._inbox = [e for e in self._inbox
                                   if e.claimed_by != live_id and e.run_id != live_id]
            self._runs[run_id] = _Run(session_id, owner, now + lease_s, now,
                                      threading.Condition(self._lock))
            self._live[session_id] = run_id

    def _owned(self, run_id: str, owner: str) -> _Run | None:
        run = self._runs.get(run_id)
        if run is None or run.owner != owner or run.state not in LIVE_STATES:
            return None
        return run

    def set_running(self, run_id: str, owner: str) -> None:
        with self._lock:
            run = self._owned(run_id, owner)
            if run is not None and run.state == "queued":
                run.state, run.started_at = "running", time.time()
                self._changed(run)

    def renew(self, run_id: str, owner: str, lease_s: float) -> bool:
        now = time.time()
        with self._lock:
            run = self._owned(run_id, owner)
            if run is None or run.lease_expires_at < now:
                return False
            run.lease_expires_at = now + lease_s
            return True

    def finish(self, run_id: str, owner: str, state: RunState, error_message: str | None,
               last_events: tuple[int, Sequence[str]] | None = None) -> None:
        with self._lock:
            self._inbox = [e for e in self._inbox
                           if e.claimed_by != run_id and e.run_id != run_id]
            run = self._owned(run_id, owner)
            if run is None:
                return
            if last_events is not None:
                self._append(run_id, *last_events)
            run.state, run.error_message, run.ended_at = state, error_message, time.time()
            if self._live.get(run.session_id) == run_id:
                del self._live[run.session_id]
            self._changed(run)

    def append_events(self, run_id: str, first_seq: int, events: Sequence[str]) -> None:
        with self._lock:
            self._changed(self._append(run_id, first_seq, events))

    def _append(self, run_id: str, first_seq: int, events: Sequence[str]) -> _Run:
        """Under ``_lock``: the events stored, in order."""
        run = self._runs[run_id]
        if first_seq != len(run.events):
            msg = f"run {run_id!r}: events must be appended in order ({first_seq} after " \
                  f"{len(run.events)} events)."
            raise ValueError(msg)
        run.events.extend(events)
        return run

    def info(self, run_id: str) -> RunInfo | None:
        with self._lock:
            run = self._runs.get(run_id)
            return run.info(run_id, time.time()) if run is not None else None

    def watch(self, run_id: str) -> _MemoryWatch:
        return _MemoryWatch(self, run_id)

    def send_control(self, session_id: str, run_id: str | None, kind: ControlKind,
                     payload: str | None) -> None:
        with self._lock:
            self._inbox.append(_Entry(Control(next(self._ids), kind, payload), session_id, run_id))
        self._wakers.wake(session_id)

    def claim_controls(self, session_id: str, run_id: str) -> list[Control]:
        taken = []
        with self._lock:
            for entry in self._inbox:
                if entry.claimed_by is None and entry.session_id == session_id and (
                        entry.run_id is None or entry.run_id == run_id):
                    entry.claimed_by = run_id
                    taken.append(entry.control)
        return taken

    def release_controls(self, ids: Sequence[int]) -> None:
        wanted = set(ids)
        with self._lock:
            for entry in self._inbox:
                if entry.control.id in wanted:
                    entry.claimed_by = None

    def purge(self, older_than: float) -> list[str]:
        cutoff = time.time() - older_than
        with self._lock:
            gone = {run_id for run_id, run in self._runs.items() if run.state not in LIVE_STATES
                    and run.ended_at is not None and run.ended_at < cutoff}
            for run_id in gone:
                del self._runs[run_id]
            self._inbox = [e for e in self._inbox
                           if e.claimed_by not in gone and e.run_id not in gone]
        return sorted(gone)

    def add_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._wakers.add(session_id, wake)

    def remove_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._wakers.remove(session_id, wake)


class _MemoryWatch:
    """A reader of one run in memory; ``wait`` sleeps on the backend's Condition."""

    def __init__(self, backend: MemoryBackend, run_id: str) -> None:
        self._backend = backend
        self._run_id = run_id
        self._seen = -1  # the run's version at the last read/info/wait

    def _run(self) -> _Run:
        run = self._backend._runs.get(self._run_id)
        if run is None:
            msg = f"run {self._run_id!r} disappeared from the store (purged)"
            raise RuntimeError(msg)
        return run

    def read(self, after: int) -> list[tuple[int, str]]:
        with self._backend._lock:
            run = self._run()
            self._seen = run.version
            return [(seq, run.events[seq]) for seq in range(max(after + 1, 0), len(run.events))]

    def info(self) -> RunInfo:
        with self._backend._lock:
            run = self._run()
            return run.info(self._run_id, time.time())

    def wait(self, timeout: float) -> bool:
        with self._backend._lock:
            run = self._run()
            changed = run.changed.wait_for(lambda: run.version != self._seen, timeout)
            self._seen = run.version
            return bool(changed)

    def __enter__(self) -> _MemoryWatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None
