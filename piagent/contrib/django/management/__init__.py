"""The app's management commands (``manage.py piagent_purge_runs``, ``piagent_recover_runs``)."""

__all__: list[str] = []
