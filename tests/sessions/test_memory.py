"""``MemoryStore`` keeps the store contract."""

from __future__ import annotations

from pathlib import Path

from piagent.sessions import MemoryStore, SessionStore

from .conformance import SessionStoreConformance


class TestMemoryStore(SessionStoreConformance):
    def make_store(self, tmp_path: Path) -> SessionStore:
        return MemoryStore()
