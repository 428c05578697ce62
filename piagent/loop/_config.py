"""The loop's inputs: ``AgentContext``, ``AgentLoopConfig`` and the hook types.

Hooks that take a signal get it as their second argument; ``convert_to_llm``,
``get_api_key`` and the queue getters take none. The loop calls ``prepare_next_turn(ctx)``
(the ``Agent`` adds its signal when it wraps its own attribute).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ..messages import (
    AgentMessage,
    AssistantMessage,
    Message,
    ThinkingLevel,
    ToolCall,
    ToolResultMessage,
    Usage,
)
from ..policy import ApprovalDecision, PendingApproval
from ..stream import StreamOptions

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..events import AgentEvent
    from ..models import Model
    from ..tools import AgentTool, AgentToolResult, ToolExecutionMode

from ._checks import check_loop_config, check_tools
from ._limits import Limits

__all__ = [
    "AfterToolCallContext",
    "AfterToolCallResult",
    "AgentContext",
    "AgentLoopConfig",
    "AgentLoopTurnUpdate",
    "AgentToolCallOutcome",
    "AgentTurnContext",
    "BeforeToolCallContext",
    "BeforeToolCallResult",
    "PrepareNextTurnContext",
    "PrepareRequestContext",
    "RequestUpdate",
    "TurnDecision",
]

TurnDecision: TypeAlias = Literal["continue", "end"]


@dataclass
class AgentContext:
    """A transcript and the tools the runtime can execute (``AgentTool``s with distinct
    names: ``TypeError``/``ValueError`` at construction otherwise)."""

    messages: list[AgentMessage] = field(default_factory=list)
    tools: list[AgentTool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.tools:
            check_tools(self.tools, "AgentContext.tools")


@dataclass
class BeforeToolCallContext:
    """What ``before_tool_call`` sees. ``args`` are validated and may be changed in place.
    ``approval`` is the person's decision when the call waited for one (it is being run
    now; asking for approval again is then ignored)."""

    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    context: AgentContext
    approval: ApprovalDecision | None = None


@dataclass
class BeforeToolCallResult:
    """``block=True`` refuses the call with ``reason``; ``terminate`` then counts for the batch.
    ``needs_approval=True`` makes the call wait for a person's decision (docs/approvals.md)."""

    block: bool = False
    reason: str | None = None
    terminate: bool = False
    needs_approval: bool = False


@dataclass
class AfterToolCallContext:
    """What ``after_tool_call`` sees: the result before any override."""

    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    result: AgentToolResult
    is_error: bool
    context: AgentContext


@dataclass
class AfterToolCallResult:
    """Each field that is not ``None`` replaces the result's field in full."""

    content: list[Any] | None = None
    details: Any = None
    structured_content: Any = None
    usage: Usage | None = None
    is_error: bool | None = None
    terminate: bool | None = None


@dataclass
class AgentTurnContext:
    """A completed turn: its assistant message, tool results, context and the run's messages."""

    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    context: AgentContext
    new_messages: list[AgentMessage]


PrepareNextTurnContext = AgentTurnContext


@dataclass
class AgentLoopTurnUpdate:
    """What ``prepare_next_turn`` may replace before the next request (``None`` keeps)."""

    context: AgentContext | None = None
    messages: list[AgentMessage] | None = None
    """Messages to append before the next request, with their normal events."""
    model: Model | None = None
    thinking_level: ThinkingLevel | None = None


@dataclass
class PrepareRequestContext:
    """What ``prepare_request`` sees just before a provider request. ``emit`` is the run's
    event path (what the loop emits through: tracing, the Agent's state, store and
    listeners), for a hook that reports events of its own, as compaction does."""

    context: AgentContext
    model: Model | None
    thinking_level: ThinkingLevel
    emit: Callable[[AgentEvent], None] | None = None


@dataclass
class RequestUpdate:
    """What ``prepare_request`` may replace; replacements persist for the rest of the run."""

    context: AgentContext | None = None
    model: Model | None = None
    thinking_level: ThinkingLevel | None = None


@dataclass
class AgentToolCallOutcome:
    """The outcome of one tool call: the call, its final result, and whether it failed."""

    tool_call: ToolCall
    result: AgentToolResult
    is_error: bool


@dataclass(kw_only=True)
class AgentLoopConfig(StreamOptions):
    """Everything the loop needs besides the context; also the stream options it sends.

    ``model`` and ``convert_to_llm`` are required. Every field is checked at construction
    (a ``TypeError``/``ValueError`` naming it). Hooks must not raise: the ``Agent``
    turns an exception into a failed run, the low-level ``agent_loop`` into an
    ``AgentLoopError``. Hooks run on the run's worker thread, except ``after_tool_call``,
    which runs on the tool's pool thread right after ``execute``.
    """

    model: Model | None
    convert_to_llm: Callable[[list[AgentMessage]], Sequence[Message]]
    transform_context: Callable[[list[AgentMessage], AbortSignal], list[AgentMessage]] | None = None
    get_api_key: Callable[[str], str | None] | None = None
    finish_turn: Callable[[AgentTurnContext, AbortSignal], TurnDecision | None] | None = None
    prepare_request: Callable[[PrepareRequestContext, AbortSignal], RequestUpdate | None] | None = None
    prepare_next_turn: Callable[[AgentTurnContext], AgentLoopTurnUpdate | None] | None = None
    get_steering_messages: Callable[[], Sequence[AgentMessage]] | None = None
    get_follow_up_messages: Callable[[], Sequence[AgentMessage]] | None = None
    tool_execution: ToolExecutionMode = "parallel"
    max_parallel_tools: int | None = None
    """How many tools may execute at once in a parallel batch; ``None``: no cap."""
    before_tool_call: Callable[[BeforeToolCallContext, AbortSignal],
                               BeforeToolCallResult | None] | None = None
    after_tool_call: Callable[[AfterToolCallContext, AbortSignal],
                              AfterToolCallResult | None] | None = None
    tool_timeout: float | None = None
    """Seconds a tool call may run when its tool sets no ``timeout``; ``None``: no limit.
    Past it the call gets an error result and its signal is aborted; its thread is left to
    finish on its own (docs/tools.md, "Timeouts")."""
    on_tool_execute: Callable[[ToolCall], None] | None = None
    """Called on the tool's pool thread just before a batch call's ``execute`` (never for a
    call that does not run: blocked, invalid, aborted, or waiting for a pool slot). The
    ``Agent`` marks the call started in its session store here (docs/sessions.md). If it
    raises, that call does not run (its result says why) and the run fails as it does when
    a listener raises. ``run_tool_call`` does not call it."""
    on_approval_wait: Callable[[list[PendingApproval], list[ToolResultMessage]], None] | None = None
    """Called when a batch stops with calls waiting for approval, before their
    ``tool_approval_request`` events: the waiting calls and the results held back (source
    order). The ``Agent`` keeps them in its store here; if it raises, the run fails."""
    approvals: Mapping[str, ApprovalDecision] | None = None
    """Decisions for the calls of the batch ``run_agent_loop_resume`` completes, by
    ``call_key`` (``PendingApproval.call_key``; by tool-call id for a call without one)."""
    held_results: Sequence[ToolResultMessage] = ()
    """Results of that batch produced before it waited (they are not run again); each
    carries its call's key in ``extra["piagentCallKey"]`` (one without is matched to the
    next call of its id that has no decision)."""
    tool_executor: Executor | None = None
    """Where tools run. ``None`` (the default): a pool made for the run at its first tool
    batch and shut down when the run ends, so a run leaves no thread. A caller-owned
    ``concurrent.futures.Executor`` is reused by every run and never shut down by the
    loop (docs/threading.md); ``max_parallel_tools`` still caps one batch."""

    limits: Limits | None = None
    """What the run may spend (requests, tool calls, tokens, cost, time; a shared
    ``Budget``): at a limit the run makes no further request and ends with an error message
    naming it (docs/limits.md). The ``Agent`` takes ``limits=`` itself."""
    output_type: Any = None
    """A typed final result: a dataclass, TypedDict, Enum, Literal, ``list[X]``, a JSON Schema
    dict or an ``OutputSchema``; the model gets a ``final_result`` tool (docs/output.md)."""

    def __post_init__(self) -> None:
        super().__post_init__()  # the stream options' checks
        _check_tool_executor(self.tool_executor)
        if self.limits is not None and not isinstance(self.limits, Limits):
            msg = f"limits must be a piagent.Limits or None, not {type(self.limits).__name__}."
            raise TypeError(msg)
        check_loop_config(self)


def _check_tool_executor(executor: object) -> None:
    """``TypeError`` unless ``executor`` is ``None`` or a ``concurrent.futures.Executor``."""
    if executor is not None and not isinstance(executor, Executor):
        msg = (f"tool_executor must be a concurrent.futures.Executor (a ThreadPoolExecutor, "
               f"say) or None, not {type(executor).__name__}.")
        raise TypeError(msg)
