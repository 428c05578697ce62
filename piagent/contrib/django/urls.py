"""The app's URLs, namespace ``piagent``: ``path("agent/", include("piagent.contrib.django.urls"))``.

``index`` (the chat page), ``new`` (POST: a new conversation), ``conversation`` (its page),
``history``, ``send``, ``events`` (the run's SSE), ``steer``, ``stop``, ``approve``, ``deny``
(docs/django.md, "The app's views"). A conversation is addressed by its ``key``. ``login``
and ``logout``: the app's own sign-in page (Django's ``LoginView``), where an anonymous
visitor is sent when the site has no login page of its own (``LOGIN_URL`` left at Django's
default and not answered by the site).
"""

from __future__ import annotations

from django.contrib.auth.views import LoginView, LogoutView
from django.urls import path, reverse_lazy

from . import views as _views

__all__ = ["app_name", "urlpatterns"]

app_name = "piagent"

urlpatterns = [
    path("", _views.index, name="index"),
    path("new/", _views.new_conversation, name="new"),
    path("c/<slug:key>/", _views.conversation, name="conversation"),
    path("c/<slug:key>/history/", _views.history, name="history"),
    path("c/<slug:key>/send/", _views.send, name="send"),
    path("c/<slug:key>/events/<slug:run_id>/", _views.events, name="events"),
    path("c/<slug:key>/steer/", _views.steer, name="steer"),
    path("c/<slug:key>/stop/", _views.stop, name="stop"),
    path("c/<slug:key>/approve/", _views.approve, name="approve"),
    path("c/<slug:key>/deny/", _views.deny, name="deny"),
    path("login/", LoginView.as_view(template_name="piagent/login.html",
                                     next_page=reverse_lazy("piagent:index"),
                                     redirect_authenticated_user=True), name="login"),
    path("logout/", LogoutView.as_view(next_page=reverse_lazy("piagent:login")),
         name="logout"),
]
