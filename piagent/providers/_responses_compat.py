"""What a Responses model's catalogue flags change in its request (pi-ai 1.6.1).

- ``supportsAdditionalTools`` with ``supportsMidConvoSystemMessages``: the tools travel in
  ``additional_tools`` developer items of ``input``, one before each system message that adds
  tools (no top-level ``tools``); a later item is preceded by an "incremental tools update"
  notice, and removed tools are announced in the system message's text.
- ``supportsMidConvoEffort``: the thinking level goes in ``configuration_update`` items (one
  at the end of the input, one before each replayed answer of the same model that was given
  one) while ``reasoning.effort`` stays ``medium``; the answer records its level
  (``AssistantMessage.provider_thinking_level``).
- A reasoning model with thinking off gets ``reasoning: {effort: <its thinkingLevelMap off
  value, else "none">}`` (none for an ``"off": null`` model or GitHub Copilot); xAI's
  models always get the encrypted reasoning ``include``.

Called once per request; a model without the flags costs a few dict lookups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..messages import SystemMessage, ToolDeclaration
from ..models import Model
from ..stream import StreamOptions
from ._strict import strict_sampling

__all__ = ["ToolChanges", "add_reasoning", "configuration_update_effort", "tool_changes",
           "wire_tools"]

_INCREMENTAL = ("This is an incremental tools update. Previously declared tools remain "
                "available unless explicitly marked unavailable. A tool declared again here "
                "is available again, and its latest definition replaces the earlier one.")
_UPDATE_EFFORT = "medium"  # reasoning.effort while configuration_update items carry the level


def wire_tools(model: Model, tools: list[ToolDeclaration]) -> list[dict[str, Any]]:
    """Responses ``function`` tools; ``strict`` only where the model's compat says the
    server knows it (pi: the catalogue's OpenAI models)."""
    supports = bool((model.compat or {}).get("supportsStrictMode", False))
    out = []
    for tool in tools:
        schema = (strict_sampling(tool, supports)
                  if tool.constrained_sampling is not None else None)
        wire: dict[str, Any] = {"type": "function", "name": tool.name,
                                "description": tool.description,
                                "parameters": schema or tool.parameters or {"type": "object"}}
        if supports:
            wire["strict"] = schema is not None
        out.append(wire)
    return out


def tool_changes(model: Model) -> ToolChanges | None:
    """A ``ToolChanges`` for a model whose tools go in ``additional_tools`` items."""
    compat = model.compat
    if compat and compat.get("supportsAdditionalTools") \
            and compat.get("supportsMidConvoSystemMessages"):
        return ToolChanges(model)
    return None


class ToolChanges:
    """The ``additional_tools`` items of one request, system message by system message.

    Thread safety: one per request, used by the thread building it.
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.declared = False
        self.unavailable: dict[str, None] = {}  # removed and not declared since, in order

    def before(self, message: SystemMessage, role: str, items: list[dict[str, Any]]) -> None:
        """The items that go before the system message: the tools it adds."""
        added = message.tools_added or []
        for tool in added:
            self.unavailable.pop(tool.name, None)
        if not added:
            return
        if self.declared:
            notice = _INCREMENTAL
            if self.unavailable:
                notice += f"\nStill unavailable: {', '.join(self.unavailable)}."
            items.append({"role": role, "content": notice})
        self.declared = True
        items.append({"type": "additional_tools", "role": "developer",
                      "tools": wire_tools(self.model, list(added))})

    def removal(self, message: SystemMessage) -> str:
        """The text announcing the tools the message removes ("" for none); a tool it
        removes and adds again is redefined, not removed."""
        added = {tool.name for tool in message.tools_added or []}
        removed = [name for name in message.tools_removed or [] if name not in added]
        for name in removed:
            self.unavailable[name] = None
        if not removed:
            return ""
        return ("The following tools are no longer available. Do not call them:\n"
                + "\n".join(f"- {name}" for name in removed))


def configuration_update_effort(model: Model, options: StreamOptions) -> str | None:
    """The effort ``configuration_update`` items carry (``supportsMidConvoEffort`` with
    thinking on), else None."""
    compat = model.compat
    level = options.reasoning
    if not compat or not compat.get("supportsMidConvoEffort") or not level or level == "off":
        return None
    if model.provider == "openai" and model.base_url == "https://api.openai.com/v1" \
            and options.api_key and not options.api_key.startswith("sk-"):
        return None  # Sign in with ChatGPT refuses configuration_update items
    mapped = (model.thinking_level_map or {}).get(level)
    return mapped if mapped is not None else level


def add_reasoning(body: dict[str, Any], model: Model, options: StreamOptions,
                  update_effort: str | None,
                  effort_of: Callable[[str], str]) -> None:
    """``reasoning`` and ``include`` of a reasoning model (``effort_of``: the wire effort of
    a thinking level)."""
    if not model.reasoning:
        return
    level = options.reasoning
    if level and level != "off":
        effort = effort_of(level) if update_effort is None else _UPDATE_EFFORT
        body["reasoning"] = {"effort": effort, "summary": "auto"}
        body["include"] = ["reasoning.encrypted_content"]
    elif model.provider != "github-copilot":
        levels = model.thinking_level_map
        off = levels.get("off", "none") if levels is not None else "none"
        if off is not None:
            body["reasoning"] = {"effort": off}
    if model.provider == "xai":
        body["include"] = ["reasoning.encrypted_content"]
