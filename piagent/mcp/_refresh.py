"""``refresh_tools``: a ``prepare_next_turn`` hook that swaps in a server's changed tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..loop import AgentContext, AgentLoopTurnUpdate, AgentTurnContext
from ._server import MCPServer

__all__ = ["refresh_tools"]


def refresh_tools(*servers: MCPServer
                  ) -> Callable[..., AgentLoopTurnUpdate | None]:
    """A ``prepare_next_turn`` hook: the next request sees each server's current tools.

    ``Agent(tools=server.tools(), prepare_next_turn=refresh_tools(server))``. After each
    turn it asks every server whether its tool list changed (a ``list_changed``
    notification, or an expired ``ttlMs``); if one did, the tools that server made are
    replaced by its new list, the others kept in their order. Costs nothing otherwise.
    """
    for server in servers:
        if not isinstance(server, MCPServer):
            msg = f"refresh_tools() takes MCPServer objects, not {type(server).__name__}."
            raise TypeError(msg)

    def prepare_next_turn(ctx: AgentTurnContext, signal: Any = None
                          ) -> AgentLoopTurnUpdate | None:
        changed = [s for s in servers if s.tools_stale()]
        if not changed:
            return None
        tools = [t for t in ctx.context.tools if not any(s.owns(t) for s in changed)]
        for server in changed:
            tools.extend(server.tools())
        return AgentLoopTurnUpdate(context=AgentContext(messages=ctx.context.messages,
                                                        tools=tools))

    return prepare_next_turn
