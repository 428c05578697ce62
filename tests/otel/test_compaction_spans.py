"""A compaction inside a run is a ``compaction {reason}`` span under the run's
``invoke_agent`` span, with the estimated tokens before and after and the summary's usage."""

from __future__ import annotations

import dataclasses

from piagent import Agent, AssistantMessage, Context, StreamOptions, Usage, UserMessage
from piagent.compaction import Compaction
from piagent.testing import ScriptedStreamFn, assistant_error, assistant_text

from .conftest import Spans


def answer(context: Context, options: StreamOptions) -> AssistantMessage:
    last = context.messages[-1]
    if isinstance(last, UserMessage) and last.text.startswith("<conversation>"):
        reply = assistant_text("## Goal\nTalk.")
        reply.usage = Usage(input=300, output=20, total_tokens=320)
        return reply
    return assistant_text("reply " + "z" * 2000)


def test_a_threshold_compaction_is_a_span_under_the_run(spans: Spans) -> None:
    fn = ScriptedStreamFn([answer] * 40)
    agent = Agent(model=dataclasses.replace(fn.model, context_window=6_000), stream_fn=fn,
                  compaction=Compaction(reserve_tokens=2_000, keep_recent_tokens=1_000))
    for n in range(6):
        agent.prompt(f"question {n} " + "q" * 2000)
    compactions = spans.named("compaction threshold")
    assert compactions
    span = compactions[0]
    attributes = span.attributes or {}
    assert attributes["gen_ai.operation.name"] == "compaction"
    assert attributes["piagent.compaction.tokens_before"] > attributes[
        "piagent.compaction.tokens_after"] > 0
    assert attributes["gen_ai.usage.output_tokens"] in (20, 40)  # one or two summary requests
    runs = spans.named("invoke_agent support")
    assert span.parent is not None and span.parent.span_id in {
        r.context.span_id for r in runs if r.context is not None}


def test_a_failed_compaction_span_says_why(spans: Spans) -> None:
    def failing(context: Context, options: StreamOptions) -> AssistantMessage:
        last = context.messages[-1]
        if isinstance(last, UserMessage) and last.text.startswith("<conversation>"):
            return assistant_error("no summaries today")
        return assistant_text("reply " + "z" * 2000)

    fn = ScriptedStreamFn([failing] * 40)
    agent = Agent(model=dataclasses.replace(fn.model, context_window=6_000), stream_fn=fn,
                  compaction=Compaction(reserve_tokens=2_000, keep_recent_tokens=1_000))
    for n in range(6):
        agent.prompt(f"question {n} " + "q" * 2000)
    span = spans.named("compaction threshold")[0]
    assert not span.status.is_ok
    assert "no summaries today" in (span.status.description or "")
