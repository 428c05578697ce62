"""``DjangoStore``: the session store on the app's models, in whichever database the site
configured (SQLite, PostgreSQL, MariaDB/MySQL).

Every write is one ``transaction.atomic`` block whose first statement updates (or creates)
the session's ``Session`` row: that row lock queues the writers of one session on every
worker and machine (SQLite locks the file at that first write), and ``next_seq`` hands out
the records' sequence numbers. Two writers creating the same new row at once and a deadlock
the database broke are retried from the start, a few times; SQLite's "database is locked"
after a pause (1 ms, doubling up to 50 ms), for up to 10 s. Inside an outer ``atomic``
block a retry goes back only as far as the database lets a savepoint go back.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from django.db import IntegrityError, OperationalError, connections, transaction
from django.db.models import Exists, F, Max, OuterRef

from ...messages import AgentMessage, AssistantMessage, ToolResultMessage
from ...policy import (
    ApprovalDecision,
    BudgetSpend,
    PendingApproval,
    check_budget_key,
    check_charge,
    check_decision,
)
from ...sessions.records import (
    check_messages,
    check_session_id,
    decision_to_json,
    decode_message,
    encode_message,
    live_rows,
    marked_call_id,
    pending_from_json,
    pending_to_json,
    unanswered_call_ids,
)

__all__ = ["DjangoStore"]

_ATTEMPTS = 20  # tries of one write when it is retried (see the module's docstring)
# SQLite's "database is locked": tried again after a pause doubling from the first to the
# last, for at most _LOCKED_FOR_S seconds in all
_FIRST_PAUSE_S, _LAST_PAUSE_S, _LOCKED_FOR_S = 0.001, 0.05, 10.0
_T = TypeVar("_T")
_P = ParamSpec("_P")


def _close_raw(wrappers: set[Any]) -> None:
    """Close the DB-API connections of a finished thread's Django connections."""
    for wrapper in wrappers:
        raw, wrapper.connection = wrapper.connection, None
        if raw is not None:
            try:
                raw.close()
            except Exception:  # noqa: BLE001 - the thread is gone; the server ends it too
                pass


class _ThreadConnections:
    """The Django connections a store used on one thread; when the thread ends (its
    ``_threads`` value is dropped) their DB-API connections are closed (``_close_raw``)."""

    def __init__(self) -> None:
        self.wrappers: set[Any] = set()
        weakref.finalize(self, _close_raw, self.wrappers)


# each thread's own _ThreadConnections (a thread-local: never shared between threads)
_threads = threading.local()


@contextmanager
def connected(using: str) -> Iterator[None]:
    """Around a call on database ``using``: a Django connection this thread opens is closed
    when the thread ends, so a thread of piagent's own (an Agent's run, a runner's
    supervisor) keeps one connection while it lives and leaves none behind (a request
    thread's is also closed by Django at the end of the request, as always). A connection an
    error made unusable is closed at once."""
    conn = connections[using]
    if conn.connection is None:
        mine = getattr(_threads, "connections", None)
        if mine is None:
            mine = _threads.connections = _ThreadConnections()
        mine.wrappers.add(conn)
    try:
        yield
    except Exception:
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()
        raise


def _connected(method: Callable[Concatenate[DjangoStore, _P], _T]
               ) -> Callable[Concatenate[DjangoStore, _P], _T]:
    """A store method run ``connected`` to the store's database."""

    @functools.wraps(method)
    def call(self: DjangoStore, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with connected(self.using):
            return method(self, *args, **kwargs)
    return cast("Callable[Concatenate[DjangoStore, _P], _T]", call)


def lock_session(store: DjangoStore, session_id: str) -> None:
    """Inside the caller's ``atomic`` block: lock the session's row (creating it) until the
    block ends, as every write of the store does first (the runs backend's one live run)."""
    store._reserve(session_id, 0)


def key_of(text: str) -> str:
    """The lookup key of an id: the SHA-256 of its UTF-8, lower-case hex."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def to_column(text: str) -> str:
    """``text`` for a text column: a backslash doubled, NUL as backslash-zero."""
    if "\\" not in text and "\x00" not in text:
        return text
    return text.replace("\\", "\\\\").replace("\x00", "\\0")


def from_column(text: str) -> str:
    """The inverse of :func:`to_column`."""
    if "\\" not in text:
        return text
    return re.sub(r"\\(.)", lambda m: "\x00" if m.group(1) == "0" else m.group(1), text,
                  flags=re.DOTALL)


def _rows(messages: object) -> list[tuple[str, str | None, str]]:
    """(kind, answered tool-call id or None, JSON) per message, all encoded before any write."""
    return [("assistant" if isinstance(m, AssistantMessage) else "message",
             m.tool_call_id if isinstance(m, ToolResultMessage) else None, encode_message(m))
            for m in check_messages(messages)]


class DjangoStore:
    """A ``SessionStore`` (and ``ApprovalStore``, ``BudgetStore``) on the models of
    ``piagent.contrib.django`` in the database ``using`` names (``"default"``): add the app
    to ``INSTALLED_APPS`` and run ``migrate``. Safe from any thread, worker and machine;
    ``append`` and ``replace`` are atomic."""

    def __init__(self, using: str = "default") -> None:
        if not isinstance(using, str) or not using:
            msg = f"using must name a database of settings.DATABASES, got {using!r}."
            raise ValueError(msg)
        from django.conf import settings

        if using not in settings.DATABASES:
            msg = (f"using={using!r} is not in settings.DATABASES "
                   f"(it has {', '.join(map(repr, settings.DATABASES)) or 'none'}).")
            raise ValueError(msg)
        from . import models  # the apps are loaded by now (django.setup())

        self.using = using
        self._models = models

    def __repr__(self) -> str:
        return f"DjangoStore(using={self.using!r})"

    # --- transactions ----------------------------------------------------------------------

    def _write(self, work: Callable[[], _T]) -> _T:
        """``work()`` in one atomic block, retried as the module's docstring says."""
        pause, deadline, attempt = _FIRST_PAUSE_S, time.monotonic() + _LOCKED_FOR_S, 0
        while True:
            try:
                with transaction.atomic(using=self.using):
                    return work()
            except IntegrityError:
                attempt += 1
                if attempt == _ATTEMPTS:
                    raise
            except OperationalError as exc:
                text = str(exc).lower()
                if "locked" in text or "busy" in text:
                    # SQLite refuses at once a transaction that read before it writes while
                    # another one holds the write lock (its busy timeout does not apply):
                    # wait for that one to end (a purge's batch), up to _LOCKED_FOR_S
                    if time.monotonic() + pause > deadline:
                        raise
                    time.sleep(pause)
                    pause = min(pause * 2, _LAST_PAUSE_S)
                    continue
                attempt += 1
                if attempt == _ATTEMPTS or not any(w in text for w in ("deadlock", "1213")):
                    raise

    def _sessions(self) -> Any:
        return self._models.Session.objects.using(self.using)

    def _records(self) -> Any:
        return self._models.Record.objects.using(self.using)

    def _approvals(self) -> Any:
        return self._models.Approval.objects.using(self.using)

    def _reserve(self, session_id: str, count: int) -> tuple[int, int]:
        """Lock the session's row (creating it) and take ``count`` sequence numbers:
        (the row's primary key, the next free number). The lock holds until the block ends."""
        key = key_of(session_id)
        if self._sessions().filter(key=key).update(next_seq=F("next_seq") + count):
            pk, end = self._sessions().filter(key=key).values_list("pk", "next_seq").get()
            return int(pk), int(end)
        # a new session; another writer creating it at once fails one of the two, retried
        row = self._sessions().create(key=key, session_id=to_column(session_id),
                                      next_seq=count)
        return int(row.pk), count

    def _pk(self, session_id: str) -> int | None:
        found = self._sessions().filter(key=key_of(session_id)).values_list("pk", flat=True)
        return next(iter(found), None)

    def _insert(self, pk: int, first: int,
                rows: Sequence[tuple[str, str | None, str | None]]) -> None:
        if rows:
            now, record = time.time(), self._models.Record
            self._records().bulk_create([
                record(session_id=pk, seq=first + i, kind=kind, created_at=now, data=data,
                       tool_call_id=None if call_id is None else to_column(call_id))
                for i, (kind, call_id, data) in enumerate(rows)])

    def _last_ask(self, pk: int) -> int:
        """The sequence number of the session's last assistant message, -1 when none: a mark
        or a waiting call belongs to its batch, and only a later tool result answers one."""
        last = self._records().filter(session_id=pk, kind="assistant").aggregate(m=Max("seq"))
        return -1 if last["m"] is None else int(last["m"])

    def _unanswered(self, pk: int | None) -> list[str]:
        """The last batch's start marks no tool result stored after it answers, in order."""
        if pk is None:
            return []
        rows = list(self._records().filter(session_id=pk, seq__gt=self._last_ask(pk),
                                           tool_call_id__isnull=False)
                    .order_by("seq").values_list("kind", "tool_call_id"))
        answered = {from_column(c) for kind, c in rows if kind != "started"}
        marks = [from_column(c) for kind, c in rows if kind == "started"]
        return [m for i, m in enumerate(marks) if m not in answered and m not in marks[:i]]

    # --- the SessionStore protocol ---------------------------------------------------------

    @_connected
    def load(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        rows = self._records().filter(session__key=key_of(session_id)).exclude(
            kind="started").order_by("seq").values_list("seq", "data")
        return [decode_message(session_id, seq, data) for seq, data in rows]

    @_connected
    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        rows = _rows(messages)
        if not rows:
            return
        asks = any(kind == "assistant" for kind, _, _ in rows)

        def write() -> None:
            pk, end = self._reserve(session_id, len(rows))
            self._insert(pk, end - len(rows), rows)
            if asks:  # a new reply: any waiting batch is over (completed or gone past)
                self._approvals().filter(session_id=pk).delete()
        self._write(write)

    @_connected
    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        rows = _rows(messages)
        asked = unanswered_call_ids(list(messages))

        def write() -> None:
            pk, _ = self._reserve(session_id, 0)  # the row lock; the numbers start again below
            marks = [m for m in self._unanswered(pk) if marked_call_id(m) in asked]
            self._records().filter(session_id=pk).delete()
            self._approvals().filter(session_id=pk, kind="since").delete()  # renumbered
            self._insert(pk, 0, [*rows, *(("started", mark, None) for mark in marks)])
            self._sessions().filter(pk=pk).update(next_seq=len(rows) + len(marks))
        self._write(write)

    @_connected
    def delete(self, session_id: str) -> None:
        check_session_id(session_id)

        def write() -> None:
            pk, _ = self._reserve(session_id, 0)
            self._records().filter(session_id=pk).delete()
            self._approvals().filter(session_id=pk).delete()
            self._sessions().filter(pk=pk).delete()
        self._write(write)

    @_connected
    def session_ids(self) -> list[str]:
        # EXISTS, not DISTINCT: MariaDB's collation would make "a" and "A" one
        found = self._sessions().filter(Exists(self._records().filter(
            session_id=OuterRef("pk")))).values_list("session_id", flat=True)
        return sorted(from_column(s) for s in found)

    @_connected
    def mark_started(self, session_id: str, tool_call_id: str) -> None:
        check_session_id(session_id)
        if not isinstance(tool_call_id, str):
            msg = f"tool_call_id must be a str, got {type(tool_call_id).__name__}."
            raise TypeError(msg)

        def write() -> None:
            pk, seq = self._reserve(session_id, 0)  # the row lock first: twice is once
            if tool_call_id in self._unanswered(pk):
                return
            self._sessions().filter(pk=pk).update(next_seq=seq + 1)
            self._insert(pk, seq, [("started", tool_call_id, None)])
        self._write(write)

    @_connected
    def started(self, session_id: str) -> set[str]:
        check_session_id(session_id)
        return set(self._unanswered(self._pk(session_id)))

    @_connected
    def last_activity(self, session_id: str) -> float | None:
        """When the session's last record was written (epoch seconds), ``None`` if unknown."""
        check_session_id(session_id)
        last = self._records().filter(session__key=key_of(session_id)).aggregate(
            m=Max("created_at"))["m"]
        return None if last is None else float(last)

    # --- approvals (piagent.policy.ApprovalStore) ------------------------------------------

    def _batch(self, pk: int | None) -> list[tuple[int, str, str, str | None]]:
        """The waiting batch's open rows, (position, kind, data, decision) in source order:
        those no tool result stored since the batch waited answers (``live_rows``; for a
        batch a ``replace`` renumbered, since the last assistant message)."""
        if pk is None:
            return []
        rows = list(self._approvals().filter(session_id=pk).order_by("position").values_list(
            "position", "kind", "tool_call_id", "data", "decision"))
        if not rows:
            return []
        since = next((int(r[3]) for r in rows if r[1] == "since"), None)
        rows = [r for r in rows if r[1] != "since"]
        first = self._last_ask(pk) + 1 if since is None else since
        answered = self._records().filter(session_id=pk, kind="message", seq__gte=first,
                                          tool_call_id__isnull=False).order_by(
            "seq").values_list("tool_call_id", flat=True)
        live = live_rows([from_column(r[2]) for r in rows], [from_column(a) for a in answered])
        return [(int(rows[i][0]), rows[i][1], rows[i][3], rows[i][4]) for i in live]

    @_connected
    def mark_waiting(self, session_id: str, pending: Sequence[PendingApproval],
                     held: Sequence[ToolResultMessage]) -> None:
        check_session_id(session_id)
        rows = [("pending", p.tool_call_id, pending_to_json(p)) for p in pending]
        rows += [("held", m.tool_call_id, encode_message(m)) for m in held]
        approval = self._models.Approval

        def write() -> None:
            pk, since = self._reserve(session_id, 0)  # the row lock; results from here on
            self._approvals().filter(session_id=pk).delete()
            self._approvals().bulk_create([
                approval(session_id=pk, position=i, kind=kind, tool_call_id=to_column(c),
                         data=data) for i, (kind, c, data) in enumerate(rows)]
                + [approval(session_id=pk, position=-1, kind="since", tool_call_id="",
                            data=str(since))])
        self._write(write)

    @_connected
    def decide(self, session_id: str, tool_call_id: str, decision: ApprovalDecision,
               digest: str | None) -> bool:
        check_session_id(session_id)

        def write() -> bool:
            pk, _ = self._reserve(session_id, 0)  # the row lock: one decision at a time
            rows = [r for r in self._batch(pk) if r[1] == "pending"]
            entries = [pending_from_json(data, made) for _, _, data, made in rows]
            index = check_decision(session_id, entries, tool_call_id, decision, digest)
            self._approvals().filter(session_id=pk, position=rows[index][0]).update(
                decision=decision_to_json(decision))
            return all(e.decision is not None for i, e in enumerate(entries) if i != index)
        return self._write(write)

    @_connected
    def approvals(self, session_id: str) -> list[PendingApproval]:
        check_session_id(session_id)
        return [pending_from_json(data, made)
                for _, kind, data, made in self._batch(self._pk(session_id))
                if kind == "pending"]

    @_connected
    def held_results(self, session_id: str) -> list[ToolResultMessage]:
        check_session_id(session_id)
        return [decode_message(session_id, seq, data)  # type: ignore[misc]  # tool results
                for seq, kind, data, _ in self._batch(self._pk(session_id)) if kind == "held"]

    @_connected
    def clear_approvals(self, session_id: str) -> None:
        check_session_id(session_id)
        self._write(lambda: self._approvals().filter(
            session__key=key_of(session_id)).delete())

    # --- budgets (piagent.policy.BudgetStore) -----------------------------------------------

    @_connected
    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend:
        """Add to what has been spent under ``key`` and return the new totals, atomically
        (every worker sees the other's charges); a charge of nothing reads the totals."""
        spent, used, asked = check_charge(cost, tokens, requests)
        key = check_budget_key(key)
        lookup = key_of(key)
        budgets = self._models.Budget.objects.using(self.using)

        def write() -> tuple[Any, ...]:
            now = time.time()
            if not budgets.filter(key=lookup).update(
                    cost=F("cost") + spent, tokens=F("tokens") + used,
                    requests=F("requests") + asked, updated_at=now):
                # a new key; two creating it at once: one is retried
                budgets.create(key=lookup, budget_key=to_column(key), cost=spent,
                               tokens=used, requests=asked, updated_at=now)
            return tuple(budgets.filter(key=lookup).values_list(
                "cost", "tokens", "requests").get())
        total = self._write(write)
        return BudgetSpend(float(total[0]), int(total[1]), int(total[2]))
