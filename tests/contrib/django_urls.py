"""The URLs of the tests of the app's views: the app under ``agent/``, as a site adds it."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [path("agent/", include("piagent.contrib.django.urls"))]
