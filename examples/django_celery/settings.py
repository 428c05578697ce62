"""Django settings of the example: no database of Django's own (transcripts and runs live in
piagent's PostgreSQL schema), no apps, the views in ``views.py``."""

from __future__ import annotations

import os

DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "piagent-example-not-secret")
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "views"
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
DATABASES: dict[str, object] = {}
USE_TZ = True
