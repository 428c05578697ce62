"""The checks of what an ``Agent`` is given: its constructor's arguments, ``state.model``,
``state.messages`` and ``state.tools`` assignments, and the timeouts of its waits.

Each raises at the call (a ``TypeError`` for a wrong kind of value, a ``ValueError`` for a
wrong value of the right kind) with a message naming the parameter, what was given and what
is accepted. The request options and hooks are checked by building the ``AgentLoopConfig`` a
run would start with, so the Agent and the loop say the same thing.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Iterable
from typing import Any

from ..loop import AgentLoopConfig, check_tools
from ..messages import AgentMessage
from ..models import Model
from ..tools import AgentTool
from ._input import default_convert_to_llm

__all__ = [
    "check_agent",
    "check_agent_keywords",
    "check_tools",
    "check_messages",
    "check_model",
    "check_thinking_level",
    "check_timeout",
]

_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")
_MESSAGE_CLASSES = ("UserMessage, AssistantMessage, ToolResultMessage, SystemMessage, or a "
                    "dataclass with a role registered with register_message_type")
# the Agent's options that are the loop's too, checked by building an AgentLoopConfig
_LOOP_OPTIONS = ("transform_context", "get_api_key", "finish_turn", "prepare_request",
                 "prepare_next_turn", "before_tool_call", "after_tool_call", "tool_execution",
                 "max_parallel_tools", "tool_executor", "tool_timeout", "session_id", "api_key",
                 "max_tokens", "temperature", "max_retry_delay_ms", "on_payload", "on_response",
                 "on_provider_stream_event", "identity", "timeout_ms", "env", "telemetry")


def _got(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def check_agent(arguments: dict[str, Any]
                ) -> tuple[Model | None, list[AgentTool], list[AgentMessage]]:
    """Check ``Agent(...)``'s arguments (its ``locals()`` on entry); return the model (a
    ``"PROVIDER/MODEL"`` str resolved), the tools and the messages as lists."""
    system_prompt = arguments["system_prompt"]
    if system_prompt is not None and not isinstance(system_prompt, str):
        msg = f"system_prompt must be a str, got {_got(system_prompt)}."
        raise TypeError(msg)
    model = check_model(arguments["model"])
    check_thinking_level(arguments["thinking_level"])
    for name in ("stream_fn", "convert_to_llm"):
        value = arguments[name]
        if value is not None and not callable(value):
            msg = f"{name} must be a callable or None, got {_got(value)}."
            raise TypeError(msg)
    AgentLoopConfig(model=model, convert_to_llm=default_convert_to_llm,
                    **{name: arguments[name] for name in _LOOP_OPTIONS})
    tools = check_tools(arguments["tools"], "tools")
    return model, tools, check_messages(arguments["messages"], "messages")


# what other agent libraries call an option, and piagent's way to say it
_ELSEWHERE = {
    "max_turns": "limits=Limits(max_requests=...) (one request per turn)",
    "max_iterations": "limits=Limits(max_requests=...)",
    "max_steps": "limits=Limits(max_requests=...)",
    "max_requests": "limits=Limits(max_requests=...)",
    "max_tool_calls": "limits=Limits(max_tool_calls=...)",
    "max_cost": "limits=Limits(max_cost=...)",
    "budget": "limits=Limits(budget=...)",
    "instructions": "system_prompt=...",
    "system": "system_prompt=...",
    "system_message": "system_prompt=...",
    "timeout": "prompt(..., timeout=...) for a run, timeout_ms=... for a request",
    "result_type": "output_type=...",
    "response_format": "output_type=...",
}


@functools.cache
def _keywords(init: Callable[..., None]) -> tuple[frozenset[str], bool, bool]:
    """The keywords an ``__init__`` takes, and whether it takes ``*args`` / ``**kwargs``
    (read once per class)."""
    parameters = inspect.signature(init).parameters.values()
    kinds = {p.kind for p in parameters}
    named = frozenset(p.name for p in parameters
                      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)) - {"self"}
    return named, inspect.Parameter.VAR_POSITIONAL in kinds, inspect.Parameter.VAR_KEYWORD in kinds


def check_agent_keywords(init: Callable[..., None], args: tuple[Any, ...],
                         keywords: Iterable[str]) -> None:
    """A ``TypeError`` saying piagent's spelling for a keyword ``Agent()`` does not take
    (``max_turns`` is ``limits=Limits(max_requests=...)``), or a near miss of one it does;
    nothing when every keyword is accepted (Python's own error then covers the rest). A
    subclass whose ``__init__`` takes ``*args`` or ``**kwargs`` is left to it."""
    accepted, var_args, var_keywords = _keywords(init)
    if args and not var_args:
        msg = (f"Agent() takes keyword arguments only (Agent(model=..., tools=...)), got "
               f"{len(args)} positional.")
        raise TypeError(msg)
    if var_keywords:
        return
    for name in keywords:
        if name in accepted:
            continue
        hint = _ELSEWHERE.get(name)
        if hint is None:
            import difflib

            close = difflib.get_close_matches(name, sorted(accepted), n=1)
            hint = f"{close[0]}=..." if close else None
        said = f"; use {hint} instead" if hint else " (help(Agent) lists the options)"
        msg = f"Agent() got an unexpected keyword argument {name!r}{said}."
        raise TypeError(msg)


def check_model(model: object, where: str = "model") -> Model | None:
    """``model`` if it is a ``Model`` or ``None``; a ``"PROVIDER/MODEL"`` str is looked up in
    the catalogue (``piagent.providers.resolve_model``)."""
    if model is None or isinstance(model, Model):
        return model
    if isinstance(model, str):
        from ..providers import resolve_model  # the catalogue, read on first use

        try:
            return resolve_model(model)
        except ValueError as exc:
            msg = f"{where}: {exc}"
            raise ValueError(msg) from None
        except LookupError as exc:
            msg = f"{where}: {exc}"
            raise LookupError(msg) from None
    msg = (f"{where} must be a Model (piagent.providers.get_model('openai', 'gpt-4o-mini')), "
           f"a 'PROVIDER/MODEL' str or None, got {_got(model)}.")
    raise TypeError(msg)


def check_thinking_level(level: object, where: str = "thinking_level") -> None:
    """``ValueError`` unless ``level`` is a thinking level."""
    if level not in _LEVELS:
        levels = ", ".join(repr(name) for name in _LEVELS)
        msg = f"{where} must be one of {levels}, got {level!r}."
        raise ValueError(msg)


def check_messages(messages: Iterable[AgentMessage], where: str) -> list[AgentMessage]:
    """``messages`` as a new list if every item is a message (a dataclass with a ``str``
    ``role``), else ``TypeError`` naming the index, the type and the message classes."""
    if isinstance(messages, str | bytes | dict) or not isinstance(messages, Iterable) or (
            dataclasses.is_dataclass(messages) and not isinstance(messages, type)):
        if isinstance(getattr(messages, "role", None), str):
            msg = (f"{where} must be a list of messages, got one {type(messages).__name__}: "
                   f"wrap it in a list, {where}=[message].")
            raise TypeError(msg)
        hint = (f": a first prompt goes to agent.prompt({messages[:40]!r})"
                if isinstance(messages, str) else "")
        msg = f"{where} must be a list of messages, got {_got(messages)}{hint}."
        raise TypeError(msg)
    result = list(messages)
    for index, item in enumerate(result):
        if (dataclasses.is_dataclass(item) and not isinstance(item, type)
                and isinstance(getattr(item, "role", None), str)):
            continue
        if isinstance(item, dict):
            msg = (f"{where}[{index}] is a dict, not a message: build it "
                   f"(UserMessage(content='...'), AssistantMessage(...)) or load pi's JSON "
                   f"with message_from_dict().")
        elif isinstance(item, str):
            msg = (f"{where}[{index}] is the str {item[:40]!r}, not a message: write "
                   f"UserMessage(content={item[:40]!r}).")
        else:
            msg = (f"{where}[{index}] is {_got(item)}, not a message; a transcript holds "
                   f"{_MESSAGE_CLASSES}.")
        raise TypeError(msg)
    return result


def check_timeout(timeout: object, where: str = "timeout") -> float | None:
    """``timeout`` in seconds, ``None`` for no limit (``float('inf')`` too); ``TypeError``
    for anything but a number, ``ValueError`` for a negative number or NaN."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        msg = f"{where} must be a number of seconds or None, got {_got(timeout)}."
        raise TypeError(msg)
    if not timeout >= 0:
        msg = f"{where} must be a number of seconds >= 0 or None, got {timeout!r}."
        raise ValueError(msg)
    return None if math.isinf(timeout) else float(timeout)
