"""The loop's configuration for one run of an ``Agent``, read from its ``RunSetup`` when the
run starts (the agent's hooks and request options, the queues through the run's takings)."""

from __future__ import annotations

from collections.abc import Callable

from ..abort import AbortSignal
from ..loop import AgentLoopConfig, AgentLoopTurnUpdate, AgentTurnContext
from ..messages import AgentMessage
from ._setup import RunSetup

__all__ = ["loop_config"]


def loop_config(setup: RunSetup) -> AgentLoopConfig:
    """The ``AgentLoopConfig`` of the run ``setup`` describes: every option and hook of its
    agent as it is now."""
    agent, state, queues = setup.options, setup.writer.state, setup.queues
    run = setup.record
    takings = run.takings
    skip = [setup.skip_initial_steering_poll]

    before_poll = agent.before_poll  # a runner reading its store's inbox, or None

    def get_steering_messages() -> list[AgentMessage]:
        if skip[0]:
            skip[0] = False
            return []
        if before_poll is not None:
            before_poll()
        return takings.take(queues.steering)

    def get_follow_up_messages() -> list[AgentMessage]:
        if before_poll is not None:
            before_poll()
        return takings.take(queues.follow_up)

    link = setup.link
    prepare_next_turn: Callable[[AgentTurnContext, AbortSignal], AgentLoopTurnUpdate | None] \
        | None = agent.prepare_next_turn
    next_turn = None
    if prepare_next_turn is not None:
        def next_turn(ctx: AgentTurnContext) -> AgentLoopTurnUpdate | None:
            return prepare_next_turn(ctx, run.signal)

    return AgentLoopConfig(
        model=state.model,
        convert_to_llm=agent.convert_to_llm,
        reasoning=None if state.thinking_level == "off" else state.thinking_level,
        session_id=agent.session_id,
        api_key=agent.api_key,
        max_tokens=agent.max_tokens,
        temperature=agent.temperature,
        max_retry_delay_ms=agent.max_retry_delay_ms,
        on_payload=agent.on_payload,
        on_response=agent.on_response,
        on_provider_stream_event=agent.on_provider_stream_event,
        identity=agent.identity,
        timeout_ms=agent.timeout_ms,
        env=agent.env,
        telemetry=agent.telemetry,
        transform_context=agent.transform_context,
        get_api_key=agent.get_api_key,
        finish_turn=agent.finish_turn,
        prepare_request=agent.prepare_request,
        prepare_next_turn=next_turn,
        get_steering_messages=get_steering_messages,
        get_follow_up_messages=get_follow_up_messages,
        tool_execution=agent.tool_execution,
        max_parallel_tools=agent.max_parallel_tools,
        tool_executor=agent.tool_executor,
        tool_timeout=agent.tool_timeout,
        before_tool_call=agent.before_tool_call,
        after_tool_call=agent.after_tool_call,
        on_tool_execute=link.mark_started() if link is not None else None,
        **setup.approval_options,
    )
