"""The URLs of the tests of the app's views and of the admin
(``tests/contrib/test_django_views.py``, ``tests/contrib/test_django_admin.py``): the app under
``agent/``, as a site adds it, and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls),
               path("agent/", include("piagent.contrib.django.urls"))]
