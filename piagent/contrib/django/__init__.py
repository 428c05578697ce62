"""``piagent.contrib.django``: the Django app (``INSTALLED_APPS += ["piagent.contrib.django"]``,
label ``piagent``) whose models keep sessions, their start marks, approvals and budgets in the
site's own database, and ``DjangoStore`` on them (docs/sessions.md, extra
``piagent[django]``). Importing this package imports no model: a store can be named in
settings before the apps are loaded."""

from __future__ import annotations

from ._store import DjangoStore

__all__ = ["DjangoStore"]
