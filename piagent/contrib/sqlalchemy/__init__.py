"""``SQLAlchemyStore``: the session store on a SQLAlchemy engine (docs/sessions.md, extra
``piagent[sqlalchemy]``): SQLite, PostgreSQL, MariaDB/MySQL; Flask-SQLAlchemy's
``db.engine`` works. ``metadata`` holds its tables, for ``create_all`` or Alembic, the runs'
among them: importing this module registers ``SQLAlchemyRunBackend``, so ``LocalRunner``,
``QueuedRunner`` and ``CeleryRunner`` keep their runs in the store's database."""

from __future__ import annotations

try:
    import sqlalchemy as _sqlalchemy
except ImportError as _missing:  # the extra is not installed
    raise ImportError("piagent.contrib.sqlalchemy needs SQLAlchemy 2: "
                      "pip install 'piagent[sqlalchemy]'") from _missing
del _sqlalchemy

from ...runs import backend as _backend  # noqa: E402 - after the check above
from ._runs import SQLAlchemyRunBackend  # noqa: E402
from ._store import SQLAlchemyStore  # noqa: E402
from ._tables import metadata  # noqa: E402

__all__ = ["SQLAlchemyRunBackend", "SQLAlchemyStore", "metadata"]

_backend.register_backend(SQLAlchemyStore, SQLAlchemyRunBackend)
