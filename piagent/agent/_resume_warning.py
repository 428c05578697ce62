"""``prompt()``/``continue_()`` where ``resume()`` was meant: one warning, then the marks go.

A transcript kept in a session store may end in a tool batch that a stopped process left
unfinished: calls marked started that have no result. ``resume()`` finishes them; a new
``prompt()`` or ``continue_()`` goes on without them (the model sees them unanswered). The
caller is warned once, at the call, pointing to ``resume()``. When the new run's first
assistant message is stored the batch is no longer the last one, so ``resume()`` would never
finish it: the stored transcript is rewritten once, which drops those calls' start marks.

Nothing here runs for an agent without a store, and with one only a transcript whose last
assistant message has unanswered calls costs a read of the store's marks.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence

from ..loop import unanswered_tool_calls
from ..messages import AgentMessage, AssistantMessage, ToolCall
from ._persistence import StoreLink
from ._record import RunRecord

__all__ = ["Persist", "dropping_marks", "started_unfinished", "warn_unfinished"]

_log = logging.getLogger("piagent.agent")


def started_unfinished(link: StoreLink | None, messages: Sequence[AgentMessage]
                       ) -> list[ToolCall]:
    """The calls of the transcript's unfinished last batch that the store marked started."""
    if link is None:
        return []
    found = unanswered_tool_calls(messages)
    if found is None:
        return []
    started = link.store.started(link.session_id)
    return [call for call in found[1] if call.id in started]


def warn_unfinished(link: StoreLink | None, busy: bool, method: str) -> None:
    """One ``UserWarning`` at the caller of ``method`` when the transcript ends in such a
    batch (and no run is active: a busy agent refuses the call anyway)."""
    if link is None or busy:
        return
    calls = started_unfinished(link, link.state.messages)
    if not calls:
        return
    names = ", ".join(f"{call.name!r} ({call.id})" for call in calls)
    count = f"{len(calls)} tool call{'s' if len(calls) > 1 else ''}"
    msg = (f"{method}: the transcript ends in a tool batch that a stopped process left "
           f"unfinished: {count} marked started ({names}) never got a result. {method} goes "
           "on without them (the model sees them unanswered) and they cannot be resumed "
           "afterwards; call agent.resume() instead to finish them (docs/sessions.md).")
    warnings.warn(msg, UserWarning, stacklevel=3)


Persist = Callable[[RunRecord, AgentMessage], None]


def dropping_marks(link: StoreLink, ended: Persist) -> Persist:
    """``ended`` (the store's ``message_end`` step) that, after storing the run's first
    assistant message, rewrites the stored transcript once: the store keeps only the marks
    of the last assistant message's calls, so the abandoned batch's marks go."""

    def persist(current: RunRecord, message: AgentMessage) -> None:
        ended(current, message)
        if current.drop_marks and isinstance(message, AssistantMessage):
            current.drop_marks = False
            try:
                link.replace(link.state.messages)
            except Exception:  # the marks stay (harmless); the run goes on
                _log.warning("The start marks of an abandoned tool batch of session %r could "
                             "not be dropped", link.session_id, exc_info=True)

    return persist
