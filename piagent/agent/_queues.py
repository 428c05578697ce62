"""The Agent's two message queues (steering and follow-up)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Literal

from ..messages import AgentMessage

QueueMode = Literal["one-at-a-time", "all"]
_MODES = ("one-at-a-time", "all")


def check_mode(mode: str, what: str) -> QueueMode:
    if mode not in _MODES:
        msg = f"{what} must be 'one-at-a-time' or 'all', got {mode!r}."
        raise ValueError(msg)
    return mode  # type: ignore[return-value]


class PendingQueue:
    """A FIFO of messages drained one at a time or all at once (``mode`` is live).

    Thread safety: every method may be called from any thread; they share the lock given
    by the owning Agent, so operations on both queues are atomic together.
    """

    def __init__(self, mode: QueueMode, lock: threading.RLock) -> None:
        self.mode: QueueMode = mode
        self._lock = lock  # the Agent's _queue_lock; guards _messages
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
        """Put messages back at the front, in their order (undelivered input of a run)."""
        with self._lock:
            self._messages[:0] = list(messages)
