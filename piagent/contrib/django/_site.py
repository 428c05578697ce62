"""The site's piagent, from its settings: the agents it names, its store and its runner, built
once per process (and again in a forked child) and shared by every thread.

Settings (docs/django.md, "The app's views"):

* ``PIAGENT_AGENTS`` (required by ``agent_names``, ``runner``): ``{"name": "dotted.path"}``,
  each path a ``build(session_id) -> Agent`` (an ``Agent`` with model, tools and hooks but no
  store: the runner attaches it). A conversation talks to the agent its ``Conversation.agent``
  names (``"default"`` when it has no row).
* ``PIAGENT_DATABASE``: the alias in ``DATABASES`` of the store, the runs and the
  conversations (``"default"``).
* ``PIAGENT_STORE``: a dotted path to a factory ``() -> store`` that replaces ``DjangoStore``
  (an ``SQLiteStore`` or ``PostgresStore`` beside the site's database, say); unset: a
  ``DjangoStore`` on ``PIAGENT_DATABASE``.
* ``PIAGENT_RUNNER``: ``"local"`` (the default) or ``"celery"``. Local: a ``QueuedRunner``
  whose ``submit`` executes the run on a thread of this process (``piagent-site-run``, one per
  run, ending with it), plus the process's recovery ticker (below). Celery: a
  ``piagent.celery.CeleryRunner`` on ``PIAGENT_CELERY_APP`` (a dotted path to the
  ``celery.Celery`` app); the Celery workers must build it too (call ``runner()`` in the
  worker, after ``django.setup()``), they execute the runs and recover lost ones.
* ``PIAGENT_LEASE_S``: an executing process's lease (30 s). ``PIAGENT_RECOVER_EVERY_S``: how
  often the local runner's ticker looks for lost runs (5 s).

The recovery ticker: with the local runner every process that built it (every gunicorn
worker that served a request: the app's ``request_started`` hook builds it) keeps one daemon
thread, ``piagent-recovery``, that calls ``recover_lost()`` every ``PIAGENT_RECOVER_EVERY_S``.
A worker killed mid-run (SIGKILL) stops renewing its runs' leases; once a lease ran out the
first ticker to see it submits the recovery, and its own process resumes the stored
transcript: the run goes on within ``PIAGENT_LEASE_S + PIAGENT_RECOVER_EVERY_S`` seconds (the
same run id, a ``run_resumed`` event in its stream).

A change of a ``PIAGENT_*`` setting (``override_settings`` in tests) drops what was built;
``reset()`` does so by hand.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import request_started, setting_changed
from django.db import close_old_connections, connections
from django.utils.module_loading import import_string

from ...agent import Agent
from ...runs import QueuedRunner, Runner
from ...sessions import SessionStore
from ._store import DjangoStore, key_of

__all__ = ["DEFAULT_AGENT", "SiteRunner", "agent_for", "agent_names", "build_agent", "database",
           "reset", "runner", "store"]

logger = logging.getLogger("piagent.contrib.django")

DEFAULT_AGENT = "default"
"""The agent a conversation without a ``Conversation`` row talks to."""

_LEASE_S = 30.0
_RECOVER_EVERY_S = 5.0
_RUNNERS = ("local", "celery")


@dataclass
class _Built:
    """What this process built from the settings (one per process id)."""

    pid: int
    agents: dict[str, Callable[[str], Agent]] | None = None
    store: SessionStore | None = None
    runner: Runner | None = None
    hooked: bool = False  # the first request's hook tried to build the runner


# guards _built: the process's agents, store, runner and ticker (any request thread, the
# ticker, a run's thread); _built is replaced, never shared, by a forked child
_lock = threading.RLock()
_built: _Built | None = None


def _current() -> _Built:
    """This process's ``_Built`` (a new one in a forked child); call with ``_lock`` held."""
    global _built
    if _built is None or _built.pid != os.getpid():
        _built = _Built(os.getpid())  # a fork inherits no thread: the old ticker is gone
    return _built


def _number(name: str, default: float) -> float:
    value = getattr(settings, name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        msg = f"settings.{name} must be a number of seconds > 0, got {value!r}."
        raise ImproperlyConfigured(msg)
    return float(value)


def database() -> str:
    """``settings.PIAGENT_DATABASE``: the alias of the store's, runs' and conversations'
    database (``"default"``)."""
    alias = getattr(settings, "PIAGENT_DATABASE", "default")
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        msg = (f"settings.PIAGENT_DATABASE must name a database of settings.DATABASES "
               f"({', '.join(map(repr, settings.DATABASES)) or 'none'}), got {alias!r}.")
        raise ImproperlyConfigured(msg)
    return alias


def _imported(setting: str, path: object, what: str) -> Any:
    """The object at dotted ``path`` (a callable passes as it is)."""
    if callable(path) and not isinstance(path, str):
        return path
    if not isinstance(path, str) or "." not in path:
        msg = f"{setting} must be a dotted path to {what}, got {path!r}."
        raise ImproperlyConfigured(msg)
    try:
        return import_string(path)
    except ImportError as exc:
        msg = f"{setting} = {path!r} cannot be imported ({what}): {exc}"
        raise ImproperlyConfigured(msg) from exc


def _agents() -> dict[str, Callable[[str], Agent]]:
    with _lock:
        built = _current()
        if built.agents is None:
            named = getattr(settings, "PIAGENT_AGENTS", None)
            accepted = ('a dict of agent names to dotted paths of build(session_id) -> Agent, '
                        'e.g. {"default": "myapp.agents.build"}')
            if not isinstance(named, Mapping) or not named:
                msg = f"settings.PIAGENT_AGENTS must be {accepted}, got {named!r}."
                raise ImproperlyConfigured(msg)
            agents: dict[str, Callable[[str], Agent]] = {}
            for name, path in named.items():
                if not isinstance(name, str) or not name or len(name) > 100:
                    msg = (f"settings.PIAGENT_AGENTS: each name must be a non-empty str of at "
                           f"most 100 characters, got {name!r}.")
                    raise ImproperlyConfigured(msg)
                build = _imported(f"settings.PIAGENT_AGENTS[{name!r}]", path,
                                  "a build(session_id) -> Agent")
                if not callable(build):
                    msg = (f"settings.PIAGENT_AGENTS[{name!r}] = {path!r} is not callable; "
                           f"it must be a build(session_id) -> Agent.")
                    raise ImproperlyConfigured(msg)
                agents[name] = build
            built.agents = agents
        return built.agents


def agent_names() -> list[str]:
    """The agents of ``settings.PIAGENT_AGENTS``, in the order they are written."""
    return list(_agents())


def build_agent(name: str, session_id: str) -> Agent:
    """A new ``Agent`` of the agent ``name`` for ``session_id`` (``ImproperlyConfigured`` if
    ``PIAGENT_AGENTS`` has no such name or its build returns no ``Agent``)."""
    agents = _agents()
    build = agents.get(name)
    if build is None:
        msg = (f"no agent {name!r} in settings.PIAGENT_AGENTS (it names "
               f"{', '.join(map(repr, agents))}).")
        raise ImproperlyConfigured(msg)
    agent = build(session_id)
    if not isinstance(agent, Agent):
        msg = (f"settings.PIAGENT_AGENTS[{name!r}] returned {type(agent).__name__}; "
               f"build(session_id) must return an Agent.")
        raise ImproperlyConfigured(msg)
    return agent


def agent_for(session_id: str) -> Agent:
    """The agent of the conversation ``session_id``: the one its ``Conversation.agent``
    names, ``DEFAULT_AGENT`` when it has no row. The runner's ``make_agent``."""
    from .models import Conversation

    name = Conversation.objects.using(database()).filter(key=key_of(session_id)) \
        .values_list("agent", flat=True).first()
    return build_agent(name or DEFAULT_AGENT, session_id)


def store() -> SessionStore:
    """The site's session store: ``PIAGENT_STORE``'s, else a ``DjangoStore`` on
    ``PIAGENT_DATABASE``; one per process."""
    with _lock:
        built = _current()
        if built.store is None:
            path = getattr(settings, "PIAGENT_STORE", None)
            if path is None:
                built.store = DjangoStore(database())
            else:
                factory = _imported("settings.PIAGENT_STORE", path,
                                    "a factory () -> session store")
                made = factory()
                if not all(callable(getattr(made, m, None)) for m in ("load", "append")):
                    msg = (f"settings.PIAGENT_STORE = {path!r} returned "
                           f"{type(made).__name__}, not a session store.")
                    raise ImproperlyConfigured(msg)
                built.store = made
        return built.store


def runner() -> Runner:
    """The site's runner (``PIAGENT_RUNNER``): a local ``QueuedRunner`` executing on threads
    of this process with its recovery ticker, or a ``CeleryRunner``; one per process."""
    with _lock:
        built = _current()
        if built.runner is None:
            kind = getattr(settings, "PIAGENT_RUNNER", "local")
            if kind not in _RUNNERS:
                msg = f"settings.PIAGENT_RUNNER must be 'local' or 'celery', got {kind!r}."
                raise ImproperlyConfigured(msg)
            _agents()  # a wrong PIAGENT_AGENTS fails here, not in a run
            lease_s = _number("PIAGENT_LEASE_S", _LEASE_S)
            if kind == "celery":
                built.runner = _celery_runner(lease_s)
            else:
                every = _number("PIAGENT_RECOVER_EVERY_S", _RECOVER_EVERY_S)
                built.runner = SiteRunner(store(), agent_for, lease_s=lease_s,
                                          recover_every_s=every)
        return built.runner


def _celery_runner(lease_s: float) -> Runner:
    from ...celery import CeleryRunner

    app = _imported("settings.PIAGENT_CELERY_APP",
                    getattr(settings, "PIAGENT_CELERY_APP", None), "the celery.Celery app")
    return CeleryRunner(app, store(), agent_for, lease_s=lease_s)


class SiteRunner(QueuedRunner):
    """The local runner: a ``QueuedRunner`` that executes each run on a thread of this
    process (``piagent-site-run``, a daemon that ends with the run: a dying process leaves
    the run to another process's ticker) and keeps the recovery ticker, a daemon thread
    (``piagent-recovery``) calling ``recover_lost()`` every ``recover_every_s`` until
    ``close()``."""

    def __init__(self, store: SessionStore, make_agent: Callable[[str], Agent], *,
                 lease_s: float = _LEASE_S, recover_every_s: float = _RECOVER_EVERY_S) -> None:
        super().__init__(store, make_agent, self._submit_here, lease_s=lease_s)
        self.recover_every_s = recover_every_s
        # the ticker and the event that stops it; owned by this runner, stopped by close()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="piagent-recovery",
                                        daemon=True)
        self._ticker.start()

    def _submit_here(self, run_id: str, payload: dict[str, Any]) -> None:
        threading.Thread(target=self._execute_here, args=(run_id, payload),
                         name="piagent-site-run", daemon=True).start()

    def _execute_here(self, run_id: str, payload: dict[str, Any]) -> None:
        try:
            self.execute(run_id, payload)
        except Exception:  # the run records its own error; this thread has no one to tell
            logger.exception("run %s failed to execute", run_id)
        finally:
            connections.close_all()  # this thread's (the Conversation lookup's)

    def _tick(self) -> None:
        try:
            while not self._stop.wait(self.recover_every_s):
                close_old_connections()
                try:
                    self.recover_lost()
                except Exception:  # the database is away: the next tick tries again
                    logger.exception("looking for lost runs failed; trying again in %g s",
                                     self.recover_every_s)
                close_old_connections()
        finally:
            connections.close_all()

    def close(self) -> None:
        """Stop the ticker (runs executing here go on)."""
        self._stop.set()
        if self._ticker is not threading.current_thread():
            self._ticker.join(10.0)


def reset() -> None:
    """Forget what was built (the ticker stops); the next call builds from the settings
    again. Runs executing here go on."""
    global _built
    with _lock:
        built, _built = _built, None
    if built is not None and built.pid == os.getpid() and isinstance(built.runner, SiteRunner):
        built.runner.close()  # the store stays open for the runs that go on


def _on_setting_changed(setting: str = "", **kwargs: Any) -> None:
    if setting.startswith("PIAGENT_") or setting == "DATABASES":
        reset()


def _on_request_started(**kwargs: Any) -> None:
    """Build the runner at a process's first request, so its ticker runs in every worker
    that serves requests (a misconfiguration is logged here and raised by the views)."""
    with _lock:
        built = _current()
        if built.hooked or getattr(settings, "PIAGENT_AGENTS", None) is None:
            return
        built.hooked = True  # once: a misconfiguration is logged once per process
    try:
        runner()
    except Exception:
        logger.exception("piagent: the site's runner could not be built")


def _after_fork_in_child() -> None:
    """A forked child (a gunicorn worker of a ``--preload`` master) builds its own: the
    parent's lock may have been held by a thread the child does not have."""
    global _lock, _built
    _lock = threading.RLock()
    _built = None


if hasattr(os, "register_at_fork"):  # POSIX (Windows does not fork)
    os.register_at_fork(after_in_child=_after_fork_in_child)
setting_changed.connect(_on_setting_changed, dispatch_uid="piagent-site-settings")
request_started.connect(_on_request_started, dispatch_uid="piagent-site-request")
