"""``piagent_purge_runs`` and ``piagent_recover_runs`` (Django finds them by their module)."""

__all__: list[str] = []
