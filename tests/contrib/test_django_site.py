"""The site's piagent from its settings (``piagent.contrib.django.site``): wrong settings named,
one runner per process with its recovery ticker, the Celery runner, the views outside
``ATOMIC_REQUESTS``, and a new project that adds the app: ``check --deploy`` and
``makemigrations --check`` find nothing it adds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from piagent.contrib.django import DjangoStore, site as _site
from piagent.sessions import SQLiteStore
from piagent.testing import assistant_text

from ..conftest import WAIT, configure_django, unavailable
from .conftest import Site

configure_django()

from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.test import override_settings  # noqa: E402


def test_wrong_settings_name_the_setting(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"PIAGENT_AGENTS": None}, "PIAGENT_AGENTS must be a dict"),
        ({"PIAGENT_AGENTS": {"default": "nowhere"}}, "dotted path"),
        ({"PIAGENT_AGENTS": {"default": "tests.nowhere.build"}}, "cannot be imported"),
        ({"PIAGENT_AGENTS": {"default": "json.dumps"}, "PIAGENT_RUNNER": "fast"},
         "PIAGENT_RUNNER must be 'local' or 'celery'"),
        ({"PIAGENT_AGENTS": {"default": "json.dumps"}, "PIAGENT_LEASE_S": 0},
         "PIAGENT_LEASE_S must be a number"),
        ({"PIAGENT_AGENTS": {"default": "json.dumps"}, "PIAGENT_DATABASE": "nope"},
         "PIAGENT_DATABASE must name a database"),
        ({"PIAGENT_AGENTS": {"default": "json.dumps"}, "PIAGENT_STORE": "os.getcwd"},
         "not a session store"),
    ]
    for overrides, message in cases:
        with override_settings(**overrides), pytest.raises(ImproperlyConfigured, match=message):
            _site.runner()
    with override_settings(PIAGENT_AGENTS={"default": "json.dumps"}):
        assert _site.agent_names() == ["default"]
        with pytest.raises(ImproperlyConfigured, match="returned str; build"):
            _site.build_agent("default", "s")
        with pytest.raises(ImproperlyConfigured, match="no agent 'other'"):
            _site.build_agent("other", "s")


def test_the_runner_is_one_per_process_and_its_ticker_stops_with_it(site: Site) -> None:
    site.use([assistant_text("hi")])
    first = _site.runner()
    assert _site.runner() is first and _site.store() is first.store
    assert isinstance(first, _site.SiteRunner) and isinstance(first.store, DjangoStore)
    assert first.store.using == "default"
    tickers = [t for t in threading.enumerate() if t.name == "piagent-recovery"]
    assert len(tickers) == 1 and tickers[0].daemon
    _site.reset()
    tickers[0].join(WAIT)
    assert not tickers[0].is_alive()
    assert _site.runner() is not first
    with override_settings(PIAGENT_STORE=lambda: SQLiteStore(site.tmp_path / "other.db")):
        assert isinstance(_site.store(), SQLiteStore)
        assert _site.runner().store is _site.store()


# --- a new project that adds the app -----------------------------------------------------------


def test_check_deploy_and_makemigrations_find_nothing_the_app_adds(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}

    def django(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "django", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    assert django("startproject", "mysite", str(tmp_path)).returncode == 0
    settings = (tmp_path / "mysite" / "settings.py").read_text(encoding="utf-8")
    added = re.sub(r"(['\"]django\.contrib\.staticfiles['\"],)",
                   r"\1\n    'piagent.contrib.django',", settings)
    assert added != settings
    added += '\nPIAGENT_AGENTS = {"default": "mysite.agents.build"}\n'
    (tmp_path / "mysite" / "with_app.py").write_text(added, encoding="utf-8")
    urls = tmp_path / "mysite" / "urls.py"
    text = urls.read_text(encoding="utf-8").replace(
        "from django.urls import path", "from django.urls import include, path")
    text = re.sub(r"(\s+path\(.admin/., admin\.site\.urls\),)",
                  r"\1\n    path('agent/', include('piagent.contrib.django.urls')),", text)
    assert "piagent.contrib.django.urls" in text
    urls.write_text(text, encoding="utf-8")

    def ids(settings_module: str) -> set[str]:
        done = django("check", "--deploy", f"--settings=mysite.{settings_module}")
        assert "Traceback" not in done.stderr, done.stderr
        return set(re.findall(r"\(([\w.]+\.[A-Z]\d+)\)", done.stdout + done.stderr))

    without, with_app = ids("settings"), ids("with_app")
    assert without, "startproject's settings are not ready to deploy: check --deploy says so"
    assert with_app == without
    assert not any(i.startswith("piagent") for i in with_app)
    checked = django("makemigrations", "--check", "--dry-run", "--settings=mysite.with_app")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_no_view_runs_inside_atomic_requests(site: Site, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    from django.core.handlers.base import BaseHandler
    from django.db import connections
    from django.urls import resolve

    site.use([assistant_text("hi")])
    monkeypatch.setitem(connections["default"].settings_dict, "ATOMIC_REQUESTS", True)
    for url in ("/agent/", "/agent/new/", "/agent/c/k/send/", "/agent/c/k/events/r/",
                "/agent/c/k/approve/"):
        view = resolve(url).func
        assert BaseHandler().make_view_atomic(view) is view, url
    browser = site.browser()
    key = browser.new()
    run_id = browser.send(key, "hello")
    assert [e["type"] for _, e in browser.events(key, run_id)][-1] == "agent_end"


CELERY_APP: Any = None


def test_the_celery_runner_is_built_from_the_settings(site: Site,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import celery
    except ImportError:
        unavailable("Celery is not installed (pip install 'piagent[celery]')")
    from piagent.celery import CeleryRunner

    site.use([assistant_text("hi")])
    monkeypatch.setattr(f"{__name__}.CELERY_APP", celery.Celery("piagent-site-test",
                                                                 broker="memory://"))
    with override_settings(PIAGENT_RUNNER="celery", PIAGENT_LEASE_S=7,
                           PIAGENT_CELERY_APP=f"{__name__}.CELERY_APP"):
        built = _site.runner()
        assert isinstance(built, CeleryRunner) and built.app is CELERY_APP
        assert built.lease_s == 7
        assert not [t for t in threading.enumerate() if t.name == "piagent-recovery"]
    with override_settings(PIAGENT_RUNNER="celery", PIAGENT_CELERY_APP=None), \
            pytest.raises(ImproperlyConfigured, match="PIAGENT_CELERY_APP must be a dotted"):
        _site.runner()


def test_an_agent_that_cannot_be_built_ends_its_run_as_an_error(site: Site) -> None:
    site.use([assistant_text("never")])

    def broken(session_id: str) -> Any:
        raise RuntimeError("no model key")

    with override_settings(PIAGENT_AGENTS={"default": broken}):
        browser = site.browser()
        key = browser.new()
        run_id = browser.send(key, "hello")
        assert browser.events(key, run_id) == []  # no event: it never started
        shown = browser.history(key)
        assert shown["run"] == {"id": run_id, "state": "error"}
        info = _site.runner().status(run_id)
        assert "make_agent" in (info.error_message or "") and "no model key" in \
            (info.error_message or "")
