"""The same chat page on Django, in one file: streamed text, tool progress, Stop, steering.

Run it offline (a scripted model and a slow counting tool)::

    python examples/django_chat/app.py            # http://127.0.0.1:8000
    python examples/django_chat/app.py --model anthropic/claude-3-5-haiku-latest

The page and the demo agent are shared with ``examples/flask_chat``. Views: ``GET /``,
``POST /chat`` (``piagent.web.django_response``), ``POST /stop``, ``POST /steer``. In a
real project, put the views in an app's ``views.py`` and the agent wherever your app keeps
per-user state; this one agent serves the whole process (a demo for one user).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

SHARED = Path(__file__).resolve().parent.parent / "flask_chat"
sys.path.insert(0, str(SHARED))
from chat_agent import make_agent, page_html  # noqa: E402 - the shared demo agent

from piagent.agent import Agent  # noqa: E402
from piagent.web import django_response  # noqa: E402

PAGE = SHARED / "static" / "chat.html"
STOP_WAIT_S = 5.0  # how long Stop waits for the run to settle before answering
_agents: dict[str, Agent] = {}  # "default" -> the agent; set by main() or on first use


def set_agent(agent: Agent) -> None:
    """Serve ``agent`` (tests and main() call this before the first request)."""
    _agents["default"] = agent


def get_agent() -> Agent:
    if "default" not in _agents:
        _agents["default"] = make_agent()
    return _agents["default"]


def _json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@require_GET
def page(request: HttpRequest) -> HttpResponse:
    return HttpResponse(page_html(get_agent()), content_type="text/html; charset=utf-8")


@csrf_exempt  # a demo: a real site keeps CSRF and sends the token from the page
@require_POST
def chat(request: HttpRequest) -> HttpResponse:
    message = _json_body(request).get("message", "")
    if not isinstance(message, str) or not message.strip():
        return JsonResponse({"error": 'Send {"message": "..."} with some text.'}, status=400)
    return django_response(get_agent(), message)


@csrf_exempt
@require_POST
def stop(request: HttpRequest) -> HttpResponse:
    # Stop means stop: steering typed into this run is not carried into the next one. The
    # queues outlive an abort (undelivered input returns to them when the run settles), so
    # wait for that, then drop what is left.
    agent = get_agent()
    agent.abort("Stopped by the user")
    settled = agent.wait_for_idle(STOP_WAIT_S)
    dropped = agent.take_queued_messages(lambda message: True)
    return JsonResponse({"ok": True, "settled": settled, "dropped": [m.text for m in dropped]})


@csrf_exempt
@require_POST
def steer(request: HttpRequest) -> HttpResponse:
    text = _json_body(request).get("text", "")
    if not isinstance(text, str) or not text.strip():
        return JsonResponse({"error": 'Send {"text": "..."} with some text.'}, status=400)
    agent = get_agent()
    if not agent.state.is_streaming:
        return JsonResponse({"error": "No run is active; send a chat message instead."},
                            status=409)
    agent.steer(text)
    return JsonResponse({"ok": True})


urlpatterns = [
    path("", page),
    path("chat", chat),
    path("stop", stop),
    path("steer", steer),
]


def configure() -> None:
    """Minimal settings for this one-file project (no database, no apps)."""
    if not settings.configured:
        settings.configure(
            DEBUG=True, SECRET_KEY="piagent-django-chat-demo", ROOT_URLCONF=__name__,
            ALLOWED_HOSTS=["127.0.0.1", "localhost"], INSTALLED_APPS=[], MIDDLEWARE=[],
            DATABASES={})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="provider/model-id for a real model (default: offline)")
    parser.add_argument("--base-url", metavar="URL",
                        help="an OpenAI-compatible server for --model (Ollama, vLLM, ...)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    set_agent(make_agent(args.model, base_url=args.base_url))  # a missing key stops here
    configure()
    from django.core.management import execute_from_command_line

    execute_from_command_line([sys.argv[0], "runserver", f"{args.host}:{args.port}",
                               "--noreload"])


if __name__ == "__main__":
    main()
