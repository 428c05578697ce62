"""``piagent.contrib.django``: the Django app (``INSTALLED_APPS += ["piagent.contrib.django"]``,
label ``piagent``) whose models keep sessions, their start marks, approvals and budgets in the
site's own database, and ``DjangoStore`` on them (docs/sessions.md, extra
``piagent[django]``). Importing this package imports no model: a store can be named in
settings before the apps are loaded. ``DjangoRunBackend`` keeps the runs of a runner on a
``DjangoStore`` (``LocalRunner``, ``QueuedRunner``, ``CeleryRunner``) in the same database."""

from __future__ import annotations

try:
    import django as _django
except ImportError as _missing:  # the extra is not installed
    raise ImportError("piagent.contrib.django needs Django 5.2: "
                      "pip install 'piagent[django]'") from _missing
del _django

from ...runs.backend import register_backend as _register  # noqa: E402 - after the check
from ._runs import DjangoRunBackend  # noqa: E402
from ._store import DjangoStore  # noqa: E402

# a runner on a DjangoStore keeps its runs in the same database (no model imported here)
_register(DjangoStore, DjangoRunBackend)

__all__ = ["DjangoRunBackend", "DjangoStore"]
