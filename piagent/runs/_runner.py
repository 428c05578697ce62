"""``LocalRunner``: runs addressed by id, executing on threads of the process that starts them.

Each run is one ``Agent`` (from ``make_agent``, attached to the store) and one supervisor
thread, ``piagent-runner``, owned by the run (``LocalRun``). Reading, waiting, steering,
aborting and purging are ``RunnerBase``'s.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence

from ..agent import Agent
from ..messages import AgentMessage, ImageContent
from ..sessions import SessionStore, check_session_id
from ._base import WAIT_SLICE_S, RunnerBase, check_timeout
from ._execution import LocalRun

__all__ = ["LocalRunner"]


class LocalRunner(RunnerBase):
    """Runs addressed by id (docs/sessions.md), executing on threads of this process.

    ``make_agent(session_id)`` returns an ``Agent`` with tools, model and hooks but no store;
    the runner attaches ``store`` and the session id, which loads the transcript. Every
    method may be called from any thread; with an ``SQLiteStore``, ``events``, ``steer``,
    ``follow_up``, ``abort``, ``status`` and ``wait`` work from any process on the machine.
    """

    def __init__(self, store: SessionStore, make_agent: Callable[[str], Agent],
                 lease_s: float = 30.0) -> None:
        super().__init__(store, make_agent, lease_s)
        # guards _local: the runs this runner executes, by id, until a wait or a later start
        # finds them finished. Any thread that starts or waits.
        self._lock = threading.Lock()
        self._local: dict[str, LocalRun] = {}

    def __repr__(self) -> str:
        return f"LocalRunner({self.store!r}, lease_s={self.lease_s:g})"

    # --- starting ---------------------------------------------------------------------

    def start(self, session_id: str, input: str | AgentMessage | Sequence[AgentMessage],
              images: Sequence[ImageContent] | None = None) -> str:
        """Start a run of ``session_id`` on ``input``; returns its id at once.

        ``AgentBusyError`` if the session has a live run in any process,
        ``ApprovalPendingError`` while calls of the session wait for a decision. When the
        stored transcript stops mid-run (a process died), the run first recovers it with
        ``agent.resume()`` and takes ``input`` as a follow-up.
        """
        check_session_id(session_id)
        self._check_not_waiting(session_id)
        return self._launch(session_id, input, images)

    def _start_continuation(self, session_id: str) -> str:
        """The run that executes the decided batch, on this process's threads."""
        return self._launch(session_id, None, None)

    def _launch(self, session_id: str, input: str | AgentMessage | Sequence[AgentMessage] | None,
                images: Sequence[ImageContent] | None) -> str:
        """Record a run and begin it here (``input=None``: a continuation, which recovers
        the stored transcript); its id. ``SessionBusy`` if the session has a live run."""
        agent = self._check_agent(session_id, self.make_agent(session_id))
        with self._lock:
            self._local = {k: v for k, v in self._local.items() if v.thread.is_alive()}
        run_id = uuid.uuid4().hex
        self._create_run(run_id, session_id, self._owner, self.lease_s)
        local = LocalRun(self._backend, run_id, session_id, agent, self._owner, self.lease_s)
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
        limit = check_timeout(timeout, "timeout", none_ok=True)
        deadline = None if limit is None else time.monotonic() + limit
        with self._lock:
            local = self._local.get(run_id)
        if local is not None:
            sliced = threading.current_thread() is threading.main_thread()  # Ctrl-C
            while local.thread.is_alive():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if sliced:  # elsewhere: one wake-up, when the run's thread ends
                    left = WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S)
                local.thread.join(left)
            with self._lock:
                self._local.pop(run_id, None)
            return True
        return self._wait_stored(run_id, deadline)
