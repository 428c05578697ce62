"""What every view of the app does around its work: the method allowed, the signed-in user
(``PIAGENT_LOGIN_REQUIRED``), CSRF on a POST, the signed-in user's own conversation (any
other is 404), the JSON body, and the ``X-Piagent-Worker`` header on every response."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import Any

from django.conf import global_settings, settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import BadRequest, ImproperlyConfigured
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import resolve_url
from django.urls import Resolver404, resolve, reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.defaults import page_not_found

from ._site import database

__all__ = ["WORKER_HEADER", "login_url", "BadRequest", "View", "conversation_of", "guarded", "json_body",
           "login_required_setting", "text_field"]

WORKER_HEADER = "X-Piagent-Worker"
"""The header every response of the app carries: the pid of the process that served it."""

View = Callable[..., HttpResponse]


def login_required_setting() -> bool:
    """``settings.PIAGENT_LOGIN_REQUIRED`` (``True``): an anonymous request is sent to
    ``LOGIN_URL``; ``False``: it is answered 403 (conversations always belong to a user)."""
    value = getattr(settings, "PIAGENT_LOGIN_REQUIRED", True)
    if not isinstance(value, bool):
        msg = f"settings.PIAGENT_LOGIN_REQUIRED must be True or False, got {value!r}."
        raise ImproperlyConfigured(msg)
    return value


def login_url() -> str:
    """Where an anonymous visitor is sent: the site's ``LOGIN_URL``, or, while that is
    Django's default (``/accounts/login/``) and nothing of the site answers it (a new
    project), the app's own sign-in page (``piagent:login``)."""
    url = str(resolve_url(settings.LOGIN_URL))
    if url == global_settings.LOGIN_URL:
        try:
            resolve(url)
        except Resolver404:
            return str(reverse("piagent:login"))
    return url


def _anonymous(request: HttpRequest) -> HttpResponse:
    if login_required_setting():
        return redirect_to_login(request.get_full_path(), login_url())
    return JsonResponse({"error": "Sign in first: a conversation belongs to a user."},
                        status=403)


def guarded(*methods: str) -> Callable[[View], View]:
    """The app's view decorator: ``methods`` only (405 otherwise), a signed-in user, CSRF
    checked on a POST (the token in the ``X-CSRFToken`` header, or a form's field),
    Django's ``BadRequest`` (a request body the view cannot use) answered 400 with
    ``{"error": <the message>}`` and an ``Http404`` the site's 404, and ``WORKER_HEADER`` on
    every response, these refusals included.

    CSRF is checked here, inside, rather than by the site's middleware before the view (the
    view is exempt from the middleware's check, never from the check): so the refusal too
    carries the header, and a site without ``CsrfViewMiddleware`` is protected all the same.
    No view runs in ``ATOMIC_REQUESTS``' transaction.
    """

    def decorate(view: View) -> View:
        checked = csrf_protect(view)

        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            response: HttpResponse
            if not hasattr(request, "user"):
                msg = ("piagent.contrib.django's views need "
                       "django.contrib.auth.middleware.AuthenticationMiddleware (and "
                       "SessionMiddleware) in settings.MIDDLEWARE.")
                raise ImproperlyConfigured(msg)
            if request.method not in methods:
                response = HttpResponseNotAllowed(methods)
            elif not request.user.is_authenticated:
                response = _anonymous(request)
            else:
                try:
                    response = checked(request, *args, **kwargs)
                except BadRequest as exc:
                    response = JsonResponse({"error": str(exc)}, status=400)
                except Http404 as exc:
                    response = page_not_found(request, exc)
            response[WORKER_HEADER] = str(os.getpid())
            return response

        # never inside ATOMIC_REQUESTS' transaction: a run is recorded in a transaction of
        # its own, which other processes must see at once (and a stream outlives the view)
        for alias in settings.DATABASES:
            wrapped = transaction.non_atomic_requests(using=alias)(wrapped)
        return csrf_exempt(wrapped)  # type: ignore[no-any-return]

    return decorate


def conversation_of(request: HttpRequest, key: str) -> Any:
    """The signed-in user's ``Conversation`` whose key is ``key``; ``Http404`` for any other
    (another user's is as unknown as one that never was)."""
    from .models import Conversation

    found = Conversation.objects.using(database()).filter(
        key=key, user_id=request.user.pk).first()
    if found is None:
        raise Http404("No such conversation.")
    return found


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's JSON object (``BadRequest`` for anything else)."""
    try:
        data = json.loads(request.body or b"{}")
    except ValueError as exc:
        raise BadRequest(f"The body must be a JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"The body must be a JSON object, got {type(data).__name__}.")
    return data


def text_field(body: dict[str, Any], name: str, *, limit: int = 100_000) -> str:
    """``body[name]`` as non-blank text of at most ``limit`` characters (``BadRequest``)."""
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f'Send {{"{name}": "..."}} with some text.')
    if len(value) > limit:
        raise BadRequest(f"{name} is {len(value)} characters long; at most {limit} are taken.")
    return value

