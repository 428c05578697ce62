"""``manage.py piagent_recover_runs``: resume, in this process, the runs whose executor died.

A run whose lease ran out while it was ``running`` (its process was killed, its machine
went away) is claimed here (one claimer per run, across every process), its stored
transcript resumed with the site's agents (``PIAGENT_AGENTS``; each tool's ``replay``
policy, docs/sessions.md) on a thread of this command, and the command waits until every
resumed run is final (``--timeout`` bounds the wait: a run still executing then is left to
lose its lease again and be recovered later). The site's own runner recovers runs by itself
(its recovery ticker, or the Celery workers); this command is for a site whose processes
are all gone, or for cron.
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

__all__ = ["Command"]


def _site_runner() -> Any:
    """The site's runner (``piagent.contrib.django._site.runner``), imported when needed."""
    try:  # by name: the site's module is imported only when the command runs
        site = importlib.import_module("piagent.contrib.django._site")
    except ImportError as exc:
        msg = f"piagent_recover_runs needs the site's runner (PIAGENT_AGENTS): {exc}"
        raise CommandError(msg) from exc
    return site.runner()


class Command(BaseCommand):  # type: ignore[misc]  # Django's classes are untyped
    help = ("Resume in this process the piagent runs whose lease ran out (their worker died), "
            "with the site's agents (PIAGENT_AGENTS), and wait until they are final.")
    # call_command("piagent_recover_runs", runner=...): a runner other than the site's
    stealth_options = ("runner",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                            help="the longest to wait for the resumed runs (default: until "
                                 "they are final)")

    def handle(self, *args: Any, **options: Any) -> None:
        from .....runs import QueuedRunner

        timeout = options["timeout"]
        if timeout is not None and not timeout > 0:
            msg = f"--timeout must be a number of seconds > 0, got {timeout!r}."
            raise CommandError(msg)
        site = options.get("runner") or _site_runner()
        threads: list[threading.Thread] = []
        failures: list[str] = []

        def execute(run_id: str, payload: dict[str, Any]) -> None:
            try:
                here.execute(run_id, payload)
            except Exception as exc:  # noqa: BLE001 - reported by the command
                failures.append(f"{run_id}: {type(exc).__name__}: {exc}")

        def submit(run_id: str, payload: dict[str, Any]) -> None:
            thread = threading.Thread(target=execute, args=(run_id, payload),
                                      name="piagent-recover", daemon=True)
            threads.append(thread)  # owned by this command, joined below
            thread.start()

        try:
            here = QueuedRunner(site.store, site.make_agent, submit, lease_s=site.lease_s)
        except (AttributeError, TypeError) as exc:
            msg = (f"piagent_recover_runs needs a runner on a store other processes reach "
                   f"(a DjangoStore), got {site!r}: {exc}")
            raise CommandError(msg) from exc
        run_ids = here.recover_lost()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        left = [run_id for run_id in run_ids if here.status(run_id).live]
        for run_id in run_ids:
            self.stdout.write(f"{run_id}: {here.status(run_id).state}")
        self.stdout.write(f"Resumed {len(run_ids)} run{'' if len(run_ids) == 1 else 's'}.")
        if failures or left:
            msg = "; ".join([*failures, *(f"{r}: still executing after --timeout" for r in left)])
            raise CommandError(msg)
