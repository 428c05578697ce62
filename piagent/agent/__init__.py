"""``Agent``: the stateful agent over the loop (state, queues, runs, listeners).

- ``Agent``: a transcript, tools, hooks, a steering and a follow-up queue, listeners; each
  ``prompt()`` / ``continue_()`` runs on a worker thread.
- ``AgentRun``: one run (wait, abort, its events and messages); ``AgentEventIterator``: the
  events of a run as they happen (``Agent.stream()``), with ``poll(timeout)``.
- ``AgentState``: the live state the reducer updates.
"""

from __future__ import annotations

from ._agent import Agent, Listener
from ._input import default_convert_to_llm
from ._limits import Budget, BudgetStore, LimitHit, Limits
from ._queues import QueueMode
from ._run import RUN_SETTLED, AgentEventIterator, AgentRun, RunSettled, TypedRun
from ._state import AgentState

__all__ = [
    "RUN_SETTLED",
    "Agent",
    "AgentEventIterator",
    "AgentRun",
    "AgentState",
    "Budget",
    "BudgetStore",
    "LimitHit",
    "Limits",
    "Listener",
    "QueueMode",
    "RunSettled",
    "TypedRun",
    "default_convert_to_llm",
]
