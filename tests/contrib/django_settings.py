"""Settings for the tests that use Django (``tests/conftest.py``'s ``configure_django``, or
``DJANGO_SETTINGS_MODULE=tests.contrib.django_settings django-admin makemigrations``):
the app ``piagent.contrib.django`` and three databases of this process's own, named
``piagent_t_<pid>_<random>`` (a SQLite file in a temporary directory, a PostgreSQL schema of
``PIAGENT_TEST_POSTGRES``'s database, a MariaDB database of ``PIAGENT_TEST_MARIADB``'s
server), which ``tests/contrib/test_django_store.py`` creates, migrates and drops."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from typing import Any
from urllib.parse import urlsplit

try:  # Django's MySQL backend imports MySQLdb; PyMySQL stands in for it (no C headers)
    import pymysql

    pymysql.install_as_MySQLdb()
except ImportError:  # the MariaDB tests say it is missing
    pass

_NAME = f"piagent_t_{os.getpid()}_{uuid.uuid4().hex[:8]}"
_MARIADB = os.environ.get("PIAGENT_TEST_MARIADB", "piagent:piagent@127.0.0.1:3306")
_POSTGRES = urlsplit(os.environ.get("PIAGENT_TEST_POSTGRES",
                                    "postgresql://postgres@127.0.0.1:5432/test"))
_credentials, _, _address = _MARIADB.rpartition("@")


def _databases() -> dict[str, dict[str, Any]]:
    folder = tempfile.mkdtemp(prefix="piagent-django-")
    atexit.register(shutil.rmtree, folder, True)  # the SQLite file, at the process's exit
    user, _, password = _credentials.partition(":")
    host, _, port = _address.partition(":")
    return {
        "default": {"ENGINE": "django.db.backends.sqlite3",
                    "NAME": os.path.join(folder, f"{_NAME}.db")},
        "postgresql": {"ENGINE": "django.db.backends.postgresql",
                       "NAME": _POSTGRES.path.lstrip("/") or "test",
                       "USER": _POSTGRES.username or "", "PASSWORD": _POSTGRES.password or "",
                       "HOST": _POSTGRES.hostname or "", "PORT": str(_POSTGRES.port or ""),
                       "OPTIONS": {"options": f"-c search_path={_NAME}"}},
        "mariadb": {"ENGINE": "django.db.backends.mysql", "NAME": _NAME, "USER": user,
                    "PASSWORD": password, "HOST": host, "PORT": port or "3306",
                    "OPTIONS": {"charset": "utf8mb4"}},
    }


SECRET_KEY = "piagent-tests"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = None
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth",
                  "django.contrib.admin", "django.contrib.sessions", "django.contrib.messages",
                  "piagent.contrib.django"]
# what the admin needs (tests/contrib/test_django_admin.py routes to it with ROOT_URLCONF
# "tests.contrib.django_admin_urls"); no view of the other tests reads a session or a user
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware",
              "django.contrib.messages.middleware.MessageMiddleware"]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
              "OPTIONS": {"context_processors": [
                  "django.template.context_processors.request",
                  "django.contrib.auth.context_processors.auth",
                  "django.contrib.messages.context_processors.messages"]}}]
DATABASES = _databases()
USE_TZ = True
