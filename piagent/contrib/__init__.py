"""Integrations with other libraries' databases, each an optional extra imported only when
used: ``piagent.contrib.sqlalchemy`` (``SQLAlchemyStore`` on an engine, extra
``piagent[sqlalchemy]``). ``import piagent`` never imports them."""

from __future__ import annotations

__all__: list[str] = []
