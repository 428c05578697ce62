"""Messages into the event stream so that a failing listener loses none: the loop's prompts
and steering, and a batch's result messages, each ``message_start`` then ``message_end``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..events import AgentEvent, MessageEndEvent, MessageStartEvent
from ..messages import AgentMessage

__all__ = ["Emit", "emit_messages", "record_despite_failure"]

_log = logging.getLogger("piagent.loop")

Emit = Callable[[AgentEvent], None]


def emit_messages(emit: Emit, messages: Sequence[AgentMessage]) -> None:
    """``message_start`` then ``message_end`` for each; after a listener failure the rest is
    still recorded (``record_despite_failure``), then the failure is raised."""
    for index, message in enumerate(messages):
        event: AgentEvent = MessageStartEvent(message)
        try:
            emit(event)
            emit(event := MessageEndEvent(message))
        except BaseException:
            if type(event) is MessageStartEvent:  # its end still goes out
                record_despite_failure(emit, [message], start=False)
            record_despite_failure(emit, messages[index + 1:])
            raise


def record_despite_failure(emit: Emit, messages: Sequence[AgentMessage],
                           start: bool = True) -> None:
    """After a listener failed: still send each message's start (unless ``start`` is false)
    and end, every event on its own, so the transcript keeps the user's input and every
    executed call's result. The first failure is what the run reports; one here is logged."""
    for message in messages:
        events = (MessageStartEvent(message), MessageEndEvent(message))
        for event in events if start else events[1:]:
            try:
                emit(event)
            except Exception:
                _log.exception("A listener raised again while %s was being recorded after "
                               "an earlier failure", getattr(message, "role", "a message"))
