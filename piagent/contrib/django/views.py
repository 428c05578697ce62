"""The app's views (``path("agent/", include("piagent.contrib.django.urls"))``; docs/django.md,
"The app's views"): the chat page, a conversation's history, sending a message (a run), the
run's event stream (SSE, resumed after ``Last-Event-ID``), steering, stopping, approving and
denying a waiting tool call.

Every view needs a signed-in user (``PIAGENT_LOGIN_REQUIRED``), checks CSRF on a POST (the
page sends the token in the ``X-CSRFToken`` header), shows a user only their own
conversations (another's is 404, in every view) and answers with the ``X-Piagent-Worker``
header (the serving process's pid). The JSON views answer ``{"error": ...}`` with 400 for a
body they cannot use and 409 when the conversation's state refuses the request.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.urls import reverse

from ...errors import AgentBusyError, ApprovalError, ApprovalPendingError
from ...web import django_run_response
from . import _views_chat as _chat
from ._site import DEFAULT_AGENT, agent_names, runner
from ._views_http import BadRequest, conversation_of, guarded, json_body, text_field

__all__ = ["approve", "conversation", "deny", "events", "history", "index", "new_conversation",
           "send", "steer", "stop"]


def _url(request: HttpRequest, name: str, *args: str) -> str:
    match = request.resolver_match
    return str(reverse(f"piagent:{name}", args=args,
                       current_app=match.namespace if match is not None else None))


def _csrf_header() -> str:
    """The header the page sends the CSRF token in (``CSRF_HEADER_NAME``'s HTTP form)."""
    name = str(getattr(settings, "CSRF_HEADER_NAME", "HTTP_X_CSRFTOKEN"))
    return name.removeprefix("HTTP_").replace("_", "-")  # X-CSRFTOKEN: any case will do


def _page(request: HttpRequest, current: Any) -> HttpResponse:
    names = agent_names()
    config: dict[str, Any] = {"csrfToken": get_token(request), "csrfHeader": _csrf_header()}
    if current is not None:
        key = current.key
        config.update({name: _url(request, name, key)
                       for name in ("history", "send", "steer", "stop", "approve", "deny")})
        config["events"] = _url(request, "events", key, "__run__")
    context = {"conversations": list(_chat.conversations(request.user)[:200]),
               "current": current, "agents": names,
               "default_agent": DEFAULT_AGENT if DEFAULT_AGENT in names else names[0],
               "index_url": _url(request, "index"), "new_url": _url(request, "new"),
               "config": config}
    return render(request, "piagent/chat.html", context)


@guarded("GET")
def index(request: HttpRequest) -> HttpResponse:
    """The chat page without a conversation open: the user's conversations and a form to
    start a new one."""
    return _page(request, None)


@guarded("POST")
def new_conversation(request: HttpRequest) -> HttpResponse:
    """Start a conversation with the agent of the ``agent`` field (a form's, or a JSON
    body's; the default agent when absent): a redirect (303) to its page, or for a JSON
    request ``{"key", "url"}`` (201)."""
    as_json = request.content_type == "application/json"
    agent = (json_body(request) if as_json else request.POST).get("agent") or None
    names = agent_names()
    if agent is None:
        agent = DEFAULT_AGENT if DEFAULT_AGENT in names else names[0]
    if agent not in names:
        raise BadRequest(f"agent must be one of {', '.join(map(repr, names))}, got {agent!r}.")
    created = _chat.create(request.user, agent)
    url = _url(request, "conversation", created.key)
    if as_json:
        return JsonResponse({"key": created.key, "url": url}, status=201)
    return HttpResponseRedirect(url, status=303)


@guarded("GET")
def conversation(request: HttpRequest, key: str) -> HttpResponse:
    """The chat page of one conversation: its transcript, attached to its live run."""
    return _page(request, conversation_of(request, key))


@guarded("GET")
def history(request: HttpRequest, key: str) -> HttpResponse:
    """``{"messages", "run", "approvals"}``: the stored transcript (up to the live run, whose
    events the page replays), the latest run (``{"id", "state"}``), the calls waiting for a
    decision (each with its ``digest``)."""
    return JsonResponse(_chat.history(conversation_of(request, key)))


@guarded("POST")
def send(request: HttpRequest, key: str) -> HttpResponse:
    """``{"message": text}``: start a run on it; ``{"run_id"}``. 409 while a run is live
    (steer or stop it) or calls wait for a decision."""
    current = conversation_of(request, key)
    text = text_field(json_body(request), "message")
    try:
        run_id = _chat.send(current, text)
    except (AgentBusyError, ApprovalPendingError) as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"run_id": run_id})


@guarded("GET")
def events(request: HttpRequest, key: str, run_id: str) -> HttpResponse:
    """The run's events as Server-Sent Events (``piagent.web.django_run_response``): from
    its start, or after the ``Last-Event-ID`` header's event; a streaming response that ends
    after ``agent_end``. A run of another conversation is 404."""
    current = conversation_of(request, key)
    if not _chat.owns_run(current, run_id):
        return JsonResponse({"error": f"No run {run_id!r} in this conversation."}, status=404)
    response: HttpResponse = django_run_response(runner(), run_id, request)
    return response


@guarded("POST")
def steer(request: HttpRequest, key: str) -> HttpResponse:
    """``{"text": text}``: a steering message for the live run (read after its current
    tool); 409 when no run is live."""
    current = conversation_of(request, key)
    text = text_field(json_body(request), "text")
    if not _chat.steer(current, text):
        return JsonResponse({"error": "No run is live; send a message instead."}, status=409)
    return JsonResponse({"ok": True})


@guarded("POST")
def stop(request: HttpRequest, key: str) -> HttpResponse:
    """Abort the live run, waiting a few seconds for it to settle: ``{"stopped": run id or
    null, "settled": bool}``."""
    return JsonResponse(_chat.stop(conversation_of(request, key)))


def _decide(request: HttpRequest, key: str, approved: bool) -> HttpResponse:
    current = conversation_of(request, key)
    body = json_body(request)
    # call_key names the call even when another waiting call has its id
    call, digest = body.get("call_key") or body.get("tool_call_id"), body.get("digest")
    if not isinstance(call, str) or not call or not isinstance(digest, str) or not digest:
        raise BadRequest('Send {"tool_call_id": "...", "digest": "..."} (the digest of the '
                         'call as shown; "call_key" may name the call instead of its id).')
    try:
        run_id = _chat.decide(current, call, digest, approved=approved)
    except (ApprovalError, AgentBusyError) as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"run_id": run_id})


@guarded("POST")
def approve(request: HttpRequest, key: str) -> HttpResponse:
    """``{"tool_call_id", "digest"}``: approve the waiting call as it was shown; ``{"run_id"}``
    of the run that goes on when this completed the batch (else ``null``). 409 with the
    reason when refused (unknown or decided call, a digest that does not match)."""
    return _decide(request, key, True)


@guarded("POST")
def deny(request: HttpRequest, key: str) -> HttpResponse:
    """``{"tool_call_id", "digest"}``: deny the waiting call (the model reads why); answers
    as ``approve``."""
    return _decide(request, key, False)
