"""``RunGuard``: one run's limits and typed output, applied through the loop's public hooks.

Nothing here is a new control path in the loop. The guard wraps:

- the stream function: before each request it accounts the previous response, charges a
  shared budget, and checks every limit; at a limit it answers, without asking the model,
  with an error message naming the limit and the figures, so the loop ends the run as it
  ends any failed response;
- ``before_tool_call``: a call beyond ``max_tool_calls`` is refused before it runs;
- ``finish_turn``: it accounts the turn, charges the budget, takes a valid final result
  (and ends the run with it), counts an invalid one, and asks for one more turn when the
  model answered in text instead of calling the final-result tool;
- ``prepare_next_turn``: that extra turn carries a user message asking for the tool.

Owned by the run's worker thread (every hook above runs there), except ``close``, which
the Agent calls on that thread too once the loop has returned.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from ..abort import AbortSignal
from ..messages import AssistantMessage, TextContent, UserMessage
from ..models import Model, calculate_cost
from ..policy import Budget
from ..stream import AssistantMessageEventStream, Context, ErrorEvent, StreamFn, StreamOptions
from ..tools import AgentTool, OutputSchema
from ._config import (
    AgentLoopConfig,
    AgentLoopTurnUpdate,
    AgentTurnContext,
    BeforeToolCallContext,
    BeforeToolCallResult,
    TurnDecision,
)
from ._limits import LimitHit, Limits, input_tokens, total_tokens

__all__ = ["RunGuard", "make_guard"]

_NO_LIMITS = Limits()


class RunGuard:
    """One run's counters, its limit hit and its final result (see the module docstring)."""

    def __init__(self, limits: Limits | None, output: OutputSchema[Any] | None) -> None:
        self.limits = limits if limits is not None else _NO_LIMITS
        self.output = output
        self.started = time.monotonic()
        self.requests = 0
        self.tool_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.total_tokens = 0
        self.cost = 0.0
        self.hit: LimitHit | None = None
        self.value: Any = None
        self.has_value = False
        self.failures = 0  # invalid final results (or text answers) so far
        self._last_failure = ""
        self._nudge = False  # the next turn carries a request for the final-result tool
        self._refused_calls = 0  # tool calls refused by max_tool_calls
        self._pending: list[tuple[Model | None, AssistantMessageEventStream]] = []
        self._uncharged_cost = 0.0
        self._uncharged_tokens = 0

    # --- wiring ------------------------------------------------------------------------

    def tools(self, tools: Sequence[AgentTool]) -> list[AgentTool]:
        """The run's tools: ``tools`` and, with an output type, the final-result tool."""
        if self.output is None:
            return list(tools)
        clash = [t.name for t in tools if t.name == self.output.name]
        if clash:
            msg = (f"output_type: the agent already has a tool named {self.output.name!r}; "
                   f"name the final-result tool differently (OutputSchema(T, name=...)).")
            raise ValueError(msg)
        return [*tools, self.output.tool()]

    def config(self, config: AgentLoopConfig) -> AgentLoopConfig:
        """``config`` with the guard's hooks around the caller's."""
        user_before, user_finish = config.before_tool_call, config.finish_turn
        user_next = config.prepare_next_turn

        def before_tool_call(ctx: BeforeToolCallContext,
                             signal: AbortSignal) -> BeforeToolCallResult | None:
            return self._before_tool_call(ctx, signal, user_before)

        def finish_turn(turn: AgentTurnContext, signal: AbortSignal) -> TurnDecision | None:
            user = user_finish(turn, signal) if user_finish is not None else None
            return self._finish_turn(turn, user)

        def prepare_next_turn(ctx: AgentTurnContext) -> AgentLoopTurnUpdate | None:
            update = user_next(ctx) if user_next is not None else None
            return self._next_turn(update)

        limit_calls = self.limits.max_tool_calls is not None
        return dataclasses.replace(
            config, finish_turn=finish_turn,
            before_tool_call=before_tool_call if limit_calls else user_before,
            prepare_next_turn=prepare_next_turn if self.output is not None else user_next)

    def stream_fn(self, inner: StreamFn) -> StreamFn:
        """``inner`` behind the limit check."""
        def guarded(model: Model | None, context: Context,
                    options: StreamOptions) -> AssistantMessageEventStream:
            self._account()
            hit = self._check()
            if hit is not None:
                self.hit = hit
                return _refused(model, hit.message)
            self.requests += 1
            stream = inner(model, context, options)
            self._pending.append((model, stream))
            return stream
        return guarded

    def close(self) -> None:
        """The run is over: account and charge what its last response spent."""
        self._account()
        self._charge()

    # --- the hooks ---------------------------------------------------------------------

    def _before_tool_call(self, ctx: BeforeToolCallContext, signal: AbortSignal,
                          user: Any) -> BeforeToolCallResult | None:
        limit = self.limits.max_tool_calls
        counted = self.output is None or ctx.tool_call.name != self.output.name
        if counted and limit is not None and self.tool_calls >= limit:
            self._refused_calls += 1
            return BeforeToolCallResult(block=True, reason=(
                f"Tool call refused: the run reached its tool call limit "
                f"(max_tool_calls={limit})."))
        result: BeforeToolCallResult | None = user(ctx, signal) if user is not None else None
        if counted and not (result is not None and result.block):
            self.tool_calls += 1
        return result

    def _finish_turn(self, turn: AgentTurnContext, user: TurnDecision | None
                     ) -> TurnDecision | None:
        self._account()
        self._charge()
        output = self.output
        if output is None or turn.message.stop_reason in ("error", "aborted"):
            return user
        answered = False
        for result in turn.tool_results:
            if result.tool_name != output.name:
                continue
            answered = True
            if result.is_error:
                self.failures += 1
                self._last_failure = result.text
            elif not self.has_value:
                self.value, self.has_value = output.parse(result.details), True
        if self.has_value:
            return "end"  # even when other tools of the batch asked for more
        if not answered and not turn.tool_results and user != "end":
            # the model answered in text: one more turn, asking for the tool
            self.failures += 1
            self._last_failure = f"the model answered in text instead of calling {output.name}"
            self._nudge = True
            return "continue"
        return user

    def _next_turn(self, update: AgentLoopTurnUpdate | None) -> AgentLoopTurnUpdate | None:
        if not self._nudge or self.output is None:
            return update
        self._nudge = False
        ask = UserMessage(content=[TextContent(
            f"Give your final answer by calling the {self.output.name} tool.")])
        if update is None:
            return AgentLoopTurnUpdate(messages=[ask])
        return dataclasses.replace(update, messages=[*(update.messages or ()), ask])

    # --- accounting --------------------------------------------------------------------

    def _account(self) -> None:
        """Add the usage of every finished response not yet counted."""
        if not self._pending:
            return
        waiting = []
        for model, stream in self._pending:
            if not stream.has_result():
                waiting.append((model, stream))
                continue
            usage = stream.result(0).usage
            cost = usage.cost.total
            if not cost and model is not None and model.cost.input + model.cost.output:
                cost = calculate_cost(model, copy.deepcopy(usage)).total
            spent_in, total = input_tokens(usage), total_tokens(usage)
            self.input_tokens += spent_in
            self.output_tokens += usage.output
            self.total_tokens += total
            self.cost += cost
            self._uncharged_cost += cost
            self._uncharged_tokens += total
        self._pending = waiting

    def _charge(self, requests: int = 0) -> Any:
        budget = self.limits.budget
        if budget is None or not (self._uncharged_cost or self._uncharged_tokens or requests):
            return None
        spent = budget.store.charge_budget(budget.key, cost=self._uncharged_cost,
                                           tokens=self._uncharged_tokens, requests=requests)
        self._uncharged_cost, self._uncharged_tokens = 0.0, 0
        return spent

    def _check(self) -> LimitHit | None:
        """The first limit reached, or ``None``: the request may go."""
        lim = self.limits
        if self.output is not None and self.failures > lim.output_retries:
            return LimitHit("output_retries", lim.output_retries, self.failures, (
                f"The model gave no valid final result: {self.failures} attempts failed "
                f"(output_retries={lim.output_retries}). The last error: "
                f"{self._last_failure}"))
        figures: tuple[tuple[str, float | None, float, str], ...] = (
            ("max_requests", lim.max_requests, self.requests, "requests made"),
            ("max_input_tokens", lim.max_input_tokens, self.input_tokens, "input tokens used"),
            ("max_output_tokens", lim.max_output_tokens, self.output_tokens,
             "output tokens used"),
            ("max_total_tokens", lim.max_total_tokens, self.total_tokens, "tokens used"),
            ("max_cost", lim.max_cost, self.cost, "USD spent"),
        )
        for name, limit, used, what in figures:
            if limit is not None and used >= limit:
                return LimitHit(name, limit, used, (
                    f"The run reached its limit {name}={limit:g}: {used:.6g} {what}."))
        if lim.max_tool_calls is not None and self._refused_calls:
            return LimitHit("max_tool_calls", lim.max_tool_calls, self.tool_calls, (
                f"The run reached its limit max_tool_calls={lim.max_tool_calls}: "
                f"{self.tool_calls} tool calls made, {self._refused_calls} refused."))
        if lim.max_seconds is not None:
            elapsed = time.monotonic() - self.started
            if elapsed >= lim.max_seconds:
                return LimitHit("max_seconds", lim.max_seconds, elapsed, (
                    f"The run reached its limit max_seconds={lim.max_seconds:g}: "
                    f"{elapsed:.3g} s elapsed."))
        return self._check_budget(lim.budget) if lim.budget is not None else None

    def _check_budget(self, budget: Budget) -> LimitHit | None:
        spent = self._charge(requests=1)  # this request counts, unless refused below
        checks = (("budget.max_cost", budget.max_cost, spent.cost, "USD"),
                  ("budget.max_tokens", budget.max_tokens, spent.tokens, "tokens"),
                  ("budget.max_requests", budget.max_requests, spent.requests - 1, "requests"))
        for name, limit, used, what in checks:
            if limit is not None and used >= limit:
                budget.store.charge_budget(budget.key, requests=-1)
                return LimitHit(name, limit, used, (
                    f"The budget {budget.key!r} is spent: {used:.6g} of {limit:g} {what} "
                    f"({name}), by every run that shares it."))
        return None


def make_guard(limits: object, output: object) -> RunGuard | None:
    """A run's limits and typed output (``None``: neither, the loop runs as it is);
    ``TypeError`` for a ``limits`` that is not a ``Limits``."""
    if limits is not None and not isinstance(limits, Limits):
        msg = f"limits must be a piagent.Limits or None, not {type(limits).__name__}."
        raise TypeError(msg)
    if limits is None and output is None:
        return None
    schema = output if isinstance(output, OutputSchema) or output is None \
        else OutputSchema(output)
    return RunGuard(limits, schema)


def _refused(model: Model | None, text: str) -> AssistantMessageEventStream:
    """A response that never asked the model: an error message saying why."""
    message = AssistantMessage(content=[], api=model.api if model else "",
                               provider=model.provider if model else "",
                               model=model.id if model else "", stop_reason="error",
                               error_message=text)
    stream = AssistantMessageEventStream()
    stream.push(ErrorEvent("error", message))
    return stream
