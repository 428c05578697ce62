"""What the threads running a batch's calls post to the run's thread (one inbox per
execution): ``Update`` (a call's progress), ``Done`` (its completion), ``None`` (the run was
aborted); and ``refused``, the completions of calls a caller's executor would not take.
``_tools.py`` and ``_timeout.py`` both read them."""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Any

from ._call import Finalized, Prepared
from ._results import error_result

__all__ = ["Done", "Inbox", "Update", "refused"]


@dataclass(slots=True)
class Update:
    """Call ``index`` of an execution reported progress (its ``on_update``)."""

    index: int
    partial: Any


@dataclass(slots=True)
class Done:
    """Call ``index`` finished; ``failure``: ``on_tool_execute`` raised (it did not run)."""

    index: int
    done: Finalized
    failure: BaseException | None = None


Inbox = queue.SimpleQueue[Update | Done | None]  # None: the run was aborted


def refused(exc: RuntimeError, prepared: list[Prepared], index: int,
            inbox: Inbox) -> RuntimeError:
    """The executor refused call ``index`` (shut down): it and the later ones get an error."""
    error = RuntimeError(f"The tool executor refused a tool call ({exc}); a caller-owned "
                         "tool_executor must stay open while runs use it.")
    error.__cause__ = exc
    for late in range(index, len(prepared)):
        inbox.put(Done(late, Finalized(prepared[late].tool_call, error_result(str(error)), True)))
    return error
