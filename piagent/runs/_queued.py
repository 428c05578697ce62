"""``QueuedRunner``: runs recorded here and executed by whichever process takes them.

``start`` records a ``queued`` run and hands ``(run_id, payload)`` to ``submit`` (a task
queue's send: ``piagent.celery`` is one); the process that receives it calls
``execute(run_id, payload)``, which takes the run in the store (atomically: one executor at
a time), runs it on the calling thread with ``LocalRunner``'s supervisor (events, lease,
inbox, final state) and returns when it is final. An ``execute`` of a run whose executor
died (the same payload delivered again) waits for that executor's lease to run out, then
recovers the transcript with ``agent.resume()`` (each tool's ``replay`` policy; docs/sessions.md).

Recovery is driven by the lease, not by the task queue's redelivery: ``recover_lost()``,
called every few seconds from something already running (``CeleryRunner`` calls it from each
worker), hands every running run whose lease ran out to ``submit`` with a recovery payload
(no input: the stored transcript is resumed). The recovered run's event stream goes on with
a ``run_resumed`` event where the new executor's ``agent_start`` would be.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from ..agent import Agent, normalise_input
from ..loop import get_tracing
from ..messages import AgentMessage, ImageContent, message_from_dict, message_to_dict
from ..sessions import SessionStore, check_session_id
from ._backend import RECOVERING, Take
from ._base import RunnerBase, check_timeout, wait_slice
from ._execution import LocalRun, needs_resume
from ._registry import backend_for
from ._traces import keep_trace, kept_trace
from ._types import RunState

__all__ = ["QueuedRunner"]

logger = logging.getLogger("piagent.runs")

PAYLOAD_VERSION = 1


class _Taking(Protocol):
    def take_run(self, run_id: str, owner: str, lease_s: float) -> Take: ...

    def claim_lapsed(self, owner: str, hold_s: float) -> list[tuple[str, str]]: ...


class QueuedRunner(RunnerBase):
    """Runs addressed by id (docs/sessions.md) that execute wherever ``execute`` is called.

    ``submit(run_id, payload)`` sends a run to an executor (``payload`` is a JSON-able dict);
    the executor, built with the same ``store`` and ``make_agent``, calls
    ``execute(run_id, payload)``. ``lease_s`` is the executing process's lease;
    ``queue_timeout`` how long a run may wait for an executor before it reads ``lost``;
    ``redelivery_grace`` how long a run whose executor died still reads as live to
    ``events`` and ``wait`` (a redelivery may take it over). Needs an ``SQLiteStore`` or a
    ``PostgresStore`` (a ``MemoryStore`` cannot be reached from another process).
    """

    def __init__(self, store: SessionStore, make_agent: Callable[[str], Agent],
                 submit: Callable[[str, dict[str, Any]], None], *, lease_s: float = 30.0,
                 queue_timeout: float = 600.0, redelivery_grace: float = 60.0) -> None:
        backend = backend_for(store)
        if not hasattr(backend, "take_run"):
            msg = (f"{type(self).__name__} needs a store other processes reach (SQLiteStore, "
                   f"PostgresStore, piagent.contrib.django's DjangoStore), got {type(store).__name__}.")
            raise TypeError(msg)
        super().__init__(store, make_agent, lease_s)
        if not callable(submit):
            msg = f"submit must be a callable (run_id, payload) -> None, got {submit!r}."
            raise TypeError(msg)
        check_timeout(queue_timeout, "queue_timeout", none_ok=False, positive=True)
        self._lost_grace_s = check_timeout(redelivery_grace, "redelivery_grace",
                                            none_ok=False) or 0.0
        self._taker: _Taking = backend  # type: ignore[assignment]
        self.submit = submit
        self.queue_timeout = float(queue_timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r}, lease_s={self.lease_s:g})"

    # --- starting, where the request is ---------------------------------------------------

    def start(self, session_id: str, input: str | AgentMessage | Sequence[AgentMessage],
              images: Sequence[ImageContent] | None = None) -> str:
        """Record a queued run of ``session_id`` on ``input`` and submit it; its id at once.

        ``AgentBusyError`` if the session has a live run anywhere, ``ApprovalPendingError``
        while calls of the session wait for a decision. If ``submit`` raises, the run is
        recorded as an error and the exception propagates.
        """
        check_session_id(session_id)
        messages = [message_to_dict(m) for m in normalise_input(input, images, "start()")]
        self._check_not_waiting(session_id)
        return self._submit_new(session_id, {"v": PAYLOAD_VERSION, "session_id": session_id,
                                             "input": messages})

    def _start_continuation(self, session_id: str) -> str:
        """Submit the run that executes the decided batch (no input: the executor recovers
        the stored transcript, whose batch is decided now)."""
        return self._submit_new(session_id, {"v": PAYLOAD_VERSION, "session_id": session_id,
                                             "input": [], "continue": True})

    def _submit_new(self, session_id: str, payload: dict[str, Any]) -> str:
        tracing = get_tracing()  # piagent.otel: the run joins this request's trace
        carrier = tracing.carrier() if tracing is not None else None
        if carrier:
            payload["trace"] = carrier
        run_id = uuid.uuid4().hex
        owner = f"queued:{self._owner}"
        self._create_run(run_id, session_id, owner, self.queue_timeout)
        if carrier:  # and beside the run, for an executor whose payload lacks it
            keep_trace(self._backend, run_id, carrier)
        try:
            self.submit(run_id, payload)
        except BaseException as exc:
            self._backend.finish(run_id, owner, "error",
                                 f"the run could not be submitted: {type(exc).__name__}: {exc}")
            raise
        return run_id

    # --- executing, where the run was sent ------------------------------------------------

    def execute(self, run_id: str, payload: dict[str, Any],
                deadline: float | None = None) -> RunState | None:
        """Execute a submitted run on this thread until it is final; its final state, or
        ``None`` when there was nothing to do (it is final already, or another executor
        finished it while this one waited for its lease).

        A run held by a live executor is waited for (its lease, renewed, may hold for the
        whole run); ``deadline`` (``time.monotonic()``) bounds that wait (``TimeoutError``).
        """
        if not isinstance(payload, dict) or payload.get("v") != PAYLOAD_VERSION:
            msg = f"execute() takes the payload start() submitted, got {payload!r}."
            raise ValueError(msg)
        session_id = payload["session_id"]
        recovery = payload.get("recover") is True  # from recover_lost(): no input
        if recovery:  # a live executor has it already (a recovery sent twice): nothing to do
            take: Take | None = self._taker.take_run(run_id, self._owner, self.lease_s)
            if take is not None and take.kind in ("held", "final"):
                take = None
        else:
            take = self._take(run_id, deadline)
        if take is None:
            return None
        try:  # a make_agent that fails ends the run (else every recovery would fail again)
            made = self.make_agent(session_id)
        except Exception as exc:
            self._backend.finish(run_id, self._owner, "error",
                                 f"make_agent({session_id!r}) failed: {type(exc).__name__}: "
                                 f"{exc}")
            raise
        try:
            agent = self._check_agent(session_id, made)
        except TypeError as exc:
            self._backend.finish(run_id, self._owner, "error", str(exc))
            raise
        local = LocalRun(self._backend, run_id, session_id, agent, self._owner, self.lease_s,
                          next_seq=take.next_seq, resumed=take.kind == "recover")
        try:
            agent.attach_store(self.store, session_id)
            messages = [message_from_dict(m) for m in payload["input"]]
            stored = [message_to_dict(m) for m in agent.state.messages]
            if take.kind == "recover" and not recovery and payload["input"] and \
                    payload["input"][0] not in stored:
                take = Take("fresh", take.next_seq)  # it died before its input was stored
                local.resumed = False
            if take.kind == "recover":
                if not needs_resume(agent.state.messages):
                    return self._nothing_to_resume(run_id, recovery)
                logger.warning("run %s: its executor died; recovering the transcript", run_id)
                with self._joined(run_id, payload):
                    local.begin(None, None, thread=False)
            else:  # a continuation (runs/_approvals.py) has no input: it recovers
                with self._joined(run_id, payload):
                    local.begin(None if payload.get("continue") is True else messages, None,
                                thread=False)
        except BaseException as exc:
            local.fail_to_start(exc)
            raise
        return local.supervise()

    def _nothing_to_resume(self, run_id: str, recovery: bool) -> RunState:
        """A recovered run whose transcript does not stop mid-run: it ended and its end went
        unrecorded (``done``), or, for a recovery payload (which carries no input), its
        executor died before it stored the run's input (``error``: send it again)."""
        if recovery and not self._input_stored(run_id):
            text = ("the run's executor died before the run's input was stored; the input "
                    "is lost: send it again")
            logger.error("run %s: %s", run_id, text)
            self._backend.finish(run_id, self._owner, "error", text)
            return "error"
        logger.warning("run %s: recovered with nothing left to run", run_id)
        self._backend.finish(run_id, self._owner, "done", None)
        return "done"

    def _input_stored(self, run_id: str) -> bool:
        """Whether the run's events hold a user message's ``message_end``."""
        after = -1
        with self._backend.watch(run_id) as watch:
            while rows := watch.read(after):
                after = rows[-1][0]
                for _, text in rows:
                    event = json.loads(text)
                    if event.get("type") == "message_end" and \
                            event.get("message", {}).get("role") == "user":
                        return True
        return False

    # --- recovery, from whatever runs periodically ----------------------------------------

    def recover_lost(self) -> list[str]:
        """Submit the recovery of every running run whose lease ran out (its executor died
        or stalled longer than ``lease_s``); the ids submitted.

        Safe from any number of processes at once: each lapsed run is handed to one caller,
        which holds it for ``lease_s`` while the recovery waits for an executor (if that
        executor never comes, a later call submits it again). ``CeleryRunner`` calls this
        from each worker every ``lease_check_s``; with another task queue, call it every few
        seconds from a process that runs anyway (a scheduler, a worker's timer).
        """
        holder = f"{RECOVERING}{self._owner}"
        submitted = []
        for run_id, session_id in self._taker.claim_lapsed(holder, self.lease_s):
            payload = {"v": PAYLOAD_VERSION, "session_id": session_id, "input": [],
                       "recover": True}
            try:
                self.submit(run_id, payload)
            except Exception:  # the hold runs out and a later call tries again
                logger.exception("run %s: its recovery could not be submitted", run_id)
                continue
            logger.warning("run %s: its executor's lease ran out; recovery submitted", run_id)
            submitted.append(run_id)
        return submitted

    def _joined(self, run_id: str, payload: dict[str, Any]) -> AbstractContextManager[object]:
        """The starting request's trace context (the payload's, else the one kept beside
        the run) made current while the run starts (its threads copy it), when
        ``piagent.otel`` is on."""
        tracing = get_tracing()
        if tracing is None:
            return nullcontext()
        carrier = payload.get("trace")
        if not isinstance(carrier, dict):
            carrier = kept_trace(self._backend, run_id)
        return tracing.joined(carrier) if carrier else nullcontext()

    def _take(self, run_id: str, deadline: float | None) -> Take | None:
        while True:
            take = self._taker.take_run(run_id, self._owner, self.lease_s)
            if take.kind == "final":
                return None
            if take.kind != "held":
                return take
            # another executor holds it: wait for its end or for its lease to run out
            with self._backend.watch(run_id) as watch:
                until = time.monotonic() + take.wait_s + 0.05
                while time.monotonic() < until:
                    if not watch.info().live:  # ended, or its lease ran out
                        break
                    if deadline is not None and time.monotonic() >= deadline:
                        msg = f"run {run_id!r} is still held by another executor"
                        raise TimeoutError(msg)
                    watch.wait(min(wait_slice(), max(0.0, until - time.monotonic())))

