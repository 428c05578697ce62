"""``SQLAlchemyStore``: the session store on a SQLAlchemy engine (docs/sessions.md, extra
``piagent[sqlalchemy]``): SQLite, PostgreSQL, MariaDB/MySQL; Flask-SQLAlchemy's
``db.engine`` works. ``metadata`` holds its tables, for ``create_all`` or Alembic."""

from __future__ import annotations

from ._store import SQLAlchemyStore
from ._tables import metadata

__all__ = ["SQLAlchemyStore", "metadata"]
