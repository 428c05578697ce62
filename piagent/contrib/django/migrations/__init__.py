"""The app's migrations (``makemigrations piagent``)."""

__all__: list[str] = []
