"""The admin's side of approvals: a waiting call as the admin shows it (its arguments and the
digest of those arguments), and a decision made on what was shown.

The page and the changelist put the call's key and the digest of the arguments they show in
the form; a decision sends both back to the site's runner (``_site.runner()``), whose
``approve``/``deny`` refuse it when the call's arguments are no longer those (the digest does
not match), the call was decided already or waits no more. The decision that completes the
batch starts the session's next run. Every refusal becomes an admin error message; nothing
is decided then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from ...errors import PiAgentError
from ...policy import PendingApproval, approval_digest
from ...sessions.records import pending_from_json
from ._admin_transcript import json_text
from ._store import from_column, key_of

__all__ = ["Shown", "decide", "shown"]

_REASON_LIMIT = 2000  # characters of a reason the admin passes on (it reaches the model)


@dataclass(frozen=True)
class Shown:
    """A waiting call as shown: its session, the name it is decided by (``call``: its
    ``call_key``, else its id), tool, arguments as JSON text, and the digest of those
    arguments (``approval_digest``), which the decision carries back."""

    session_id: str
    call: str
    tool_call_id: str
    tool_name: str
    arguments: str
    digest: str


def shown(row: Any) -> Shown:
    """What the admin shows of an ``Approval`` row of kind ``pending``."""
    entry: PendingApproval = pending_from_json(row.data, row.decision)
    return Shown(from_column(row.session.session_id), entry.call_key or entry.tool_call_id,
                 entry.tool_call_id, entry.tool_name, json_text(entry.args),
                 approval_digest(entry.tool_name, entry.args))


def decide(request: HttpRequest, session_id: str, call: object, digest: object,
           approved: bool, reason: object = None) -> bool:
    """Approve (or deny) the call ``call`` of ``session_id`` if its arguments still have
    ``digest``; an admin message says what happened. True when it was decided."""
    from ._site import runner, store

    verb = "Approve" if approved else "Deny"
    if not isinstance(call, str) or not call or not isinstance(digest, str) or not digest:
        messages.error(request, f"{verb}: the form must carry the call (tool_call_id) and "
                                "the digest of the arguments shown; nothing was decided.")
        return False
    text = reason.strip() if isinstance(reason, str) else ""
    if len(text) > _REASON_LIMIT:
        messages.error(request, f"{verb}: the reason is longer than {_REASON_LIMIT} "
                                "characters; nothing was decided.")
        return False
    try:
        site_runner = runner()
        before = len(store().load(session_id))  # what a chat page shows before the run
        method = site_runner.approve if approved else site_runner.deny
        run_id = method(session_id, call, digest=digest, reason=text or None)
    except (PiAgentError, ImproperlyConfigured, TypeError, ValueError) as exc:
        messages.error(request, f"{verb} {call!r} of session {session_id!r} refused: {exc}")
        return False
    done = "approved" if approved else "denied"
    if run_id is None:
        messages.success(request, f"Tool call {call!r} of session {session_id!r} {done}; "
                                  "other calls of its batch still wait.")
    else:
        _shown_on_the_chat_page(session_id, run_id, before)
        link = reverse("admin:piagent_run_changelist") + "?" + \
            f"run_id={run_id}"
        messages.success(request, format_html(
            'Tool call {} of session {} {}; the batch is complete and run <a href="{}">{}</a> '
            "goes on with it.", repr(call), repr(session_id), done, link, run_id))
    return True


def _shown_on_the_chat_page(session_id: str, run_id: str, before: int) -> None:
    """The conversation's latest run is the one the decision started (as when the chat
    page decides): a page loaded now shows the first ``before`` messages, then streams it."""
    from django.utils import timezone

    from ._site import database
    from .models import Conversation

    Conversation.objects.using(database()).filter(key=key_of(session_id)).update(
        last_run_id=run_id, messages_before=before, updated_at=timezone.now())
