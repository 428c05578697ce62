"""What the views do with a conversation, with no HTTP in it: create one, show it (the stored
transcript up to its live run, the run to attach to, the calls waiting for a decision), send
a message (a run), steer, stop, approve or deny; the site's store and runner (``_site``).

A ``Conversation`` keeps its latest run and how many stored messages came before that run: a
reloaded page shows those messages from the transcript and replays the live run's events
from its start, so nothing is shown twice or left out.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.utils import timezone

from ...messages import message_to_dict
from ...runs import RunInfo, RunNotFoundError
from ._site import database, runner, store
from ._store import key_of

__all__ = ["LIVE", "STOP_WAIT_S", "conversations", "create", "decide", "history", "live_run",
           "owns_run", "send", "steer", "stop"]

LIVE = ("queued", "running")
STOP_WAIT_S = 5.0  # how long Stop waits for the run to settle before answering
_TITLE = 80  # a conversation's title: the start of its first message


def _conversations() -> Any:
    from .models import Conversation

    return Conversation.objects.using(database())


def conversations(user: Any) -> Any:
    """The user's conversations, the latest first."""
    return _conversations().filter(user_id=user.pk).order_by("-updated_at", "-pk")


def create(user: Any, agent: str) -> Any:
    """A new conversation of ``user`` with the agent ``agent`` (a name the caller checked),
    its session id random and unguessable."""
    session_id = secrets.token_urlsafe(18)
    return _conversations().create(key=key_of(session_id), session_id=session_id,
                                   user_id=user.pk, agent=agent)


def _status(run_id: str | None) -> RunInfo | None:
    if not run_id:
        return None
    try:
        return runner().status(run_id)
    except RunNotFoundError:  # purged
        return None


def live_run(conversation: Any) -> str | None:
    """The conversation's run while it is queued or running, else ``None``."""
    info = _status(conversation.last_run_id)
    return info.run_id if info is not None and info.state in LIVE else None


def history(conversation: Any) -> dict[str, Any]:
    """What a (re)loaded page shows: the stored messages, the latest run, the waiting calls.

    While a run is live ``messages`` stops where that run began: the page replays the run's
    events from its start, its prompt included.
    """
    session_id = conversation.session_id
    info = _status(conversation.last_run_id)  # before the load: see above
    messages = store().load(session_id)
    run: dict[str, Any] | None = None
    if info is not None:
        run = {"id": info.run_id, "state": info.state}
        if info.state in LIVE:
            messages = messages[:conversation.messages_before]
    approvals = [{"toolCallId": p.tool_call_id, "callKey": p.call_key, "toolName": p.tool_name,
                  "args": p.args, "digest": p.digest,
                  "decision": None if p.decision is None else
                  ("approved" if p.decision.approved else "denied")}
                 for p in runner().pending_approvals(session_id)]
    return {"messages": [message_to_dict(m) for m in messages if m.role != "system"],
            "run": run, "approvals": approvals}


def _remember(conversation: Any, run_id: str, before: int, **fields: Any) -> None:
    conversation.last_run_id, conversation.messages_before = run_id, before
    _conversations().filter(pk=conversation.pk).update(
        last_run_id=run_id, messages_before=before, updated_at=timezone.now(), **fields)


def send(conversation: Any, text: str) -> str:
    """Start a run of the conversation on ``text``; its id. ``AgentBusyError`` while a run
    is live, ``ApprovalPendingError`` while calls wait for a decision."""
    session_id = conversation.session_id
    before = len(store().load(session_id))
    run_id = runner().start(session_id, text)
    title = {} if conversation.title else {"title": " ".join(text.split())[:_TITLE]}
    _remember(conversation, run_id, before, **title)
    return run_id


def decide(conversation: Any, call: str, digest: str, *, approved: bool) -> str | None:
    """Approve or deny the waiting call ``call`` (its call key, or its id) as shown with
    ``digest``; ``ApprovalError`` if it is unknown, decided, or its arguments are not those
    shown. The decision that completes the batch starts the run that goes on: its id."""
    session_id = conversation.session_id
    before = len(store().load(session_id))
    site = runner()
    if approved:
        run_id = site.approve(session_id, call, digest=digest)
    else:
        run_id = site.deny(session_id, call, reason="the user clicked Deny", digest=digest)
    if run_id is not None:
        _remember(conversation, run_id, before)
    return run_id


def owns_run(conversation: Any, run_id: str) -> bool:
    """Whether ``run_id`` is a run of this conversation."""
    info = _status(run_id)
    return info is not None and info.session_id == conversation.session_id


def steer(conversation: Any, text: str) -> bool:
    """Queue a steering message for the live run; ``False`` when no run is live."""
    if live_run(conversation) is None:
        return False
    runner().steer(conversation.session_id, text)
    return True


def stop(conversation: Any) -> dict[str, Any]:
    """Abort the live run (if any) and wait, at most ``STOP_WAIT_S``, for it to settle."""
    run_id = live_run(conversation)
    if run_id is None:
        return {"stopped": None, "settled": True}
    site = runner()
    site.abort(run_id, "Stopped by the user")
    return {"stopped": run_id, "settled": site.wait(run_id, STOP_WAIT_S)}
