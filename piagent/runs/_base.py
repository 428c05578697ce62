"""What every runner shares: the ``Runner`` protocol and ``RunnerBase``, which reads a run
by id, waits for it, steers, aborts and purges, all through the store's runs backend.

A runner subclass (``LocalRunner``, ``QueuedRunner``) adds how its runs start and execute.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, runtime_checkable

from ..agent import Agent
from ..messages import (
    AgentMessage,
    ImageContent,
    TextContent,
    UserMessage,
    message_to_dict,
    sanitize_surrogates,
)
from ..policy import PendingApproval
from ..sessions import SessionStore, check_session_id
from ._approvals import RunnerApprovalMethods
from ._backend import ControlKind, RunBackend, SessionBusy
from ._registry import backend_for
from ._types import FINAL_STATES, RunEvent, RunInfo, RunNotFoundError, event_id, parse_event_id

__all__ = ["END_GRACE_S", "LEASE_CHECK_S", "WAIT_SLICE_S", "Runner", "RunnerBase",
           "check_timeout", "new_owner", "wait_slice"]

WAIT_SLICE_S = 0.25  # blocking waits on the main thread wake this often (Ctrl-C)
# elsewhere no Ctrl-C can arrive: a wait on a stored run wakes when the run changes, and
# this often to see a lease that ran out (nothing is written when an executor dies)
LEASE_CHECK_S = 1.0


def wait_slice() -> float:
    """How long one slice of a blocking wait may last on this thread."""
    return WAIT_SLICE_S if threading.current_thread() is threading.main_thread() \
        else LEASE_CHECK_S
# start(): how long a session's run whose agent_end is stored may take to record its end
# before a new run of the session is refused as busy (this version stores agent_end with
# the end state in one step; a run another version executes may store it a moment first)
END_GRACE_S = 5.0


def new_owner() -> str:
    """A runner's name in the runs it holds: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def check_timeout(value: object, name: str, none_ok: bool, positive: bool = False
                  ) -> float | None:
    """``value`` as seconds (``None`` passes when ``none_ok``); ``ValueError`` naming ``name``
    for a negative number (zero too when ``positive``) or anything else."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
            or (positive and value == 0):
        accepted = "None or a number of seconds >= 0" if none_ok else "a number of seconds > 0"
        msg = f"{name} must be {accepted}, got {value!r}."
        raise ValueError(msg)
    return float(value)


def queued_message(message: object, where: str) -> str:
    """A steer/follow-up message as the pi-JSON text the inbox keeps."""
    if isinstance(message, str):
        message = UserMessage(content=[TextContent(message)])
    role = getattr(message, "role", None)
    if not isinstance(role, str):
        msg = (f"{where} accepts a str or a message (UserMessage(...), or a registered "
               f"application message), got {type(message).__name__}.")
        raise TypeError(msg)
    return sanitize_surrogates(json.dumps(message_to_dict(message),  # type: ignore[arg-type]
                                          ensure_ascii=False))


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

    def purge(self, older_than: float | datetime.timedelta) -> list[str]: ...

    def pending_approvals(self, session_id: str) -> list[PendingApproval]: ...

    def approve(self, session_id: str, tool_call_id: str, *, reason: str | None = None,
                digest: str | None = None) -> str | None: ...

    def deny(self, session_id: str, tool_call_id: str, *, reason: str | None = None,
             digest: str | None = None) -> str | None: ...


class RunnerBase(RunnerApprovalMethods):
    """What every runner shares: reading a run by id, waiting for it, steering, aborting,
    purging finished runs, deciding waiting tool calls (``RunnerApprovalMethods``)."""

    def __init__(self, store: SessionStore, make_agent: Callable[[str], Agent],
                 lease_s: float) -> None:
        self._backend: RunBackend = backend_for(store)
        if not callable(make_agent):
            msg = f"make_agent must be a callable session_id -> Agent, got {make_agent!r}."
            raise TypeError(msg)
        check_timeout(lease_s, "lease_s", none_ok=False, positive=True)
        self.store = store
        self.make_agent = make_agent
        self.lease_s = float(lease_s)
        self._owner = new_owner()  # this runner's name in the runs it holds

    @staticmethod
    def _check_agent(session_id: str, agent: object) -> Agent:
        """What ``make_agent(session_id)`` returned, if it is an ``Agent``."""
        if not isinstance(agent, Agent):
            msg = f"make_agent({session_id!r}) must return an Agent, got {type(agent).__name__}."
            raise TypeError(msg)
        return agent

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
        idle = check_timeout(timeout, "timeout", none_ok=False, positive=True)
        assert idle is not None  # none_ok=False
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
                watch.wait(min(left, wait_slice()))

    def wait(self, run_id: str, timeout: float | None = None) -> bool:
        """Wait until the run is final (done, error, aborted, lost, waiting); False if
        ``timeout`` seconds pass first."""
        self._info(run_id)
        limit = check_timeout(timeout, "timeout", none_ok=True)
        deadline = None if limit is None else time.monotonic() + limit
        return self._wait_stored(run_id, deadline)

    def _wait_stored(self, run_id: str, deadline: float | None) -> bool:
        lost_since: list[float] = []
        slice_ = wait_slice()
        with self._backend.watch(run_id) as watch:
            while not self._final(watch.info(), lost_since):
                left = slice_ if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                watch.wait(min(left, slice_))
        return True

    # --- control ----------------------------------------------------------------------

    def steer(self, session_id: str, message: str | AgentMessage) -> None:
        """Queue a steering message for the session's live run, else for its next run."""
        self._send(session_id, "steer", queued_message(message, "steer()"))

    def follow_up(self, session_id: str, message: str | AgentMessage) -> None:
        """Queue a follow-up message for the session's live run, else for its next run."""
        self._send(session_id, "follow_up", queued_message(message, "follow_up()"))

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

    # --- retention --------------------------------------------------------------------

    def purge(self, older_than: float | datetime.timedelta) -> list[str]:
        """Delete the runs that ended at least ``older_than`` ago (seconds, or a
        ``datetime.timedelta``; ``0``: every finished run), with their events and control
        entries; returns their ids.

        A live run (``queued`` or ``running``, even one whose lease ran out and reads
        ``lost``) is never deleted, nor is any transcript: those are the session store's.
        Safe from any process at any time (a cron job, a Celery beat task): it deletes in
        short batches, so runs go on meanwhile. A purged id reads ``RunNotFoundError``.
        """
        if isinstance(older_than, datetime.timedelta):
            seconds = older_than.total_seconds()
        elif isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
            seconds = float(older_than)
        else:
            msg = (f"older_than must be a number of seconds >= 0 or a datetime.timedelta, "
                   f"got {older_than!r}.")
            raise TypeError(msg)
        if not seconds >= 0:  # also refuses NaN
            msg = f"older_than must be >= 0 (how long ago a run ended), got {older_than!r}."
            raise ValueError(msg)
        return self._backend.purge(seconds)


