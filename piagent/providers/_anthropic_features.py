"""What an Anthropic model's catalogue flags add to its request (pi-ai 1.6.1).

- ``supportsMidConvoEffort`` (managed effort): adaptive thinking with
  ``block_binding: {prefix_mismatch_behavior: "drop_block"}`` and a fixed top-level effort
  ``low`` (organisations may cap the effort; the top level is part of the cached prompt),
  while effort markers (``{"role": "system", "content": [], "output_config": {"effort": …}}``)
  set the level: one at the end, one before each replayed answer of the same provider that
  recorded its level (``AssistantMessage.provider_thinking_level``). With thinking off a
  model that can stop thinking gets ``thinking: disabled`` and no markers.
- ``supportsMidConvoSystemMessages`` with ``supportsMidConvoToolChanges`` and tools in the
  leading system message (native tool changes): the tool list stays the leading tools plus a
  deferred placeholder; a later system message adds and removes tools with ``tool_addition``
  / ``tool_removal`` blocks, so the cached prefix survives every tool change.
- ``allowedFallbackModels``: server-side ``fallbacks``; an answer a fallback model gave is
  priced at that model's cost (``fallback_pricing``).
- Their betas.

Per request a model without the flags costs a few dict lookups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..messages import AgentMessage, SystemMessage
from ..models import Model, ModelCost

__all__ = ["PLACEHOLDER", "fallback_pricing", "feature_betas", "insert_effort_markers",
           "managed_effort", "native_tool_changes", "set_fallbacks"]

PLACEHOLDER = {  # never activated, the model cannot see it (pi-ai's, byte for byte)
    "name": "__pi_deferred_placeholder__",
    "description": "Reserved placeholder. Never available. Never call this.",
    "input_schema": {"type": "object", "properties": {}, "required": []},
    "defer_loading": True,
}
EFFORTS = frozenset(("low", "medium", "high", "xhigh", "max"))
BINDING = {"prefix_mismatch_behavior": "drop_block"}


def managed_effort(model: Model) -> bool:
    return bool((model.compat or {}).get("supportsMidConvoEffort"))


def native_tool_changes(model: Model, messages: Sequence[AgentMessage]) -> bool:
    compat = model.compat
    if not compat or not compat.get("supportsMidConvoToolChanges") \
            or not compat.get("supportsMidConvoSystemMessages") or not messages:
        return False
    first = messages[0]
    return isinstance(first, SystemMessage) and bool(first.tools_added)


def set_fallbacks(body: dict[str, Any], model: Model) -> None:
    allowed = (model.compat or {}).get("allowedFallbackModels")
    if allowed:
        body["fallbacks"] = [{"model": fallback["model"]} for fallback in allowed]


def fallback_pricing(model: Model, answered_by: str) -> Model | None:
    """``model`` with the cost of the allowed fallback model that answered (the response's
    ``model``), or None when the model itself (or an unlisted one) answered."""
    if answered_by == model.id or not model.compat:
        return None
    for fallback in model.compat.get("allowedFallbackModels") or ():
        if fallback.get("provider") == model.provider and fallback.get("model") == answered_by:
            cost = fallback.get("cost")
            if not cost:
                return None
            return replace(model, id=answered_by, cost=ModelCost(
                input=float(cost.get("input", 0)), output=float(cost.get("output", 0)),
                cache_read=float(cost.get("cacheRead", 0)),
                cache_write=float(cost.get("cacheWrite", 0))))
    return None


def insert_effort_markers(out: list[dict[str, Any]], levels: dict[int, str],
                          active: str) -> list[dict[str, Any]]:
    """``out`` with a marker before each answer in ``levels`` (its index → its level) and
    the active level's at the end (a new list: ``out`` may be shared)."""
    marked: list[dict[str, Any]] = []
    for index, message in enumerate(out):
        level = levels.get(index)
        if level is not None:
            marked.append(_marker(level))
        marked.append(message)
    marked.append(_marker(active))
    return marked


def _marker(effort: str) -> dict[str, Any]:
    return {"role": "system", "content": [], "output_config": {"effort": effort}}


def feature_betas(model: Model, body: dict[str, Any]) -> list[str]:
    """The betas of the features above that the request uses."""
    compat = model.compat
    if not compat:
        return []
    betas = []
    if compat.get("allowedFallbackModels"):
        betas.append("server-side-fallback-2026-07-01")
    if compat.get("supportsMidConvoEffort") is True:
        betas += ["mid-conversation-output-config-2026-07-01",
                  "thinking-binding-controls-2026-08-01"]
    tools = body.get("tools")
    if tools and tools[-1] is PLACEHOLDER:
        betas.append("inline-tools-2026-09-15")
    return betas
