"""Conversations the CLI keeps: ``piagent chat --session NAME`` and ``piagent sessions``.

They live in one SQLite file in the user's data folder: ``--sessions-db PATH``, else
``$PIAGENT_SESSIONS_DB``, else ``$XDG_DATA_HOME/piagent/sessions.db``, else
``~/.local/share/piagent/sessions.db``.
"""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path
from typing import TextIO

__all__ = ["cmd_sessions", "sessions_db_path"]


def sessions_db_path(explicit: str | None = None) -> Path:
    """Where the CLI's sessions live (see the module's docstring for the order)."""
    if explicit:
        return Path(explicit).expanduser()
    from_env = os.environ.get("PIAGENT_SESSIONS_DB")
    if from_env:
        return Path(from_env).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME")
    base = Path(data_home) if data_home else Path.home() / ".local" / "share"
    return base / "piagent" / "sessions.db"


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def cmd_sessions(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``piagent sessions``: each kept conversation with its size and last activity."""
    path = sessions_db_path(args.sessions_db)
    if not path.exists():  # listing creates nothing
        out.write(f"no sessions yet in {path} (start one: piagent chat -m MODEL --session NAME)\n")
        return 0
    from ..sessions import SQLiteStore

    with SQLiteStore(path) as store:
        ids = store.session_ids()
        if not ids:
            out.write(f"no sessions yet in {path}\n")
            return 0
        rows = [(sid, len(store.load(sid)), _when(store.last_activity(sid))) for sid in ids]
    width = max(len("SESSION"), *(len(sid) for sid, _, _ in rows))
    out.write(f"{'SESSION':<{width}}  {'MESSAGES':>8}  LAST ACTIVITY\n")
    for sid, count, when in rows:
        out.write(f"{sid:<{width}}  {count:>8}  {when}\n")
    out.write(f"({len(rows)} session{'' if len(rows) == 1 else 's'} in {path})\n")
    return 0
