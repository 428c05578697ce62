"""The app's configuration: label ``piagent`` (its tables are ``piagent_*``)."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["PiagentConfig"]


class PiagentConfig(AppConfig):
    """``piagent.contrib.django`` as a Django app."""

    name = "piagent.contrib.django"
    label = "piagent"
    verbose_name = "piagent"
    default_auto_field = "django.db.models.BigAutoField"
