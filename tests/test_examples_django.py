"""The Django example (``examples/django_chat``), a ``django-admin startproject`` project that
only added the app, passes Django's deployment checks as the same project without the app
does, and its migrations are complete. (The site itself, in a browser under two gunicorn
workers on PostgreSQL and MariaDB: ``tests/test_browser_django.py``.)"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest

from tests.conftest import DJANGO_EXAMPLE, django_example_env, manage

pytest.importorskip("django")

# a production's settings (check --deploy's checklist), on top of the project's own
PRODUCTION = f"""
DEBUG = False
SECRET_KEY = {secrets.token_urlsafe(64)!r}
ALLOWED_HOSTS = ['chat.example.com']
SECURE_SSL_REDIRECT = True
SECURE_HSTS_SECONDS = 31536000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
"""
# the same project as startproject made it: no piagent app, no agents app, no URL include
WITHOUT_PIAGENT = """
INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in ('piagent.contrib.django', 'chat')]
del PIAGENT_AGENTS
ROOT_URLCONF = 'admin_only_urls'
"""
ADMIN_ONLY_URLS = """from django.contrib import admin
from django.urls import path

urlpatterns = [path('admin/', admin.site.urls)]
"""
CHECK_ID = re.compile(r"\(([A-Za-z_][\w.]*\.[CEWID]\d+)\)")


def _check_deploy(folder: Path, settings: str) -> set[str]:
    folder.mkdir()
    (folder / "admin_only_urls.py").write_text(ADMIN_ONLY_URLS, encoding="utf-8")
    env = django_example_env(folder, f"sqlite:///{folder / 'db.sqlite3'}", settings)
    done = manage(env, "check", "--deploy")
    assert done.returncode == 0, done.stdout + done.stderr
    return set(CHECK_ID.findall(done.stdout + done.stderr))


def test_check_deploy_finds_nothing_the_project_without_the_app_does_not(tmp_path: Path) -> None:
    assert (DJANGO_EXAMPLE / "manage.py").is_file()
    with_app = _check_deploy(tmp_path / "with", PRODUCTION)
    without = _check_deploy(tmp_path / "without", PRODUCTION + WITHOUT_PIAGENT)
    assert [i for i in with_app if i.lower().startswith("piagent")] == []
    assert with_app - without == set()


def test_check_deploy_on_the_development_settings_names_only_djangos_own(tmp_path: Path) -> None:
    # DEBUG on and the insecure key: Django's warnings, none of piagent's
    found = _check_deploy(tmp_path / "dev", "")
    assert found and all(i.startswith("security.") for i in found), found


def test_makemigrations_finds_nothing_to_do(tmp_path: Path) -> None:
    env = django_example_env(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite3'}")
    done = manage(env, "makemigrations", "--check", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No changes detected" in done.stdout


CHAT = """
import json
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()
User.objects.create_user('ada', password='pw')
client = Client()
assert client.login(username='ada', password='pw')
key = client.post('/agent/new/', {}, content_type='application/json').json()['key']
run_id = client.post(f'/agent/c/{key}/send/', {'message': 'count to 3'},
                     content_type='application/json').json()['run_id']
stream = client.get(f'/agent/c/{key}/events/{run_id}/')
body = b''.join(stream.streaming_content).decode()
events = [json.loads(line[6:]) for line in body.split('\\n') if line.startswith('data: ')]
print(json.dumps({'worker': stream['X-Piagent-Worker'],
                  'types': [e['type'] for e in events],
                  'final': events[-1]['messages'][-1]['content'][0]['text']}))
"""


def test_the_project_chats_on_its_default_sqlite_database(tmp_path: Path) -> None:
    """No DATABASE_URL: the project's SQLite file; migrate, then a signed-in user's message
    runs the example's agent (the slow tool, then the answer), streamed by the app."""
    env = {**django_example_env(tmp_path, ""), "CHAT_STEP_S": "0.01"}
    del env["DATABASE_URL"]  # the settings' default: db.sqlite3 beside manage.py ...
    (tmp_path / "test_settings.py").write_text(  # ... here kept in tmp_path
        "from chatsite.settings import *  # noqa: F403\n"
        f"DATABASES['default']['NAME'] = {str(tmp_path / 'db.sqlite3')!r}\n", encoding="utf-8")
    migrated = manage(env, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "Applying piagent.0001_initial... OK" in migrated.stdout
    done = manage(env, "shell", "-c", CHAT)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["worker"].isdigit()
    assert seen["types"][0] == "agent_start" and seen["types"][-1] == "agent_end"
    assert seen["types"].count("tool_execution_update") == 3
    assert seen["final"] == "Done: Counted to 3. Anything else?"
