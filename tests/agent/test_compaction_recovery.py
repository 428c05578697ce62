"""pi's recoveries after a response (docs/compaction.md, "When it happens"): a silent
overflow compacted after its turn without a retry, a response cut at its output limit
compacted and asked again once (and pi's texts when once was not enough), and the summary
requests sent again after a transient failure, bounded and abortable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from piagent import (
    Agent,
    AssistantMessage,
    CompactionSummaryMessage,
    Context,
    StreamOptions,
    ToolResultMessage,
    Usage,
    UserMessage,
    tool,
)
from piagent.compaction import Compaction, CompactionError
from piagent.messages import COMPACTION_SUMMARY_PREFIX
from piagent.sessions import MemoryStore
from piagent.testing import ScriptedStreamFn, assistant_error, assistant_text, assistant_tool_calls

WINDOW = 10_000
LENGTH_FAILED = "Truncated response recovery failed after one compact-and-retry attempt."


def _last_text(context: Context) -> str:
    last = context.messages[-1]
    return last.text if isinstance(last, UserMessage) else ""


def _framed(context: Context) -> bool:
    return any(COMPACTION_SUMMARY_PREFIX in m.text for m in context.messages
               if isinstance(m, UserMessage))


def reply(text: str, *, stop: Any = "stop", input_tokens: int = 100,
          output: int = 20) -> AssistantMessage:
    message = assistant_text(text, stop_reason=stop)
    message.usage = Usage(input=input_tokens, output=output,
                          total_tokens=input_tokens + output)
    return message


class Model:
    """A scripted model: ``summary(n)`` for the n-th summary request (from 0), otherwise
    ``answer(context)``; the requests of each kind are kept."""

    def __init__(self, answer: Callable[[Context], AssistantMessage],
                 summary: Callable[[int], AssistantMessage] | None = None) -> None:
        self.answer = answer
        self.summary = summary or (lambda n: reply("## Goal\nKeep going."))
        self.requests: list[Context] = []
        self.summaries: list[Context] = []
        self.fn = ScriptedStreamFn([self.respond] * 1_000, keep_calls=None)
        self.model = dataclasses.replace(self.fn.model, context_window=WINDOW)

    def respond(self, context: Context, options: StreamOptions) -> AssistantMessage:
        if _last_text(context).startswith("<conversation>"):
            self.summaries.append(context)
            return self.summary(len(self.summaries) - 1)
        self.requests.append(context)
        return self.answer(context)


def agent_with_history(model: Model, **options: Any) -> tuple[Agent, list[Any], MemoryStore]:
    store = MemoryStore()
    agent = Agent(model=model.model, stream_fn=model.fn, store=store, session_id="s",
                  compaction=Compaction(reserve_tokens=1_000, keep_recent_tokens=50), **options)
    for n in range(4):
        agent.prompt(f"question {n} " + "x" * 400)
    seen: list[Any] = []
    agent.subscribe(lambda event, signal: seen.append(event)
                    if event.type.startswith("compaction") else None)
    return agent, seen, store


def test_a_silent_overflow_is_compacted_after_its_turn_without_a_retry() -> None:
    # a "stop" whose input + cache reads exceed the window (pi-ai's isContextOverflow case 2)
    def answer(context: Context) -> AssistantMessage:
        if _last_text(context) == "the big one":
            message = reply("a complete answer", input_tokens=WINDOW - 500)
            message.usage.cache_read = 600
            return message
        return reply("fine")

    model = Model(answer)
    agent, seen, store = agent_with_history(model)
    run = agent.prompt("the big one")
    assert run.error_message is None and run.text == "a complete answer"
    assert sum(_last_text(c) == "the big one" for c in model.requests) == 1  # not sent again
    assert [(e.type, e.reason) for e in seen] == [("compaction_start", "overflow"),
                                                 ("compaction_end", "overflow")]
    assert seen[1].summary is not None and not seen[1].will_retry
    messages = agent.state.messages
    assert isinstance(messages[-1], CompactionSummaryMessage)  # after the kept response
    assert isinstance(messages[-2], AssistantMessage) and messages[-2].text == "a complete answer"
    assert store.load("s") == messages
    agent.prompt("after")
    assert _framed(model.requests[-1]) and _last_text(model.requests[-1]) == "after"


def test_a_length_stop_with_no_output_in_a_full_window_is_compacted_and_asked_again() -> None:
    # pi-ai's isContextOverflow case 3: "length", no output, input at 99 % of the window
    def answer(context: Context) -> AssistantMessage:
        if _last_text(context) == "go" and not _framed(context):
            return reply("", stop="length", input_tokens=int(WINDOW * 0.995), output=0)
        return reply("done")

    model = Model(answer)
    agent, seen, store = agent_with_history(model)
    run = agent.prompt("go")
    assert run.error_message is None and run.text == "done"
    assert [(e.type, e.reason) for e in seen] == [("compaction_start", "overflow"),
                                                 ("compaction_end", "overflow")]
    assert seen[1].summary is not None and seen[1].will_retry
    asked = [c for c in model.requests if _last_text(c) == "go"]
    assert len(asked) == 2 and _framed(asked[1])  # asked again, from the summary
    messages = agent.state.messages
    assert not any(isinstance(m, AssistantMessage) and m.stop_reason == "length"
                   for m in messages)  # the cut-short attempt left the transcript
    assert not any(isinstance(m, AssistantMessage) and m.stop_reason == "length"
                   for m in run.messages)
    assert store.load("s") == messages  # and the store
    assert isinstance(messages[-1], AssistantMessage) and messages[-1].text == "done"
    assert isinstance(messages[-2], CompactionSummaryMessage)


def test_a_recoverable_length_stop_is_retried_once_then_fails_saying_why() -> None:
    # pi-ai's isRecoverableLength: cut below the output limit the request wanted
    model = Model(lambda context: reply("half an ans", stop="length", output=300)
                  if _last_text(context) == "write" else reply("fine"))
    agent, seen, store = agent_with_history(model)
    run = agent.prompt("write")
    assert run.error_message is None and run.text == "half an ans"  # the second cut is kept
    assert [e.type for e in seen] == ["compaction_start", "compaction_end", "compaction_end"]
    assert seen[1].summary is not None and seen[1].will_retry
    assert (seen[2].reason, seen[2].summary, seen[2].error_message) == (
        "overflow", None, LENGTH_FAILED)
    assert sum(_last_text(c) == "write" for c in model.requests) == 2
    messages = agent.state.messages
    assert sum(isinstance(m, AssistantMessage) and m.stop_reason == "length"
               for m in messages) == 1
    assert store.load("s") == messages


def test_a_length_stop_at_the_wanted_limit_is_the_model_s_own() -> None:
    model = Model(lambda context: reply("long", stop="length", output=300)
                  if _last_text(context) == "write" else reply("fine"))
    agent, seen, _ = agent_with_history(model, max_tokens=300)
    run = agent.prompt("write")
    assert run.text == "long" and seen == []
    assert sum(_last_text(c) == "write" for c in model.requests) == 1


def test_without_auto_compaction_a_response_is_never_recovered() -> None:
    model = Model(lambda context: reply("half", stop="length", output=300))
    agent = Agent(model=model.model, stream_fn=model.fn,
                  compaction=Compaction(auto=False, keep_recent_tokens=50))
    for n in range(3):
        agent.prompt(f"q{n} " + "x" * 400)
    assert model.summaries == [] and len(model.requests) == 3


# --- the summary requests ---------------------------------------------------------------


def test_a_summary_request_failing_on_a_transient_error_is_sent_again() -> None:
    model = Model(lambda context: reply("fine"),
                  summary=lambda n: assistant_error("503 Service Unavailable") if n == 0
                  else reply("## Goal\nKeep going."))
    agent, seen, _ = agent_with_history(model, max_retry_delay_ms=1)
    end = agent.compact()
    assert end.summary is not None and len(model.summaries) == 2


def test_a_summary_request_is_sent_again_at_most_twice() -> None:
    model = Model(lambda context: reply("fine"),
                  summary=lambda n: assistant_error("overloaded_error: Overloaded"))
    agent, seen, _ = agent_with_history(model, max_retry_delay_ms=1)
    with pytest.raises(CompactionError, match="Summarization failed: overloaded_error"):
        agent.compact()
    assert len(model.summaries) == 3  # the first attempt and the providers' 2 retries


def test_a_summary_request_failing_for_good_is_not_sent_again() -> None:
    model = Model(lambda context: reply("fine"),
                  summary=lambda n: assistant_error("401 invalid x-api-key"))
    agent, seen, _ = agent_with_history(model, max_retry_delay_ms=1)
    with pytest.raises(CompactionError, match="invalid x-api-key"):
        agent.compact()
    assert len(model.summaries) == 1


def test_an_abort_ends_the_wait_before_a_summary_is_asked_again() -> None:
    agents: list[Agent] = []

    def summary(n: int) -> AssistantMessage:
        agents[0].abort()  # during the summary request: the back-off wait ends at once
        return assistant_error("503 Service Unavailable")

    model = Model(lambda context: reply("fine"), summary=summary)
    agent, seen, _ = agent_with_history(model)  # the back-off would be 0.5 s, then 1 s
    agents.append(agent)
    with pytest.raises(CompactionError, match="Summarization was aborted"):
        agent.compact()
    assert len(model.summaries) == 1
    assert seen[-1].type == "compaction_end" and seen[-1].aborted


def test_a_cut_short_response_whose_tools_ran_stays() -> None:
    @tool
    def note(text: str) -> str:
        """Take a note.

        Args:
            text: The note.
        """
        return "noted"

    def answer(context: Context) -> AssistantMessage:
        if _last_text(context) == "note it":
            message = assistant_tool_calls(("note", {"text": "x"}), stop_reason="length")
            message.usage = Usage(input=100, output=30, total_tokens=130)
            return message
        return reply("fine")

    model = Model(answer)
    agent, seen, store = agent_with_history(model, tools=[note])
    run = agent.prompt("note it")
    assert run.text == "fine" and seen == []
    assert any(isinstance(m, ToolResultMessage) for m in agent.state.messages)
    assert store.load("s") == agent.state.messages
