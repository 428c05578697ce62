"""``manage.py piagent_purge_runs --older-than 7d``: delete the runs that ended that long ago.

Each run goes with its events and control entries, in batches of short transactions (runs go
on meanwhile); a live run is never deleted, nor is any conversation (the transcripts are the
store's). Run it from cron or a scheduler; ``--database`` names the alias
(``PIAGENT_DATABASE``, else ``default``).
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

__all__ = ["Command", "parse_age"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_age(text: str) -> float:
    """Seconds from ``"3600"``, ``"90s"``, ``"30m"``, ``"12h"``, ``"7d"`` or ``"2w"``;
    ``CommandError`` naming ``--older-than`` for anything else."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(text))
    if match is None:
        msg = (f"--older-than must be a number of seconds or a duration such as 90s, 30m, "
               f"12h, 7d or 2w; got {text!r}.")
        raise CommandError(msg)
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


class Command(BaseCommand):  # type: ignore[misc]  # Django's classes are untyped
    help = ("Delete the piagent runs that ended more than --older-than ago (seconds, or 90s, "
            "30m, 12h, 7d, 2w), with their events and control entries; never a live run, "
            "never a conversation.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", required=True, metavar="AGE",
                            help="how long ago a run ended: seconds, or 90s, 30m, 12h, 7d, 2w "
                                 "(0: every finished run)")
        parser.add_argument("--database", default=None,
                            help="the alias in DATABASES of the runs (PIAGENT_DATABASE, else "
                                 "'default')")

    def handle(self, *args: Any, **options: Any) -> None:
        seconds = parse_age(options["older_than"])
        alias = options["database"] or getattr(settings, "PIAGENT_DATABASE", "default")
        if alias not in settings.DATABASES:
            msg = (f"--database {alias!r} is not in settings.DATABASES (it has "
                   f"{', '.join(map(repr, settings.DATABASES))}).")
            raise CommandError(msg)
        from .....runs.backend import backend_for
        from ... import DjangoStore

        removed = backend_for(DjangoStore(alias)).purge(seconds)
        self.stdout.write(f"Purged {len(removed)} run{'' if len(removed) == 1 else 's'} that "
                          f"ended more than {seconds:g} s ago.")
