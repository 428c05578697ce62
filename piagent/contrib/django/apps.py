"""The app's configuration: label ``piagent`` (its tables are ``piagent_*``); when the apps
are ready it connects the site's hooks (``_site``)."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["PiagentConfig"]


class PiagentConfig(AppConfig):
    """``piagent.contrib.django`` as a Django app."""

    name = "piagent.contrib.django"
    label = "piagent"
    verbose_name = "piagent"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Connect the site's hooks (``_site``: its runner built at a process's first
        request, rebuilt when a ``PIAGENT_*`` setting changes)."""
        from . import _site  # noqa: F401 - connects its signal receivers
