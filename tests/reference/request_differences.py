"""The deliberate differences between the requests piagent sends and pi-ai 1.4.0's.

Each ``RequestRow`` names the runs it applies to and turns pi's recorded requests of such a
run into what piagent sends; the test asserts the row changes pi's requests (the difference is
real) and that the result is piagent's. ``REQUEST_ROWS`` is keyed by the name
docs/reference.md's deliberate differences give the row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Requests = list[dict[str, Any]]


@dataclass(frozen=True)
class RequestRow:
    reason: str
    when: Callable[[dict[str, Any], str], bool]
    transform: Callable[[Requests, dict[str, Any], str], Requests]


def applies(row: RequestRow, conv: dict[str, Any], api: str) -> bool:
    return row.when(conv, api)


REQUEST_ROWS: dict[str, RequestRow] = {}
