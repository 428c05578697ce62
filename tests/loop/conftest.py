"""Shared helpers for the low-level loop tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from piagent import AgentEvent


class Recorder:
    """An ``emit`` that records every event and the thread it arrived on."""

    def __init__(self, on_event: Callable[[AgentEvent], None] | None = None) -> None:
        self.events: list[Any] = []
        self.threads: list[threading.Thread] = []
        self.on_event = on_event

    def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)
        self.threads.append(threading.current_thread())
        if self.on_event is not None:
            self.on_event(event)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]
