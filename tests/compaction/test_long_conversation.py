"""A 500-turn conversation against a stand-in OpenAI-compatible server that counts tokens
by its own rule (``ceil(len(request body) / 4)``) and refuses more than 32,768 as OpenAI
does: with compaction the conversation never overflows, every request after a compaction
holds the summary and the recent turns only, and no tool call is parted from its result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from piagent import Agent, CompactionSummaryMessage, tool
from piagent.compaction import Compaction
from piagent.messages import COMPACTION_SUMMARY_PREFIX
from piagent.sessions import SQLiteStore
from tests.compaction.conftest import LIMIT, TokenServer, _text


@tool
def read(path: str) -> str:
    """Read a note.

    Args:
        path: The note's path.
    """
    return f"Contents of {path}: " + "the quick brown fox jumps over the lazy dog " * 45


def _pairs_intact(messages: list[dict[str, Any]]) -> bool:
    """Every tool message answers a call of the assistant message before it, and every
    call of an assistant message is answered right after it."""
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in open_calls:
                return False
            open_calls.discard(message["tool_call_id"])
            continue
        if open_calls:
            return False
        if message["role"] == "assistant":
            open_calls = {c["id"] for c in message.get("tool_calls") or ()}
    return True


def test_500_turns_never_overflow(token_server: TokenServer, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    events: list[Any] = []
    agent = Agent(model=token_server.model(), api_key="k", tools=[read], store=store,
                  session_id="long", system_prompt="You answer questions from notes.",
                  compaction=Compaction(reserve_tokens=8_192, keep_recent_tokens=8_000))
    agent.subscribe(lambda event, signal: events.append(event)
                    if event.type.startswith("compaction") else None)
    for n in range(250):  # each prompt: a tool call, then an answer: two turns
        run = agent.prompt(f"question {n}: what does note {n} say?")
        assert run.error_message is None, run.error_message
    seen = token_server.seen
    chat = [s for s in seen if not s.summary]
    assert len(chat) == 500
    assert not any(s.refused for s in seen)  # not even the first: compacted in time
    assert max(s.tokens for s in seen) <= LIMIT
    ends = [e for e in events if e.type == "compaction_end"]
    assert len(ends) >= 5 and all(e.summary is not None for e in ends)
    assert all(e.tokens_after < e.tokens_before for e in ends)
    for end in ends:  # the summary requests' usage, priced at the model's rates
        assert end.usage is not None and end.usage.input > 0
        assert end.usage.cost.total == pytest.approx(
            (end.usage.input * 3.0 + end.usage.output * 15.0) / 1e6)
    first = next(i for i, s in enumerate(seen) if s.summary)
    for s in chat:
        assert _pairs_intact(s.body["messages"])
    for s in seen[first + 1:]:
        if s.summary:
            continue
        messages = s.body["messages"]
        framed = [m for m in messages if m["role"] == "user"
                  and _text(m["content"]).startswith(COMPACTION_SUMMARY_PREFIX)]
        assert len(framed) == 1 and messages.index(framed[0]) == 1  # after the system prompt
        assert "question 0:" not in str(messages)
    for i, s in enumerate(seen[:-1]):
        if s.summary and not seen[i + 1].summary:  # the request right after: the summary
            after = seen[i + 1]                    # and the recent turns only
            before = next(b for b in reversed(seen[:i]) if not b.summary)
            assert after.tokens < 8_000 + 6_000, after.tokens  # kept ~8,000 (pi's estimate)
            assert after.tokens < before.tokens / 2
    # the updated summary is one summary, not nested ones
    prompts = [_text(s.body["messages"][-1]["content"]) for s in seen if s.summary]
    history = [p for p in prompts if "beginning of a turn" not in p]
    assert "<previous-summary>" not in history[0]
    for p in history[1:]:  # the previous summary given once, itself one summary
        block = p.split("\n<previous-summary>\n", 1)[1].split("\n</previous-summary>", 1)[0]
        # (a split turn's summary holds the turn prefix's after the history's)
        assert block.count("## Goal") <= 2 and block.count("**Turn Context") <= 1
        assert block.count("<read-files>") == 1
    assert all("[Earlier summary]" not in p for p in prompts)
    # the store keeps everything, with the summaries where they happened
    stored = store.load("long")
    summaries = [m for m in stored if isinstance(m, CompactionSummaryMessage)]
    assert len(summaries) == len(ends)
    assert len(stored) == 1 + 250 * 4 + len(summaries)
    assert summaries[-1].first_kept is not None and summaries[-1].details is not None
    assert "notes/" in summaries[-1].summary  # pi's <read-files> list
    # a new agent on the stored session resumes with the summary
    again = Agent(model=token_server.model(), api_key="k", tools=[read], store=store,
                  session_id="long", compaction=Compaction(reserve_tokens=8_192,
                                                           keep_recent_tokens=8_000))
    before = len(token_server.seen)
    again.prompt("question 999: and now?")
    resumed = token_server.seen[before]
    assert not resumed.refused and not resumed.summary
    assert _text(resumed.body["messages"][1]["content"]).startswith(COMPACTION_SUMMARY_PREFIX)
    assert resumed.body["messages"][0]["content"] == "You answer questions from notes."
    store.close()


def test_overflow_is_compacted_and_retried_once(token_server: TokenServer) -> None:
    """The model claims a larger window than the server takes: the server's refusal is the
    first sign. One compaction, the same request again, and the run goes on."""
    events: list[Any] = []
    agent = Agent(model=token_server.model(context_window=1_000_000), api_key="k",
                  tools=[read], compaction=Compaction(keep_recent_tokens=6_000))
    agent.subscribe(lambda event, signal: events.append(event)
                    if event.type.startswith("compaction") else None)
    for n in range(80):
        run = agent.prompt(f"question {n}: what does note {n} say?")
        assert run.error_message is None, run.error_message
    refused = [i for i, s in enumerate(token_server.seen) if s.refused]
    assert refused, "the conversation never reached the server's limit"
    for i in refused:  # each refusal: a summary, then the same request accepted
        assert token_server.seen[i + 1].summary
        assert not token_server.seen[i + 2].refused
    reasons = [e.reason for e in events if e.type == "compaction_end"]
    assert set(reasons) == {"overflow"}
    assert all(e.will_retry for e in events if e.type == "compaction_end")
    assert not any(m.error_message for m in agent.state.messages
                   if getattr(m, "role", "") == "assistant")
