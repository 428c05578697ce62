"""``LocalRun``: one run executing in this process: its Agent, its events on their way to the
backend, and its supervisor (``LocalRunner`` and ``QueuedRunner`` both execute runs with it).

The supervisor, on its own thread ``piagent-runner`` or on the caller's, writes the run's
events to the backend in batches, renews the lease every ``lease_s / 3``, polls the control
inbox and hands steer, follow-up and abort to the Agent, and records the final state. It ends
when the run ends.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ..abort import AbortSignal
from ..agent import Agent, AgentRun, normalise_input
from ..events import AgentEvent, event_to_dict
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
    message_from_dict,
    sanitize_surrogates,
)
from ._backend import Control, RunBackend
from ._types import RunState

__all__ = ["LocalRun", "needs_resume"]

logger = logging.getLogger("piagent.runs")

SUPERVISOR_ABORT_WAIT_S = 10.0  # after the supervisor fails: how long it waits for the Agent


def needs_resume(messages: Sequence[AgentMessage]) -> bool:
    """True when a transcript stops mid-run: a user or tool-result tail, or tool calls unanswered."""
    tail = next((m for m in reversed(messages) if not isinstance(m, SystemMessage)), None)
    if isinstance(tail, (UserMessage, ToolResultMessage)):
        return True
    return isinstance(tail, AssistantMessage) and tail.stop_reason == "toolUse" and any(
        getattr(block, "type", None) == "toolCall" for block in tail.content)


class LocalRun:
    """One run executing in this process: its Agent, its events on their way, its supervisor."""

    def __init__(self, backend: RunBackend, run_id: str, session_id: str, agent: Agent,
                 owner: str, lease_s: float, next_seq: int = 0, resumed: bool = False) -> None:
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
        # a run another executor began (and died in): its stream goes on with run_resumed
        # where this Agent's agent_start would repeat it. Read by the Agent's worker.
        self.resumed = resumed and next_seq > 0
        self._saw_end = False  # supervisor only
        # supervisor only: agent_end (and anything after it), stored with the final state in
        # one step (backend.finish), so a reader that sees it sees the run ended too
        self._held: list[str] = []
        # set by the listener (an event), by a same-process send (control) and at the end
        self._wake = threading.Event()
        self._control_due = threading.Event()  # a same-process send: poll the inbox now
        # guards _claimed and makes each inbox read and its hand-over to the Agent one step:
        # the supervisor (in the background) and the Agent's worker (at each poll point) both
        # read the inbox, and a poll point must find what the other read already in the Agent
        self._inbox_lock = threading.Lock()
        self._claimed: list[tuple[Control, AgentMessage | None]] = []
        self._unsubscribe: Callable[[], None] | None = None
        self.agent_run: AgentRun | None = None
        self.state: RunState = "running"  # the final state once the supervisor recorded it
        self.thread = threading.Thread(target=self._supervise, name="piagent-runner",
                                       daemon=True)

    # --- the start, on the caller's thread ------------------------------------------------

    def _listener(self, event: AgentEvent, signal: AbortSignal) -> None:
        data = event_to_dict(event)  # a snapshot now: the partial moves on
        if self.resumed and event.type == "agent_start":
            self.resumed = False  # the stream has its agent_start: say what happened instead
            data = {"type": "run_resumed", "reason": "executor_lost",
                    "message": "the run's executor stopped renewing its lease; another one "
                               "resumed the run from its stored transcript"}
        self._pending.append(data)
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
        self.agent.before_poll = self._at_poll_point
        if input is None:
            self.agent_run = self.agent.resume(block=False)
        elif needs_resume(self.agent.state.messages):
            for message in normalise_input(input, images, "start()"):
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
        batch: list[str] = []
        while self._pending:
            event = self._pending.popleft()
            self._saw_end = self._saw_end or event.get("type") == "agent_end"
            # a lone surrogate (a tool's details, say) cannot be stored as UTF-8: removed
            text = sanitize_surrogates(json.dumps(event, ensure_ascii=False,
                                                  separators=(",", ":")))
            (self._held if self._saw_end else batch).append(text)
        if batch:
            self.backend.append_events(self.run_id, self._next_seq, batch)
            self._next_seq += len(batch)

    def _last_events(self) -> tuple[int, list[str]] | None:
        """The held events for ``backend.finish`` (``None``: none), taken once."""
        held, self._held = self._held, []
        if not held:
            return None
        first, self._next_seq = self._next_seq, self._next_seq + len(held)
        return first, held

    def _at_poll_point(self) -> None:
        """On the Agent's worker, at each poll point: what the inbox holds now goes to the
        Agent's queues before the loop reads them (a steer whose ``steer()`` returned before
        this point is taken here). A failed read is logged; the supervisor's next read, and
        the next poll point, try again."""
        try:
            self._deliver()
        except Exception:
            logger.exception("run %s: the inbox could not be read at a poll point",
                             self.run_id)

    def _deliver(self) -> None:
        with self._inbox_lock:
            self._deliver_locked()

    def _deliver_locked(self) -> None:
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
        self.agent.before_poll = None
        unused = self.agent.take_queued_messages(lambda message: True)
        with self._inbox_lock:
            back = [c.id for c, m in self._claimed
                    if m is not None and any(m is u for u in unused)]
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
        elif getattr(run, "waiting", False):  # calls wait for a decision (runs/_approvals.py)
            state = "waiting"
        self.state = state
        self._flush()  # what came after the loop's last flush (nothing, usually)
        self.backend.finish(self.run_id, self.owner, state, error, self._last_events())
