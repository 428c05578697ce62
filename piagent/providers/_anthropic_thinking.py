"""Anthropic's thinking parameters, as pi-ai 1.4.0 sends them: adaptive thinking with an
effort for Claude 4.6 and later, else a token budget on top of the answer's tokens."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..messages import AgentMessage
from ..models import Model
from ..stream import StreamOptions
from ._budget import clamp_max_tokens

__all__ = ["thinking_config"]

_DEFAULT_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
_MIN_BUDGET = 1024  # the API's minimum budget_tokens, also kept free for the answer
_ADAPTIVE_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high",
                    "xhigh": "max", "max": "max"}
_CLAUDE_VERSION = re.compile(r"(opus|sonnet|haiku)-(\d+)(?:[-.](\d+))?(?!\d)")


def _is_adaptive(model: Model) -> bool:
    """Claude 4.6 and later think adaptively (``effort``) instead of with a token budget;
    ``compat`` says so explicitly with ``adaptiveThinking`` or pi-ai 1.6's catalogue flag
    ``forceAdaptiveThinking``."""
    compat = model.compat or {}
    for key in ("adaptiveThinking", "forceAdaptiveThinking"):
        if key in compat:
            return bool(compat[key])
    found = _CLAUDE_VERSION.search(model.id)
    if found is None or found.group(1) == "haiku":
        return False
    version = (int(found.group(2)), int(found.group(3) or 0))
    # dated ids like claude-sonnet-4-20250514 have no minor version
    if found.group(3) is not None and len(found.group(3)) > 2:
        version = (version[0], 0)
    return version >= (4, 6)


def thinking_config(model: Model, options: StreamOptions, max_tokens: int,
                    messages: Sequence[AgentMessage]) -> tuple[dict[str, Any], int] | None:
    """The thinking fields and the request's ``max_tokens``, or ``None`` without thinking
    (thinking off, not a reasoning model, or no room for the smallest budget)."""
    level = options.reasoning
    if not model.reasoning or not level or level == "off":
        return None
    if _is_adaptive(model):
        mapped = (model.thinking_level_map or {}).get(level)
        effort = mapped if isinstance(mapped, str) else _ADAPTIVE_EFFORT.get(level, "high")
        if effort == "max" and "opus" not in model.id and not isinstance(mapped, str):
            effort = "high"
        return ({"thinking": {"type": "adaptive", "display": "summarized"},
                 "output_config": {"effort": effort}}, max_tokens)
    budgets = {**_DEFAULT_BUDGETS, **(options.thinking_budgets or {})}
    budget = budgets.get(level, budgets["high"])
    # pi's adjustMaxTokensForThinking: the budget comes on top of the answer's tokens, within
    # the model's output limit, and leaves at least _MIN_BUDGET tokens for the answer
    total = min(max_tokens + budget, max(model.max_tokens, max_tokens))
    if total <= budget:
        budget = total - _MIN_BUDGET
    if budget < _MIN_BUDGET:  # too little room to think: answer without thinking
        return None
    # pi clamps the total to the context again, and the budget to leave _MIN_BUDGET
    total = clamp_max_tokens(model, messages, total)
    budget = min(budget, max(0, total - _MIN_BUDGET))
    return {"thinking": {"type": "enabled", "budget_tokens": budget, "display": "summarized"}}, total
