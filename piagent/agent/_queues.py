"""The Agent's two message queues, and the ledger of what each run took from them.

A run takes queued input when the loop polls; the input counts as delivered once its
``message_end`` has been emitted. Whatever a run took and did not deliver goes back to the
front of its queue, in order, when the run ends for any reason (docs/concepts.md): user input is
never lost. ``QueueLedger`` owns both queues and their lock; ``Takings`` is one run's record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Literal, TypeAlias

from ..messages import AgentMessage, SystemMessage

__all__ = ["PendingQueue", "QueueLedger", "QueueMode", "QueueView", "Takings", "check_mode"]

QueueMode: TypeAlias = Literal["one-at-a-time", "all"]
"""How a queue is drained: one message per poll, or everything queued."""


def check_mode(mode: str, what: str) -> QueueMode:
    if mode == "one-at-a-time":
        return "one-at-a-time"
    if mode == "all":
        return "all"
    msg = f"{what} must be 'one-at-a-time' or 'all', got {mode!r}."
    raise ValueError(msg)


class PendingQueue:
    """A FIFO of messages drained one at a time or all at once (``mode`` is live).

    Thread safety: every method may be called from any thread; both queues of an Agent
    share one lock (the ledger's), so operations on both are atomic together.
    """

    def __init__(self, mode: QueueMode, lock: threading.RLock) -> None:
        self.mode: QueueMode = mode
        self._lock = lock  # the ledger's lock; guards _messages
        self._messages: list[AgentMessage] = []

    def enqueue(self, message: AgentMessage) -> None:
        with self._lock:
            self._messages.append(message)

    def has_items(self) -> bool:
        with self._lock:
            return bool(self._messages)

    def peek(self) -> list[AgentMessage]:
        with self._lock:
            if self.mode == "all":
                return list(self._messages)
            return self._messages[:1]

    def drain(self) -> list[AgentMessage]:
        with self._lock:
            drained = self.peek()
            del self._messages[:len(drained)]
            return drained

    def clear(self) -> None:
        with self._lock:
            self._messages.clear()

    def take(self, predicate: Callable[[AgentMessage], bool]) -> list[AgentMessage]:
        with self._lock:
            taken = [m for m in self._messages if predicate(m)]
            if taken:
                ids = {id(m) for m in taken}
                self._messages = [m for m in self._messages if id(m) not in ids]
            return taken

    def restore_front(self, messages: Iterable[AgentMessage]) -> None:
        """Put messages back at the front, in their order."""
        with self._lock:
            self._messages[:0] = list(messages)


class QueueView:
    """A read-only view of one of an Agent's queues: ``agent.steering_queue`` or
    ``agent.follow_up_queue`` (pi's ``steeringQueue`` / ``followUpQueue``).

    ``messages`` is a snapshot (a tuple, oldest first) taken under the queue's lock;
    changing the queue goes through ``steer()``, ``follow_up()`` and the ``clear_*`` /
    ``take_queued_messages()`` methods.
    """

    __slots__ = ("_queue",)

    def __init__(self, queue: PendingQueue) -> None:
        self._queue = queue

    @property
    def messages(self) -> tuple[AgentMessage, ...]:
        """Every queued message, oldest first (a snapshot)."""
        with self._queue._lock:
            return tuple(self._queue._messages)

    @property
    def mode(self) -> QueueMode:
        """How the queue is drained: "one-at-a-time" or "all"."""
        return self._queue.mode

    def __len__(self) -> int:
        with self._queue._lock:
            return len(self._queue._messages)

    def __repr__(self) -> str:
        return f"QueueView(mode={self.mode!r}, messages={list(self.messages)!r})"


class QueueLedger:
    """The steering and follow-up queues of one Agent, and the runs' takings from them."""

    def __init__(self, steering_mode: QueueMode, follow_up_mode: QueueMode) -> None:
        # guards both queues' contents and every Takings of this ledger, so that taking,
        # restoring and multi-queue operations are atomic together
        self.lock = threading.RLock()
        self.steering = PendingQueue(check_mode(steering_mode, "steering_mode"), self.lock)
        self.follow_up = PendingQueue(check_mode(follow_up_mode, "follow_up_mode"), self.lock)

    def takings(self) -> Takings:
        """A new, empty record for one run."""
        return Takings(self)

    def clear(self) -> None:
        with self.lock:
            self.steering.clear()
            self.follow_up.clear()

    def has_items(self) -> bool:
        with self.lock:
            return self.steering.has_items() or self.follow_up.has_items()

    def peek(self) -> list[AgentMessage]:
        """What the next drain would take: the steering selection, else the follow-up one."""
        with self.lock:
            return self.steering.peek() or self.follow_up.peek()

    def take(self, predicate: Callable[[AgentMessage], bool]) -> list[AgentMessage]:
        with self.lock:
            return self.steering.take(predicate) + self.follow_up.take(predicate)


class Takings:
    """What one run took from the queues and has not yet delivered.

    Delivery is tracked per taking (one message object may be queued twice): ``_pending``
    maps ``id(message)`` to the indexes in ``_taken`` not yet delivered, oldest first.
    Guarded by the ledger's lock.
    """

    def __init__(self, ledger: QueueLedger) -> None:
        self._ledger = ledger
        self._taken: list[tuple[PendingQueue, AgentMessage]] = []
        self._pending: dict[int, list[int]] = {}
        self._restored = False

    def take(self, source: PendingQueue) -> list[AgentMessage]:
        """Drain ``source`` (by its mode) and remember what was taken."""
        with self._ledger.lock:
            taken = source.drain()
            for message in taken:
                self._pending.setdefault(id(message), []).append(len(self._taken))
                self._taken.append((source, message))
            return taken

    def delivered(self, message: AgentMessage) -> None:
        """``message`` reached the transcript (its ``message_end`` was emitted)."""
        if not self._pending:  # the usual case: nothing taken, no lock
            return
        with self._ledger.lock:
            key = id(message)
            if key not in self._pending and isinstance(message, SystemMessage):
                key = self._rewritten_from(message)
            pending = self._pending.get(key)
            if pending:  # the oldest undelivered taking of this message is now delivered
                del pending[0]
                if not pending:
                    del self._pending[key]

    def _rewritten_from(self, message: SystemMessage) -> int:
        """The run's tool declarations (``ToolDeclarations.declare``) may have rewritten a
        queued system message: find it."""
        for first, *_ in self._pending.values():
            taken = self._taken[first][1]
            if (isinstance(taken, SystemMessage) and taken.content == message.content
                    and taken.sections == message.sections
                    and taken.timestamp == message.timestamp):
                return id(taken)
        return id(message)

    def restore(self) -> None:
        """Put everything taken and not delivered back at the front of its queue (once)."""
        with self._ledger.lock:
            if self._restored:
                return
            self._restored = True
            left = [self._taken[i] for i in sorted(
                i for indexes in self._pending.values() for i in indexes)]
            for source in (self._ledger.steering, self._ledger.follow_up):
                lost = [m for q, m in left if q is source]
                if lost:
                    source.restore_front(lost)
