"""The site's piagent, from its settings (docs/django.md, "The app's views"): the agents
``PIAGENT_AGENTS`` names, the store and the runner the app's views use, one of each per
process. Call ``runner()`` where a process needs the site's runner outside a request: a
Celery worker (``PIAGENT_RUNNER = "celery"``), a management command, a shell.

* ``agent_names()``: the names of ``PIAGENT_AGENTS``; ``build_agent(name, session_id)``: a
  new ``Agent`` of one; ``agent_for(session_id)``: the agent of a conversation (the runner's
  ``make_agent``);
* ``store()``: ``PIAGENT_STORE``'s store, else a ``DjangoStore`` on ``PIAGENT_DATABASE``
  (``database()``);
* ``runner()``: a ``SiteRunner`` (runs on threads of this process, lost runs resumed by its
  recovery ticker) or, with ``PIAGENT_RUNNER = "celery"``, a ``CeleryRunner``;
* ``reset()``: forget them (a ``PIAGENT_*`` setting's change does it too).
"""

from __future__ import annotations

from ._site import (
    DEFAULT_AGENT,
    SiteRunner,
    agent_for,
    agent_names,
    build_agent,
    database,
    reset,
    runner,
    store,
)

__all__ = ["DEFAULT_AGENT", "SiteRunner", "agent_for", "agent_names", "build_agent", "database",
           "reset", "runner", "store"]
