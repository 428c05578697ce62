"""``DjangoRunBackend``: the runs of a ``DjangoStore`` (``LocalRunner``, ``QueuedRunner``,
``CeleryRunner``) in the app's ``Run``, ``RunEvent`` and ``RunControl`` tables, in whichever
database the store uses (SQLite, PostgreSQL, MariaDB/MySQL).

Every write is one ``transaction.atomic`` block, retried as the store's are
(``DjangoStore._write``). One live run per session: MariaDB has no partial unique index, so
``create_run`` first locks the session's ``Session`` row (the lock the store's writers take)
and looks for a live run under it. Readers in this process are woken at once by a
Condition; readers in other processes notice a change by polling the run's state and last
event number every ``POLL_S`` (one indexed query; MariaDB has no LISTEN/NOTIFY, and every
database is polled the same way), and an executing run finds control sent from another
process by looking at its inbox every ``CONTROL_POLL_S``. Leases are kept in epoch seconds
by each machine's own clock (keep the clocks in sync, as NTP does).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections
from django.db.models import Q

from ...runs import RunInfo, RunState
from ...runs.backend import (
    LAPSED_BATCH,
    LIVE_STATES,
    RECOVERING,
    Control,
    ControlKind,
    SessionBusy,
    Take,
    Wakers,
    WatchedRuns,
)
from ._runs_watch import INFO_FIELDS, DjangoWatch, run_info
from ._store import DjangoStore, connected, from_column, key_of, lock_session, to_column

__all__ = ["CONTROL_POLL_S", "POLL_S", "PURGE_BATCH", "DjangoRunBackend"]

POLL_S = 0.05  # how often a reader looks for changes made by other processes
CONTROL_POLL_S = 0.2  # how often an executing run looks at its inbox (other processes' sends)
PURGE_BATCH = 500  # runs deleted per transaction by purge()
_LIVE = tuple(sorted(LIVE_STATES))


class DjangoRunBackend:
    """Runs, events and the control inbox in the ``DjangoStore``'s database."""

    control_poll_s: float | None = CONTROL_POLL_S
    poll_s: float = POLL_S
    purge_batch: int = PURGE_BATCH

    def __init__(self, store: DjangoStore) -> None:
        if not isinstance(store, DjangoStore):
            msg = f"store must be a DjangoStore, got {type(store).__name__}."
            raise TypeError(msg)
        from . import models  # the apps are loaded by now (a DjangoStore exists)

        self._store = store
        self.using = store.using
        self._models = models
        self._wakers = Wakers()
        # this process's commits to each watched run's events or state: same-process
        # readers wake at once (DjangoWatch)
        self.watched = WatchedRuns()
        self._poll_sql: str | None = None  # poll_sql(), made once (any thread: same text)

    def __repr__(self) -> str:
        return f"DjangoRunBackend({self._store!r})"

    # --- plumbing --------------------------------------------------------------------------

    def runs(self) -> Any:
        return self._models.Run.objects.using(self.using).order_by()

    def events(self) -> Any:
        return self._models.RunEvent.objects.using(self.using).order_by()

    def _controls(self) -> Any:
        return self._models.RunControl.objects.using(self.using).order_by()

    def poll_sql(self) -> str:
        """The readers' poll: a run's stored state and last event number, by its id. Plain
        SQL (built once from the models' tables): it runs every ``poll_s`` per waiting
        reader, and building it through the ORM each time costs ten times the query."""
        if self._poll_sql is None:
            quote = connections[self.using].ops.quote_name
            run, event = self._models.Run._meta, self._models.RunEvent._meta
            run_id, state = (quote(run.get_field(f).column) for f in ("run_id", "state"))
            of, seq = (quote(event.get_field(f).column) for f in ("run", "seq"))
            self._poll_sql = (f"SELECT r.{state}, (SELECT max(e.{seq}) FROM "
                              f"{quote(event.db_table)} e WHERE e.{of} = r.{run_id}) FROM "
                              f"{quote(run.db_table)} r WHERE r.{run_id} = %s")
        return self._poll_sql

    def _write(self, work: Callable[[], Any]) -> Any:
        with connected(self.using):
            return self._store._write(work)

    def _insert_events(self, run_id: str, first_seq: int, events: Sequence[str]) -> None:
        event = self._models.RunEvent
        self.events().bulk_create([event(run_id=run_id, seq=first_seq + i, data=text)
                                   for i, text in enumerate(events)])

    def _drop_controls(self, run_ids: Sequence[str]) -> None:
        self._controls().filter(Q(claimed_by__in=run_ids) | Q(run_id__in=run_ids)).delete()

    # --- runs ----------------------------------------------------------------------------

    def create_run(self, run_id: str, session_id: str, owner: str, lease_s: float) -> None:
        if connections[self.using].in_atomic_block:
            msg = (f"a run is recorded in its own transaction, but this thread is inside "
                   f"transaction.atomic on {self.using!r} (ATOMIC_REQUESTS?): the run's other "
                   f"threads could not see it. Start runs outside it (a view: "
                   f"@transaction.non_atomic_requests).")
            raise RuntimeError(msg)
        lost: list[str] = []

        def write() -> None:
            lost.clear()
            lock_session(self._store, session_id)  # the session's row lock, for this block
            now = time.time()
            for live_id, lease in self.runs().filter(
                    session_key=key_of(session_id), state__in=_LIVE).values_list(
                    "run_id", "lease_expires_at"):
                if lease >= now:
                    raise SessionBusy(session_id, live_id)
                self.runs().filter(run_id=live_id).update(state="lost", ended_at=lease)
                # what the lost run had taken died with it (at most once: it may have been used)
                self._drop_controls([live_id])
                lost.append(live_id)
            self.runs().create(run_id=run_id, session_key=key_of(session_id),
                               session_id=to_column(session_id), state="queued", owner=owner,
                               lease_expires_at=now + lease_s, created_at=now)
        self._write(write)
        self.watched.changed(run_id, *lost)

    def set_running(self, run_id: str, owner: str) -> None:
        self._write(lambda: self.runs().filter(run_id=run_id, owner=owner, state="queued")
                    .update(state="running", started_at=time.time()))
        self.watched.changed(run_id)

    def renew(self, run_id: str, owner: str, lease_s: float) -> bool:
        def write() -> bool:
            now = time.time()
            return bool(self.runs().filter(run_id=run_id, owner=owner, state__in=_LIVE,
                                           lease_expires_at__gte=now)
                        .update(lease_expires_at=now + lease_s) == 1)
        return bool(self._write(write))

    def finish(self, run_id: str, owner: str, state: RunState, error_message: str | None,
               last_events: tuple[int, Sequence[str]] | None = None) -> None:
        def write() -> None:
            self._drop_controls([run_id])
            ended = self.runs().filter(run_id=run_id, owner=owner, state__in=_LIVE).update(
                state=state, ended_at=time.time(),
                error_message=None if error_message is None else to_column(error_message))
            if last_events is not None and ended == 1:  # one commit: both or neither
                self._insert_events(run_id, *last_events)
        self._write(write)
        self.watched.changed(run_id)

    def take_run(self, run_id: str, owner: str, lease_s: float) -> Take:
        """For an executor in any process: hold a queued run, or a running one whose owner's
        lease ran out (to recover it). A queued run nobody took in time is recorded ``lost``.
        (As ``SQLiteBackend.take_run``; the run's row is locked while it decides.)"""
        def write() -> Take:
            now = time.time()
            row = self.runs().select_for_update().filter(run_id=run_id).values_list(
                "run_id", "state", "owner", "lease_expires_at").first()
            if row is None or row[0] != run_id or row[1] not in LIVE_STATES:
                return Take("final")
            _, state, holder, lease = row
            left = float(lease) - now
            if state == "queued" and left < 0:
                self.runs().filter(run_id=run_id).update(
                    state="lost", ended_at=lease,
                    error_message="no worker took the run before its queue lease ran out")
                return Take("final")
            if (state == "running" or holder == owner) and left >= 0 and \
                    not str(holder).startswith(RECOVERING):
                return Take("held", wait_s=left)  # a live executor (or this one, twice)
            self.runs().filter(run_id=run_id).update(owner=owner,
                                                     lease_expires_at=now + lease_s)
            last = self.events().filter(run_id=run_id).order_by("-seq").values_list(
                "seq", flat=True).first()
            return Take("fresh" if state == "queued" else "recover",
                        0 if last is None else int(last) + 1)
        take: Take = self._write(write)
        if take.kind != "held":
            self.watched.changed(run_id)
        return take

    def claim_lapsed(self, owner: str, hold_s: float) -> list[tuple[str, str]]:
        """The running runs whose lease ran out (their executor died), now held by ``owner``
        for ``hold_s`` (so one checker submits each recovery): ``(run_id, session_id)``.
        (As ``SQLiteBackend.claim_lapsed``; runs another checker holds are skipped.)"""
        def lapsed(now: float) -> Any:
            return self.runs().filter(state="running", lease_expires_at__lt=now)

        with connected(self.using):  # the common case: none, and no lock taken
            if not lapsed(time.time()).exists():
                return []
        skip = connections[self.using].features.has_select_for_update_skip_locked

        def write() -> list[tuple[str, str]]:
            now = time.time()
            rows = list(lapsed(now).select_for_update(skip_locked=skip).values_list(
                "run_id", "session_id")[:LAPSED_BATCH])
            ids = [run_id for run_id, _ in rows]
            # the condition again: without row locks (SQLite), the write lock decides
            held = lapsed(now).filter(run_id__in=ids).update(owner=owner,
                                                             lease_expires_at=now + hold_s)
            if held != len(ids):  # another checker took some between the two statements
                ids = list(self.runs().filter(run_id__in=ids, owner=owner).values_list(
                    "run_id", flat=True))
                rows = [row for row in rows if row[0] in ids]
            return [(str(run_id), from_column(session_id)) for run_id, session_id in rows]
        claimed: list[tuple[str, str]] = self._write(write)
        if claimed:
            self.watched.changed(*(run_id for run_id, _ in claimed))
        return claimed

    def append_events(self, run_id: str, first_seq: int, events: Sequence[str]) -> None:
        self._write(lambda: self._insert_events(run_id, first_seq, events))
        self.watched.changed(run_id)

    def info(self, run_id: str) -> RunInfo | None:
        with connected(self.using):
            return self.read_info(run_id)

    def read_info(self, run_id: str) -> RunInfo | None:
        """The run (``connected`` by the caller)."""
        row = self.runs().filter(run_id=run_id).values_list(*INFO_FIELDS).first()
        # run ids are compared exactly (MariaDB's collation ignores case)
        return None if row is None or row[0] != run_id else run_info(row, time.time())

    def watch(self, run_id: str) -> DjangoWatch:
        return DjangoWatch(self, run_id)

    def purge(self, older_than: float) -> list[str]:
        cutoff = time.time() - older_than

        def write() -> list[str]:
            ids = list(self.runs().exclude(state__in=_LIVE).filter(ended_at__lt=cutoff)
                       .values_list("run_id", flat=True)[:self.purge_batch])
            if ids:
                self.events().filter(run_id__in=ids).delete()
                self._drop_controls(ids)
                self.runs().filter(run_id__in=ids).delete()
            return [str(run_id) for run_id in ids]
        removed: list[str] = []
        while True:
            ids: list[str] = self._write(write)
            removed += ids
            if len(ids) < self.purge_batch:
                return removed

    # --- the control inbox -----------------------------------------------------------------

    def _open(self, session_id: str, run_id: str) -> Any:
        return self._controls().filter(Q(run_id__isnull=True) | Q(run_id=run_id),
                                       session_key=key_of(session_id),
                                       claimed_by__isnull=True).order_by("id")

    def send_control(self, session_id: str, run_id: str | None, kind: ControlKind,
                     payload: str | None) -> None:
        self._write(lambda: self._controls().create(
            session_key=key_of(session_id), session_id=to_column(session_id), run_id=run_id,
            kind=kind, payload=None if payload is None else to_column(payload),
            created_at=time.time()))
        self._wakers.wake(session_id)

    def claim_controls(self, session_id: str, run_id: str) -> list[Control]:
        with connected(self.using):  # the common case: nothing waits, no write
            if not self._open(session_id, run_id).exists():
                return []

        def write() -> list[Control]:
            ids = list(self._open(session_id, run_id).values_list("id", flat=True))
            # only those still unclaimed (no row locks on SQLite: the write lock decides)
            self._controls().filter(id__in=ids, claimed_by__isnull=True).update(
                claimed_by=run_id)
            rows = self._controls().filter(id__in=ids, claimed_by=run_id).order_by(
                "id").values_list("id", "kind", "payload", "run_id")
            return [Control(int(i), kind, None if payload is None else from_column(payload))
                    for i, kind, payload, target in rows if target in (None, run_id)]
        return list(self._write(write))

    def release_controls(self, ids: Sequence[int]) -> None:
        self._write(lambda: self._controls().filter(id__in=list(ids)).update(claimed_by=None))

    def add_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._wakers.add(session_id, wake)

    def remove_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._wakers.remove(session_id, wake)
