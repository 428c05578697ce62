"""``piagent chat``'s ``/compact`` and its notes for automatic compaction."""

from __future__ import annotations

import dataclasses
from typing import Any

from piagent import Agent, AssistantMessage, Context, StreamOptions, UserMessage
from piagent.compaction import Compaction
from piagent.testing import ScriptedStreamFn, assistant_text

from .conftest import chat, when_idle


def answer(context: Context, options: StreamOptions) -> AssistantMessage:
    last = context.messages[-1]
    if isinstance(last, UserMessage) and last.text.startswith("<conversation>"):
        return assistant_text("## Goal\nChat.")
    return assistant_text("reply " + "z" * 2000)


def test_slash_compact_and_automatic_compaction_print_notes() -> None:
    fn = ScriptedStreamFn([answer] * 50)
    agent = Agent(model=dataclasses.replace(fn.model, context_window=6_000), stream_fn=fn,
                  compaction=Compaction(reserve_tokens=2_000, keep_recent_tokens=1_000))
    steps: list[Any] = ["/compact"]  # nothing to compact yet
    for n in range(8):
        steps.append(when_idle(agent, f"question {n} " + "q" * 2000))
    steps += [when_idle(agent, "/compact keep the numbers"), when_idle(agent, "/quit")]
    code, out = chat(agent, steps)
    assert code == 0
    assert "(nothing compacted: Nothing to compact" in out
    assert "(compacting the conversation: it nears the model's context window...)" in out
    assert "(compacting the conversation: you asked...)" in out
    assert "(conversation compacted: about " in out
