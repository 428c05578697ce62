"""``Agent``: the stateful agent over the loop (state, queues, runs, listeners).

- ``Agent``: a transcript, tools, hooks, a steering and a follow-up queue, listeners; each
  ``prompt()`` / ``continue_()`` runs on a worker thread (a blocking one off the main
  thread: on the calling thread).
- ``AgentRun``: one run (wait, abort, its events and messages); ``AgentEventIterator``: the
  events of a run as they happen (``Agent.stream()``), with ``poll(timeout)``.
- ``AgentState``: the live state the reducer updates.
- ``normalise_input``: what ``prompt()`` accepts, as the list of messages it runs (a runner
  checks the input of a run it starts elsewhere with it).
"""

from __future__ import annotations

from ._agent import Agent, Listener
from ._input import default_convert_to_llm, normalise_input
from ._queues import QueueMode, QueueView
from ._run import RUN_SETTLED, AgentEventIterator, AgentRun, RunSettled
from ._state import AgentState

__all__ = [
    "RUN_SETTLED",
    "Agent",
    "AgentEventIterator",
    "AgentRun",
    "AgentState",
    "Listener",
    "QueueMode",
    "QueueView",
    "RunSettled",
    "default_convert_to_llm",
    "normalise_input",
]
