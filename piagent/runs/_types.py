"""The public values of the runs layer: ``RunEvent``, ``RunInfo``, ``RunNotFoundError``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from ..errors import PiAgentError

RunState: TypeAlias = Literal["queued", "running", "done", "error", "aborted", "lost",
                              "waiting"]
"""``queued`` and ``running`` are live (the run holds its session's lease); the rest are final.
``waiting``: the run ended with tool calls waiting for a decision (docs/approvals.md); the
decision that completes the batch starts the session's next run."""

LIVE_STATES: Final = frozenset({"queued", "running"})
FINAL_STATES: Final = frozenset({"done", "error", "aborted", "lost", "waiting"})

_ID_DIGITS = 10


def event_id(seq: int) -> str:
    """The id of a run's ``seq``-th event (from 0): fixed-width digits, so ids sort as strings."""
    return f"{seq:0{_ID_DIGITS}d}"


def parse_event_id(value: object) -> int:
    """The sequence number an event id names; ``ValueError`` for anything but such an id."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        msg = (f"after must be None or an event id from this run (a string of digits such as "
               f"{event_id(0)!r}), got {value!r}.")
        raise ValueError(msg)
    return int(value)


class RunNotFoundError(PiAgentError, KeyError):
    """No run has this id (in the runner's store). A ``KeyError`` too."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class RunEvent:
    """One event of a run: its ordered ``id`` and its pi-JSON form (``event_to_dict``)."""

    id: str
    event: dict[str, Any]

    @property
    def type(self) -> str:
        """The event's ``type`` (``"agent_start"`` … ``"agent_end"``)."""
        return str(self.event.get("type", ""))


@dataclass(frozen=True)
class RunInfo:
    """What the store knows of a run. Times are epoch seconds; ``None`` until they happen."""

    run_id: str
    session_id: str
    state: RunState
    error_message: str | None
    created_at: float
    started_at: float | None
    ended_at: float | None

    @property
    def live(self) -> bool:
        """True while the run is ``queued`` or ``running``."""
        return self.state in LIVE_STATES
