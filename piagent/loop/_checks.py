"""The checks of the loop's inputs: a tool list, and ``AgentLoopConfig``'s own fields.

Each raises at the call (a ``TypeError`` for a wrong kind of value, a ``ValueError`` for a
wrong value of the right kind) with a message naming the parameter, what was given and what
is accepted. They run when an ``AgentContext`` or ``AgentLoopConfig`` is built (once per
run), never per turn.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from ..models import Model
from ..tools import AgentTool

__all__ = ["check_loop_config", "check_tools", "describe"]

_HOOKS = ("transform_context", "get_api_key", "finish_turn", "prepare_request",
          "prepare_next_turn", "get_steering_messages", "get_follow_up_messages",
          "before_tool_call", "after_tool_call", "on_tool_execute")


def describe(value: object) -> str:
    """``value`` for an error text: its type and a short repr (``str 'hi'``, ``int 5``)."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _plain_function(value: object) -> bool:
    return inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.ismethod(value)


def check_tools(tools: Iterable[AgentTool], where: str) -> list[AgentTool]:
    """``tools`` as a new list if it is an iterable of ``AgentTool`` with distinct names.

    ``TypeError`` for one tool given alone, a function without ``@tool``, or anything else
    that is not an ``AgentTool``; ``ValueError`` for two tools of one name (the model calls
    a tool by its name, so the second could never be called). ``where`` names the parameter
    (``"tools"``, ``"state.tools"``).
    """
    if isinstance(tools, AgentTool):
        msg = (f"{where} must be a list of AgentTool, got one AgentTool ({tools.name!r}): "
               f"wrap it in a list, {where}=[{tools.name}].")
        raise TypeError(msg)
    if _plain_function(tools):
        name = getattr(tools, "__name__", "fn")
        msg = (f"{where} must be a list of AgentTool, got the function {name!r}: decorate it "
               f"with @tool and wrap it in a list, {where}=[{name}].")
        raise TypeError(msg)
    if isinstance(tools, str | bytes | dict) or not isinstance(tools, Iterable):
        msg = (f"{where} must be a list of AgentTool (functions decorated with @tool), "
               f"got {describe(tools)}.")
        raise TypeError(msg)
    result = list(tools)
    seen: dict[str, int] = {}
    for index, item in enumerate(result):
        if not isinstance(item, AgentTool):
            if _plain_function(item) or (callable(item) and not isinstance(item, type)
                                         and hasattr(item, "__name__")):
                name = getattr(item, "__name__", "fn")
                msg = (f"{where}[{index}] is the function {name!r}, not an AgentTool: decorate "
                       f"it with @tool (from piagent import tool), or pass tool({name}).")
            else:
                msg = (f"{where}[{index}] is {describe(item)}, not an AgentTool: build tools "
                       f"with @tool, or AgentTool(name=..., description=..., parameters=..., "
                       f"execute=...).")
            raise TypeError(msg)
        first = seen.setdefault(item.name, index)
        if first != index:
            msg = (f"{where} has two tools named {item.name!r} ({where}[{first}] and "
                   f"{where}[{index}]): the model calls a tool by its name, so each needs its "
                   f"own; rename one (@tool(name=...)).")
            raise ValueError(msg)
    return result


def check_loop_config(config: Any) -> None:
    """The fields ``AgentLoopConfig`` adds to the stream options (an ``AgentLoopConfig``,
    which imports this module, hence ``Any``)."""
    model = config.model
    if model is not None and not isinstance(model, Model):
        hint = (": resolve a 'PROVIDER/MODEL' name first, "
                f"piagent.providers.resolve_model({model!r})" if isinstance(model, str) else "")
        msg = f"model must be a Model or None, got {describe(model)}{hint}."
        raise TypeError(msg)
    if not callable(config.convert_to_llm):
        msg = (f"convert_to_llm must be a callable (messages -> messages), e.g. "
               f"piagent.default_convert_to_llm, got {describe(config.convert_to_llm)}.")
        raise TypeError(msg)
    for name in _HOOKS:
        value = getattr(config, name)
        if value is not None and not callable(value):
            msg = f"{name} must be a callable or None, got {describe(value)}."
            raise TypeError(msg)
    mode = config.tool_execution
    if mode != "parallel" and mode != "sequential":
        msg = f"tool_execution must be 'parallel' or 'sequential', got {mode!r}."
        raise ValueError(msg)
    timeout = config.tool_timeout
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(
            timeout, (int, float)) or not 0 < timeout < float("inf")):
        msg = ("tool_timeout must be a positive number of seconds or None (no limit), got "
               f"{describe(timeout)}.")
        raise (ValueError if isinstance(timeout, (int, float)) and not isinstance(
            timeout, bool) else TypeError)(msg)
    limit = config.max_parallel_tools
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int):
        msg = f"max_parallel_tools must be an int >= 1 or None (no cap), got {describe(limit)}."
        raise TypeError(msg)
    if limit < 1:
        msg = f"max_parallel_tools must be an int >= 1 or None (no cap), got {limit}."
        raise ValueError(msg)
