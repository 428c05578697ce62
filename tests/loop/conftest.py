"""Helpers for the low-level loop tests (``run_agent_loop`` and friends).

* ``context_for(*tools, messages=())``: an ``AgentContext`` whose leading system message
  declares ``tools`` (as the Agent builds it), then ``messages``.
* ``make_config(fn, **kwargs)``: an ``AgentLoopConfig`` for ``fn``'s model, with
  ``convert_to_llm=list`` unless given.

The event ``Recorder`` and ``WAIT`` are the suite's (``tests/conftest.py``); tools come from
``tests/tools/conftest.py`` (``make_tool``, ``ok``, ``PATH_SCHEMA``).
"""

from __future__ import annotations

from typing import Any

from piagent import AgentContext, AgentLoopConfig, AgentTool, SystemMessage
from piagent.testing import ScriptedStreamFn
from piagent.transcript import to_tool_declaration


def context_for(*tools: AgentTool, messages: tuple[Any, ...] = ()) -> AgentContext:
    head = SystemMessage("", tools_added=[to_tool_declaration(t) for t in tools], timestamp=0)
    return AgentContext([head, *messages], list(tools))


def make_config(fn: ScriptedStreamFn, **kwargs: Any) -> AgentLoopConfig:
    kwargs.setdefault("convert_to_llm", list)
    return AgentLoopConfig(model=fn.model, **kwargs)
