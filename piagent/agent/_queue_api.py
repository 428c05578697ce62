"""The ``Agent``'s steering and follow-up queues as its callers see them: ``steer``,
``follow_up``, the modes, read-only views, peeking, taking and clearing. A mixin of
``Agent``, over the agent's ``QueueLedger``."""

from __future__ import annotations

from collections.abc import Callable

from ..messages import AgentMessage
from ._input import as_message
from ._queues import QueueLedger, QueueMode, QueueView, check_mode

__all__ = ["QueueMethods"]


class QueueMethods:
    """The queue half of ``Agent``'s public surface (thread-safe: the ledger locks)."""

    _queues: QueueLedger

    @property
    def steering_mode(self) -> QueueMode:
        """How steering is drained: "one-at-a-time" (default) or "all"; changeable live."""
        return self._queues.steering.mode

    @steering_mode.setter
    def steering_mode(self, mode: QueueMode) -> None:
        self._queues.steering.mode = check_mode(mode, "steering_mode")

    @property
    def follow_up_mode(self) -> QueueMode:
        """How follow-ups are drained: "one-at-a-time" (default) or "all"; changeable live."""
        return self._queues.follow_up.mode

    @follow_up_mode.setter
    def follow_up_mode(self, mode: QueueMode) -> None:
        self._queues.follow_up.mode = check_mode(mode, "follow_up_mode")

    @property
    def steering_queue(self) -> QueueView:
        """The steering queue, read-only: ``.messages`` (a tuple snapshot), ``.mode``."""
        return QueueView(self._queues.steering)

    @property
    def follow_up_queue(self) -> QueueView:
        """The follow-up queue, read-only: ``.messages`` (a tuple snapshot), ``.mode``."""
        return QueueView(self._queues.follow_up)

    def steer(self, message: str | AgentMessage) -> None:
        """Queue a message for after the current tool batch (a str becomes a user message)."""
        self._queues.steering.enqueue(as_message(message))

    def follow_up(self, message: str | AgentMessage) -> None:
        """Queue a message for when the agent would otherwise stop."""
        self._queues.follow_up.enqueue(as_message(message, "follow_up()"))

    def clear_steering_queue(self) -> None:
        """Drop every queued steering message."""
        self._queues.steering.clear()

    def clear_follow_up_queue(self) -> None:
        """Drop every queued follow-up message."""
        self._queues.follow_up.clear()

    def clear_all_queues(self) -> None:
        """Drop every queued message."""
        self._queues.clear()

    def has_queued_messages(self) -> bool:
        """True if either queue holds a message."""
        return self._queues.has_items()

    def peek_queued_messages(self) -> list[AgentMessage]:
        """What the next drain would take: the steering selection, else the follow-up one."""
        return self._queues.peek()

    def take_queued_messages(self, predicate: Callable[[AgentMessage], bool]) -> list[AgentMessage]:
        """Remove and return the queued messages matching ``predicate`` (steering first)."""
        return self._queues.take(predicate)
