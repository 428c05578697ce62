"""The low-level agent loop: the seed's ``runLoop``, its tool execution and its inputs.

``run_agent_loop`` / ``run_agent_loop_continue`` block on the calling thread and call
``emit`` for every event (a barrier); ``agent_loop`` / ``agent_loop_continue`` run the same
loop on a new worker thread and return an ``EventStream``. ``run_tool_call`` runs one call
through the prepare → execute → finalize path. ``AgentLoopConfig`` and the hook types are
the loop's inputs; ``set_tracing`` installs a tracer (``piagent.otel``). The loop knows no
provider: it calls whatever stream function it is given.
"""

from __future__ import annotations

from ..policy import ApprovalDecision, Budget, BudgetStore, PendingApproval
from ._checks import check_tools
from ._config import (
    AfterToolCallContext,
    AfterToolCallResult,
    AgentContext,
    AgentLoopConfig,
    AgentLoopTurnUpdate,
    AgentToolCallOutcome,
    AgentTurnContext,
    BeforeToolCallContext,
    BeforeToolCallResult,
    PrepareNextTurnContext,
    PrepareRequestContext,
    RequestUpdate,
    TurnDecision,
)
from ._guard import RunGuard, make_guard
from ._limits import LimitHit, Limits
from ._loop import run_agent_loop, run_agent_loop_continue
from ._nested import run_tool_call
from ._resume import (
    call_start_mark,
    open_calls,
    run_agent_loop_resume,
    unanswered_tool_calls,
)
from ._threaded import agent_loop, agent_loop_continue
from ._trace import RunTrace, Tracing, get_tracing, set_tracing

__all__ = [
    "AfterToolCallContext",
    "AfterToolCallResult",
    "AgentContext",
    "AgentLoopConfig",
    "AgentLoopTurnUpdate",
    "AgentToolCallOutcome",
    "AgentTurnContext",
    "ApprovalDecision",
    "BeforeToolCallContext",
    "BeforeToolCallResult",
    "Budget",
    "BudgetStore",
    "LimitHit",
    "Limits",
    "PendingApproval",
    "PrepareNextTurnContext",
    "PrepareRequestContext",
    "RequestUpdate",
    "RunGuard",
    "RunTrace",
    "Tracing",
    "TurnDecision",
    "agent_loop",
    "agent_loop_continue",
    "call_start_mark",
    "check_tools",
    "get_tracing",
    "make_guard",
    "open_calls",
    "run_agent_loop",
    "run_agent_loop_continue",
    "run_agent_loop_resume",
    "run_tool_call",
    "set_tracing",
    "unanswered_tool_calls",
]
