"""The same multi-user chat page on Django, in one file: streamed text, tool progress, Stop,
steering, Approve/Deny; one conversation per browser, stored in SQLite.

Run it offline (a scripted model and a slow counting tool)::

    python examples/django_chat/app.py            # http://127.0.0.1:8000
    python examples/django_chat/app.py --model anthropic/claude-haiku-4-5
    cd examples/django_chat && gunicorn -w 4 -k gthread --threads 8 app:application

The page, the demo agent and the per-session logic (``chat_sessions.ChatService``) are
shared with ``examples/flask_chat``. Views: ``GET /``, ``GET /history``, ``POST /chat``
(answers ``{"run_id"}``), ``GET /events/<run_id>`` (``piagent.web.django_run_response``,
resumes after ``Last-Event-ID``), ``POST /stop``, ``POST /steer``, ``POST /approve`` and
``POST /deny`` (a call waiting for approval: ``{"tool_call_id", "digest"}``, 409 with the
reason when refused), ``GET /whoami``. The SQLite file is ``--db``, else ``$PIAGENT_CHAT_DB``,
else ``piagent-examples/chat.db`` in the system's temporary folder. In a real project,
put the views in an app's ``views.py`` and build the service once per process in
``AppConfig.ready``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

SHARED = Path(__file__).resolve().parent.parent / "flask_chat"
sys.path.insert(0, str(SHARED))
from chat_agent import agent_factory, page_html  # noqa: E402 - the shared demo agent
from chat_sessions import (  # noqa: E402
    COOKIE,
    COOKIE_MAX_AGE,
    ChatService,
    db_path,
    new_session_id,
    valid_session_id,
)

from piagent.agent import Agent  # noqa: E402
from piagent.errors import AgentBusyError, ApprovalError, ApprovalPendingError  # noqa: E402
from piagent.web import django_run_response  # noqa: E402

# the process's service, built on first use (or by set_service); guarded by _lock
_lock = threading.Lock()
_services: dict[str, ChatService] = {}
_pages: dict[str, bytes] = {}


def set_service(make_agent: Callable[[str], Agent], db: str | os.PathLike[str]) -> ChatService:
    """Serve ``make_agent``'s agents with transcripts in ``db`` (main() and tests call this
    before the first request); the service it replaces is closed."""
    service = ChatService(make_agent, db)
    with _lock:
        old = _services.pop("default", None)
        _services["default"] = service
        _pages["default"] = page_html(make_agent("page"))
    if old is not None:
        old.close()
    return service


def get_service() -> ChatService:
    with _lock:
        service = _services.get("default")
    if service is None:  # under gunicorn: configured by the environment, once per worker
        make_agent = agent_factory(os.environ.get("PIAGENT_CHAT_MODEL") or None,
                                   base_url=os.environ.get("PIAGENT_CHAT_BASE_URL") or None,
                                   step_s=float(os.environ.get("PIAGENT_CHAT_STEP_S") or 0.5))
        with _lock:
            if "default" not in _services:
                _services["default"] = ChatService(make_agent, db_path())
                _pages["default"] = page_html(make_agent("page"))
            service = _services["default"]
    return service


def _json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _session(view: Callable[[HttpRequest, str], HttpResponse]) -> Callable[..., HttpResponse]:
    """Give ``view`` the browser's session id, setting the cookie on a first visit."""

    def wrapped(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        cookie = request.COOKIES.get(COOKIE)
        session_id = cookie if cookie and valid_session_id(cookie) else new_session_id()
        response = view(request, session_id, **kwargs)
        if session_id != cookie:
            response.set_cookie(COOKIE, session_id, max_age=COOKIE_MAX_AGE, httponly=True,
                                samesite="Lax")
        response["X-Worker-Pid"] = str(os.getpid())
        return response

    return wrapped


@require_GET
@_session
def page(request: HttpRequest, session_id: str) -> HttpResponse:
    get_service()
    return HttpResponse(_pages["default"], content_type="text/html; charset=utf-8")


@require_GET
@_session
def whoami(request: HttpRequest, session_id: str) -> HttpResponse:
    return JsonResponse({"pid": os.getpid()})


@require_GET
@_session
def history(request: HttpRequest, session_id: str) -> HttpResponse:
    return JsonResponse(get_service().history(session_id))


@csrf_exempt  # a demo: a real site keeps CSRF and sends the token from the page
@require_POST
@_session
def chat(request: HttpRequest, session_id: str) -> HttpResponse:
    message = _json_body(request).get("message", "")
    if not isinstance(message, str) or not message.strip():
        return JsonResponse({"error": 'Send {"message": "..."} with some text.'}, status=400)
    try:
        run_id = get_service().chat(session_id, message)
    except (AgentBusyError, ApprovalPendingError) as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"run_id": run_id})


def _decide(request: HttpRequest, session_id: str, approved: bool) -> HttpResponse:
    body = _json_body(request)
    # call_key names the call even when another waiting call has its id
    call_id, digest = body.get("call_key") or body.get("tool_call_id"), body.get("digest")
    if not isinstance(call_id, str) or not call_id or \
            not (digest is None or isinstance(digest, str)):
        return JsonResponse({"error": 'Send {"call_key": "...", "digest": "..."}.'},
                            status=400)
    try:
        run_id = get_service().decide(session_id, call_id, digest, approved=approved)
    except (ApprovalError, AgentBusyError) as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"run_id": run_id})


@csrf_exempt
@require_POST
@_session
def approve(request: HttpRequest, session_id: str) -> HttpResponse:
    return _decide(request, session_id, True)


@csrf_exempt
@require_POST
@_session
def deny(request: HttpRequest, session_id: str) -> HttpResponse:
    return _decide(request, session_id, False)


@require_GET
@_session
def events(request: HttpRequest, session_id: str, run_id: str) -> HttpResponse:
    service = get_service()
    if not service.owns(session_id, run_id):
        return HttpResponse(f"No run {run_id!r} in this chat session.", status=404,
                            content_type="text/plain; charset=utf-8")
    response: HttpResponse = django_run_response(service.runner, run_id, request)
    return response


@csrf_exempt
@require_POST
@_session
def stop(request: HttpRequest, session_id: str) -> HttpResponse:
    return JsonResponse(get_service().stop(session_id))


@csrf_exempt
@require_POST
@_session
def steer(request: HttpRequest, session_id: str) -> HttpResponse:
    text = _json_body(request).get("text", "")
    if not isinstance(text, str) or not text.strip():
        return JsonResponse({"error": 'Send {"text": "..."} with some text.'}, status=400)
    if not get_service().steer(session_id, text):
        return JsonResponse({"error": "No run is active; send a chat message instead."},
                            status=409)
    return JsonResponse({"ok": True})


urlpatterns = [
    path("", page),
    path("whoami", whoami),
    path("history", history),
    path("chat", chat),
    path("events/<str:run_id>", events),
    path("stop", stop),
    path("steer", steer),
    path("approve", approve),
    path("deny", deny),
]


def configure() -> None:
    """Minimal settings for this one-file project (no Django database, no apps)."""
    if not settings.configured:
        settings.configure(
            DEBUG=True, SECRET_KEY="piagent-django-chat-demo", ROOT_URLCONF=__name__,
            ALLOWED_HOSTS=["127.0.0.1", "localhost"], INSTALLED_APPS=[], MIDDLEWARE=[],
            DATABASES={})


def _wsgi() -> Any:
    """The WSGI application for gunicorn (``app:application``)."""
    configure()
    import django
    from django.core.wsgi import get_wsgi_application

    django.setup()
    return get_wsgi_application()


def __getattr__(name: str) -> Any:  # ``application`` is built only when gunicorn asks for it
    if name == "application":
        return _wsgi()
    raise AttributeError(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="provider/model-id for a real model (default: offline)")
    parser.add_argument("--base-url", metavar="URL",
                        help="an OpenAI-compatible server for --model (Ollama, vLLM, ...)")
    parser.add_argument("--db", metavar="FILE",
                        help="the SQLite file of transcripts and runs "
                             "(default: $PIAGENT_CHAT_DB, else piagent-examples/chat.db in the "
                             "temporary folder)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    # a missing key stops here
    set_service(agent_factory(args.model, base_url=args.base_url), db_path(args.db))
    configure()
    from django.core.management import execute_from_command_line

    execute_from_command_line([sys.argv[0], "runserver", f"{args.host}:{args.port}",
                               "--noreload"])


if __name__ == "__main__":
    main()
