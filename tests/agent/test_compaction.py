"""``Agent(compaction=...)`` and ``Agent.compact()`` (docs/compaction.md), with the scripted
model: a compaction in the middle of a long tool run, a failed summary that leaves the
history alone, a context overflow compacted and retried once, the summary kept in every
store and a stored session resumed with it, a process killed with SIGKILL in the middle of
a compaction, and nothing loaded or run when compaction is not configured.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import (
    Agent,
    AgentBusyError,
    AssistantMessage,
    CompactionSummaryMessage,
    Context,
    StreamOptions,
    TextContent,
    ToolResultMessage,
    Usage,
    UserMessage,
    event_to_dict,
    tool,
)
from piagent.compaction import Compaction, CompactionError
from piagent.messages import COMPACTION_SUMMARY_PREFIX
from piagent.testing import ScriptedStreamFn, assistant_error, assistant_text, assistant_tool_calls

from ..conftest import WAIT, read_child_line, store_of
from .conftest import child_script, kill_child, opened, posix_only

OVERFLOW = ("This model's maximum context length is 32768 tokens. However, your messages "
            "resulted in 40000 tokens. Please reduce the length of the messages.")


@tool
def fetch(n: int) -> str:
    """Fetch page n.

    Args:
        n: The page.
    """
    return f"page {n}: " + "words " * 300


def _last_text(context: Context) -> str:
    last = context.messages[-1]
    return last.text if isinstance(last, UserMessage) else ""


def is_summary_request(context: Context) -> bool:
    return _last_text(context).startswith("<conversation>")


class Model:
    """A scripted model: summaries for summary requests; otherwise ``answer(context)``,
    each reply's usage the context's chars / 4 (as a provider would count it)."""

    def __init__(self, answer: Any, summary: Any = "## Goal\nKeep going.") -> None:
        self.answer, self.summary = answer, summary
        self.requests: list[Context] = []
        self.summaries: list[Context] = []
        self.fn = ScriptedStreamFn([self.respond] * 10_000, keep_calls=None)

    def respond(self, context: Context, options: StreamOptions) -> AssistantMessage:
        if is_summary_request(context):
            self.summaries.append(context)
            summary = self.summary(context) if callable(self.summary) else self.summary
            return summary if isinstance(summary, AssistantMessage) else assistant_text(summary)
        self.requests.append(context)
        reply: AssistantMessage = self.answer(context)
        chars = sum(len(str(getattr(m, "content", ""))) for m in context.messages)
        if reply.stop_reason != "error":
            reply.usage = Usage(input=chars // 4, output=50, total_tokens=chars // 4 + 50)
        return reply


def tool_loop(pages: int) -> Any:
    """Answer: fetch pages 1..pages one at a time, then a text."""
    def answer(context: Context) -> AssistantMessage:
        fetched = max([int(m.content[0].text.split()[1].rstrip(":"))  # type: ignore[union-attr]
                       for m in context.messages if isinstance(m, ToolResultMessage)] or [0])
        if fetched < pages:
            return assistant_tool_calls(("fetch", {"n": fetched + 1}, f"call_{fetched + 1}"))
        return assistant_text("all pages read")
    return answer


def model_window(fn: ScriptedStreamFn, window: int) -> Any:
    import dataclasses
    return dataclasses.replace(fn.model, context_window=window)


def events_of(agent: Agent) -> list[Any]:
    seen: list[Any] = []
    agent.subscribe(lambda event, signal: seen.append(event)
                    if event.type.startswith("compaction") else None)
    return seen


def test_a_long_tool_run_is_compacted_in_the_middle() -> None:
    model = Model(tool_loop(40))
    agent = Agent(model=model_window(model.fn, 8_000), stream_fn=model.fn, tools=[fetch],
                  compaction=Compaction(reserve_tokens=2_000, keep_recent_tokens=2_000))
    seen = events_of(agent)
    run = agent.prompt("read all pages")
    assert run.error_message is None and run.text == "all pages read"
    assert [e.type for e in seen][:2] == ["compaction_start", "compaction_end"]
    ends = [e for e in seen if e.type == "compaction_end"]
    assert ends and all(e.summary is not None and e.reason == "threshold" for e in ends)
    assert all(e.tokens_after < e.tokens_before for e in ends)
    # a request after the first compaction: the summary, then the recent messages only
    first = next(i for i, c in enumerate(model.requests)
                 if any(COMPACTION_SUMMARY_PREFIX in getattr(m, "text", "") for m in c.messages
                        if isinstance(m, UserMessage)))
    for context in model.requests[first:]:
        users = [m for m in context.messages if isinstance(m, UserMessage)]
        assert users[0].text.startswith(COMPACTION_SUMMARY_PREFIX)
        assert "read all pages" not in [u.text for u in users] or len(users) > 1
        calls = {b.id for m in context.messages if isinstance(m, AssistantMessage)
                 for b in m.tool_calls}
        results = {m.tool_call_id for m in context.messages if isinstance(m, ToolResultMessage)}
        assert results <= calls  # no result without its call
        assert sum(len(str(getattr(m, "content", ""))) for m in context.messages) / 4 < 8_000
    # the transcript keeps everything: 40 calls and results, the summaries among them
    messages = agent.state.messages
    assert sum(isinstance(m, ToolResultMessage) for m in messages) == 40
    assert sum(isinstance(m, CompactionSummaryMessage) for m in messages) == len(ends)
    assert event_to_dict(ends[0])["result"]["estimatedTokensAfter"] == ends[0].tokens_after


def test_a_failed_summary_leaves_the_history_and_the_run_goes_on() -> None:
    model = Model(tool_loop(12), summary=assistant_error("summariser unavailable"))
    agent = Agent(model=model_window(model.fn, 4_000), stream_fn=model.fn, tools=[fetch],
                  compaction=Compaction(reserve_tokens=1_000, keep_recent_tokens=500))
    seen = events_of(agent)
    run = agent.prompt("read")
    assert run.text == "all pages read"
    ends = [e for e in seen if e.type == "compaction_end"]
    assert len(ends) == 1 and ends[0].summary is None  # tried once in the run, not per request
    # one long turn: its prefix is what is summarised (pi's turn-prefix summary)
    assert ends[0].error_message == "Turn prefix summarization failed: summariser unavailable"
    assert not any(isinstance(m, CompactionSummaryMessage) for m in agent.state.messages)
    assert len(model.requests[-1].messages) == len(agent.state.messages) - 1


def test_an_overflow_is_compacted_and_the_request_sent_again() -> None:
    refused = [0]

    def answer(context: Context) -> AssistantMessage:
        framed = any(COMPACTION_SUMMARY_PREFIX in getattr(m, "text", "")
                     for m in context.messages if isinstance(m, UserMessage))
        if _last_text(context) == "the big one" and not framed:
            refused[0] += 1
            return assistant_error(OVERFLOW)
        return assistant_text("fine")

    model = Model(answer)
    agent = Agent(model=model.fn.model, stream_fn=model.fn,
                  compaction=Compaction(keep_recent_tokens=10))
    seen = events_of(agent)
    for n in range(4):
        agent.prompt(f"question {n} " + "x" * 400)
    run = agent.prompt("the big one")
    assert run.error_message is None and run.text == "fine"
    assert refused[0] == 1
    assert [(e.type, e.reason) for e in seen] == [("compaction_start", "overflow"),
                                                 ("compaction_end", "overflow")]
    assert seen[1].will_retry
    assert not any(isinstance(m, AssistantMessage) and m.error_message
                   for m in agent.state.messages)  # the refused attempt left no trace
    # the next request of the next run starts from the summary too
    agent.prompt("after")
    assert _last_text(model.requests[-1]) == "after"
    assert model.requests[-1].messages[0].text.startswith(COMPACTION_SUMMARY_PREFIX)  # type: ignore[union-attr]


def test_an_overflow_twice_fails_the_run_saying_why() -> None:
    model = Model(lambda context: assistant_error(OVERFLOW))
    agent = Agent(model=model.fn.model, stream_fn=model.fn,
                  compaction=Compaction(keep_recent_tokens=10))
    seen = events_of(agent)
    for n in range(3):
        agent.state.messages.append(UserMessage(f"q{n} " + "x" * 400))
        agent.state.messages.append(assistant_text("a" * 400))
    run = agent.prompt("again")
    assert run.error_message == OVERFLOW  # compacted once, refused again: the provider's text
    assert [e.type for e in seen] == ["compaction_start", "compaction_end"]  # one only
    # with nothing left to summarise, the error says so
    model2 = Model(lambda context: assistant_error(OVERFLOW))
    agent2 = Agent(model=model2.fn.model, stream_fn=model2.fn, compaction=Compaction())
    seen2 = events_of(agent2)
    run2 = agent2.prompt("tiny")
    assert run2.error_message == (f"{OVERFLOW} (context overflow recovery failed: Nothing to "
                                  "compact: every message fits in the kept part.)")
    assert seen2 == []


def test_compact_on_demand() -> None:
    model = Model(lambda context: assistant_text("ok " + "y" * 400))
    agent = Agent(model=model.fn.model, stream_fn=model.fn)  # no compaction= needed
    seen = events_of(agent)
    with pytest.raises(CompactionError, match="Nothing to compact"):
        agent.compact()
    for n in range(6):
        agent.prompt(f"question {n} " + "x" * 4000)
    agent.compaction = Compaction(keep_recent_tokens=1_500, auto=False)
    end = agent.compact("focus on the questions")
    assert end.reason == "manual" and end.summary is agent.state.messages[-1]
    assert "Additional focus: focus on the questions" in _last_text(model.summaries[0])
    # nothing to summarise made no events (as pi), the compaction two
    assert [e.type for e in seen] == ["compaction_start", "compaction_end"]
    agent.prompt("next")
    request = model.requests[-1]
    assert request.messages[0].text.startswith(COMPACTION_SUMMARY_PREFIX)  # type: ignore[union-attr]
    assert len(request.messages) < 10


def test_compact_while_a_run_is_active_is_refused() -> None:
    import threading
    gate = threading.Event()
    entered = threading.Event()

    def slow(context: Context) -> AssistantMessage:
        entered.set()
        gate.wait(WAIT)
        return assistant_text("done")

    model = Model(slow)
    agent = Agent(model=model.fn.model, stream_fn=model.fn)
    run = agent.prompt("go", block=False)
    assert entered.wait(WAIT)
    with pytest.raises(AgentBusyError, match="before compacting"):
        agent.compact()
    gate.set()
    assert run.wait(WAIT)


def test_wrong_compaction_is_refused_at_the_call() -> None:
    with pytest.raises(TypeError, match="compaction must be a piagent.compaction.Compaction"):
        Agent(compaction={"reserve_tokens": 1})  # type: ignore[arg-type]
    agent = Agent()
    with pytest.raises(TypeError, match="compaction must be .* not int"):
        agent.compaction = 3  # type: ignore[assignment]
    agent.compaction = Compaction()
    agent.compaction = None


def test_no_compaction_configured_loads_and_runs_nothing() -> None:
    code = ("import sys\nfrom piagent import Agent\nfrom piagent.testing import ScriptedStreamFn,"
            " assistant_text\nfn = ScriptedStreamFn([assistant_text('hi')])\n"
            "Agent(model=fn.model, stream_fn=fn).prompt('x')\n"
            "assert 'piagent.compaction' not in sys.modules, 'loaded'\n"
            "assert 'piagent.agent._compaction' not in sys.modules, 'loaded'\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=WAIT * 3, check=False)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with store_of(request.param, tmp_path) as opened_store:
        yield opened_store


def test_every_store_keeps_the_summary_and_a_session_resumes_with_it(store: Any) -> None:
    model = Model(tool_loop(12))
    settings = Compaction(reserve_tokens=1_000, keep_recent_tokens=800)
    agent = Agent(model=model_window(model.fn, 4_000), stream_fn=model.fn, tools=[fetch],
                  store=store, session_id="s", compaction=settings)
    assert agent.prompt("read").text == "all pages read"
    stored = store.load("s")
    assert [type(m) for m in stored] == [type(m) for m in agent.state.messages]
    summaries = [m for m in stored if isinstance(m, CompactionSummaryMessage)]
    assert summaries and summaries[-1].first_kept is not None
    assert sum(isinstance(m, ToolResultMessage) for m in stored) == 12  # nothing dropped
    again = Agent(model=model_window(model.fn, 4_000), stream_fn=model.fn, tools=[fetch],
                  store=store, session_id="s", compaction=settings)
    model.answer = lambda context: assistant_text("resumed")
    assert again.prompt("more").text == "resumed"
    first = model.requests[-1].messages
    assert any(isinstance(m, UserMessage) and m.text.startswith(COMPACTION_SUMMARY_PREFIX)
               and summaries[-1].summary in m.text for m in first)
    assert len(first) < len(stored)


# --- SIGKILL in the middle of a compaction ------------------------------------------------

CHILD = '''
kind, where, when = sys.argv[1], sys.argv[2], sys.argv[3]
import threading
from piagent import Agent, UserMessage
from piagent.compaction import Compaction
from piagent.testing import ScriptedStreamFn, assistant_text
store = open_store(kind, where)
def answer(context, options):
    last = context.messages[-1]
    if isinstance(last, UserMessage) and last.text.startswith("<conversation>"):
        if when == "during":
            say("summarising")
            threading.Event().wait()  # killed here, in the middle of the summary request
        return assistant_text("## Goal\\nAnswer questions.")
    if when == "after" and any(getattr(m, "text", "").startswith("The conversation history")
                               for m in context.messages if isinstance(m, UserMessage)):
        say("summarising")  # the summary is stored; killed in the request that follows
        threading.Event().wait()
    return assistant_text("answer " + "y" * 2000)
fn = ScriptedStreamFn([answer] * 100)
import dataclasses
model = dataclasses.replace(fn.model, context_window=6000)
agent = Agent(model=model, stream_fn=fn, store=store, session_id="s",
              compaction=Compaction(reserve_tokens=2000, keep_recent_tokens=1000))
for n in range(20):
    agent.prompt(f"question {n} " + "x" * 2000)
    say(f"answered {n}")
'''


@posix_only
@pytest.mark.parametrize("when", ["during", "after"])
@pytest.mark.parametrize("place", ["sqlite", "postgres", "jsonl"], indirect=True)
def test_killed_during_a_compaction_the_session_resumes_intact(
        tmp_path: Path, place: tuple[str, str], when: str) -> None:
    def read(proc: subprocess.Popen[bytes]) -> list[str]:
        lines = []
        while True:
            line = read_child_line(proc)
            lines.append(line)
            if line == "summarising":
                return lines

    lines = kill_child(tmp_path, child_script(CHILD), [*place, when], read)
    answered = sum(line.startswith("answered") for line in lines)
    with opened(place) as store:
        before = store.load("s")
        # every answered prompt is there once, the prompt being compacted for too; the
        # summary once if it was stored before the kill, else not at all
        users = [m.text for m in before if isinstance(m, UserMessage)]
        assert users == [f"question {n} " + "x" * 2000 for n in range(answered + 1)]
        stored = [m for m in before if isinstance(m, CompactionSummaryMessage)]
        assert len(stored) == (0 if when == "during" else 1)
        model = Model(lambda context: assistant_text("after the kill"))
        import dataclasses
        agent = Agent(model=dataclasses.replace(model.fn.model, context_window=6000),
                      stream_fn=model.fn, store=store, session_id="s",
                      compaction=Compaction(reserve_tokens=2000, keep_recent_tokens=1000))
        run = agent.continue_()  # the prompt the killed process never answered
        assert run.text == "after the kill"
        after = store.load("s")
        summaries = [m for m in after if isinstance(m, CompactionSummaryMessage)]
        assert len(summaries) == 1  # made after the kill, or the stored one taken in
        assert after[:len(before)] == before  # nothing lost, nothing twice
        assert len(after) == len(before) + 1 + (1 if when == "during" else 0)
        assert isinstance(after[-1], AssistantMessage) and after[-1].text == "after the kill"
        first = model.requests[-1].messages[0]  # the request after the kill: the summary first
        assert isinstance(first, UserMessage) and first.text.startswith(COMPACTION_SUMMARY_PREFIX)


def test_continue_after_compact_is_refused_as_after_the_reply() -> None:
    model = Model(lambda context: assistant_text("ok " + "y" * 400))
    agent = Agent(model=model.fn.model, stream_fn=model.fn,
                  compaction=Compaction(keep_recent_tokens=200, auto=False))
    for n in range(4):
        agent.prompt(f"question {n} " + "x" * 2000)
    agent.compact()
    with pytest.raises(ValueError, match="Cannot continue from message role: assistant"):
        agent.continue_()


def test_the_summary_can_come_from_another_model_with_its_own_key() -> None:
    import dataclasses
    keys: list[tuple[str, str | None, str | None]] = []

    def answer(context: Context) -> AssistantMessage:
        return assistant_text("ok " + "y" * 400)

    model = Model(answer)
    summariser = ScriptedStreamFn([assistant_text("## Goal\nCheap summary.")] * 5)
    cheap = dataclasses.replace(model.fn.model, id="cheap", provider="cheapco", reasoning=True)

    def recording(m: Any, context: Context, options: StreamOptions) -> Any:
        keys.append((m.id, options.api_key, options.reasoning))
        return summariser(m, context, options)

    agent = Agent(model=model.fn.model, stream_fn=model.fn, thinking_level="high",
                  get_api_key=lambda provider: f"key-of-{provider}",
                  compaction=Compaction(keep_recent_tokens=200, model=cheap,
                                        stream_fn=recording, auto=False))
    for n in range(4):
        agent.prompt(f"question {n} " + "x" * 2000)
    end = agent.compact()
    assert end.summary is not None and end.summary.summary.startswith("## Goal\nCheap summary.")
    # its own key, and the agent's thinking level (it reasons), as pi does
    assert keys and all(k == ("cheap", "key-of-cheapco", "high") for k in keys)
    assert model.summaries == []  # the agent's own model summarised nothing


def test_a_store_that_fails_to_keep_the_summary_leaves_the_history(tmp_path: Path) -> None:
    from piagent.sessions import MemoryStore

    class Failing(MemoryStore):
        def append(self, session_id: str, messages: Any) -> None:
            if any(isinstance(m, CompactionSummaryMessage) for m in messages):
                raise ConnectionError("database went away")
            super().append(session_id, messages)

    store = Failing()
    model = Model(lambda context: assistant_text("ok " + "y" * 400))
    agent = Agent(model=model.fn.model, stream_fn=model.fn, store=store, session_id="s",
                  compaction=Compaction(keep_recent_tokens=200, auto=False))
    for n in range(4):
        agent.prompt(f"question {n} " + "x" * 2000)
    with pytest.raises(CompactionError, match="ConnectionError: database went away"):
        agent.compact()
    assert not any(isinstance(m, CompactionSummaryMessage) for m in agent.state.messages)
    assert store.load("s") == agent.state.messages
    agent.prompt("still fine")
    assert store.load("s") == agent.state.messages


def test_a_context_a_hook_makes_is_kept_after_a_compaction() -> None:
    from piagent import AgentContext, AgentLoopTurnUpdate, AgentTurnContext

    dropped: list[int] = []

    def trim(ctx: AgentTurnContext, signal: Any) -> AgentLoopTurnUpdate:
        messages = list(ctx.context.messages)  # a list of its own, one result fewer
        results = [i for i, m in enumerate(messages) if isinstance(m, ToolResultMessage)]
        if len(results) > 3:
            dropped.append(messages[results[0]].timestamp)  # type: ignore[union-attr]
            messages[results[0]] = ToolResultMessage(  # older than any summary: timestamp 0
                messages[results[0]].tool_call_id, "fetch",  # type: ignore[union-attr]
                [TextContent("page 0: (trimmed)")], timestamp=0)
        return AgentLoopTurnUpdate(context=AgentContext(messages, ctx.context.tools))

    model = Model(tool_loop(30))
    agent = Agent(model=model_window(model.fn, 8_000), stream_fn=model.fn, tools=[fetch],
                  prepare_next_turn=trim,
                  compaction=Compaction(reserve_tokens=2_000, keep_recent_tokens=2_000))
    seen = events_of(agent)
    assert agent.prompt("read all pages").text == "all pages read"
    assert any(e.type == "compaction_end" and e.summary is not None for e in seen)
    assert dropped
    last = model.requests[-1].messages
    first_user = next(m for m in last if isinstance(m, UserMessage))
    assert first_user.text.startswith(COMPACTION_SUMMARY_PREFIX)
    trimmed = [m for m in last if isinstance(m, ToolResultMessage) and "(trimmed)" in m.text]
    assert trimmed  # the hook's own list went out, after the compaction too


def test_no_run_starts_while_compact_works() -> None:
    import threading

    entered, release = threading.Event(), threading.Event()

    def slow_summary(context: Context) -> AssistantMessage:
        entered.set()
        release.wait(WAIT)
        return assistant_text("## Goal\nLate.")

    model = Model(lambda context: assistant_text("ok " + "y" * 400), summary=slow_summary)
    agent = Agent(model=model.fn.model, stream_fn=model.fn,
                  compaction=Compaction(keep_recent_tokens=200, auto=False))
    for n in range(4):
        agent.prompt(f"question {n} " + "x" * 2000)
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(agent.compact()))
    worker.start()
    try:
        assert entered.wait(WAIT)
        with pytest.raises(AgentBusyError):
            agent.prompt("not now")
        assert not agent.wait_for_idle(0.01)
    finally:
        release.set()
        worker.join(WAIT)
    assert outcome and outcome[0].summary is agent.state.messages[-1]
    assert agent.wait_for_idle(WAIT)
    assert agent.prompt("now").text.startswith("ok")
