"""The agent behind both chat examples (Flask and Django): a slow tool, a tool that asks
first, and a model.

Offline by default: ``offline_stream_fn`` scripts the model with ``ScriptedStreamFn``. It
answers a message by calling ``count_slowly`` (a tool that reports progress through
``on_update`` and waits on its ``signal``, so Stop works mid-tool), acknowledges a
steering message, and sums up the tool's result. "delete note NAME" calls ``delete_note``,
which is marked ``needs_approval``: the run stops there, waiting, until the page's Approve
or Deny button decides (docs/approvals.md). A long chat is compacted (docs/compaction.md):
the page shows a note when the older part of the conversation is summarised. ``make_agent("openai/gpt-4o-mini")``
uses a real provider instead, with the key from the provider's environment variable.
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piagent.abort import AbortSignal
from piagent.agent import Agent
from piagent.compaction import Compaction
from piagent.messages import (
    AssistantMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import Model
from piagent.stream import AssistantMessageEventStream, Context, StreamFn, StreamOptions
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.tools import AgentTool, AgentToolResult, ToolUpdateFn, tool

SYSTEM_PROMPT = ("You are a friendly assistant in a chat demo. When asked to count, call "
                 "count_slowly; when asked to delete a note, call delete_note. Keep answers "
                 "short.")
DEFAULT_COUNT = 8
# the offline model's compaction: its 1,200-token window fills after some 15 exchanges
COMPACTION = Compaction(reserve_tokens=400, keep_recent_tokens=300)


def make_count_tool(step_s: float = 0.5) -> AgentTool:
    """``count_slowly(n)``: counts to ``n``, one step every ``step_s`` seconds."""

    @tool
    def count_slowly(n: int, signal: AbortSignal, on_update: ToolUpdateFn) -> AgentToolResult:
        """Count from 1 to n slowly, reporting each number as progress.

        Args:
            n: the number to count to (1 to 100).
        """
        n = max(1, min(n, 100))
        for i in range(1, n + 1):
            if signal.wait(step_s):  # sleeps, but wakes at once when the run is aborted
                return AgentToolResult(content=[TextContent(f"Stopped at {i - 1} of {n}.")],
                                       details={"step": i - 1, "of": n}, is_error=True)
            on_update(AgentToolResult(content=[TextContent(f"Counted {i} of {n}")],
                                      details={"step": i, "of": n}))
        return AgentToolResult(content=[TextContent(f"Counted to {n}.")],
                               details={"step": n, "of": n})

    return count_slowly


def make_delete_note_tool() -> AgentTool:
    """``delete_note(title)``, marked ``needs_approval``: it runs only once a person approved
    the call (a demo: there are no notes, it says what it would have deleted)."""

    @tool(needs_approval=True)
    def delete_note(title: str) -> str:
        """Delete one of the user's notes. Runs only once the user approved the call.

        Args:
            title: the title of the note to delete.
        """
        return f"Deleted the note \u201c{title}\u201d."

    return delete_note


_DELETE = re.compile(r"\bdelete (?:the |my )?note (.+)", re.IGNORECASE)


def _text_of(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextContent))


def _reply(context: Context) -> AssistantMessage:
    """What the scripted model says, given the conversation so far."""
    messages = [m for m in context.messages if m.role != "system"]
    last = messages[-1] if messages else None
    if isinstance(last, UserMessage) and _text_of(last).startswith("<conversation>"):
        # a compaction's summary request (docs/compaction.md): the offline summary
        asks = _text_of(last).count("[User]: ")
        return assistant_text(f"## Goal\nA chat demo.\n\n## Progress\n### Done\n- [x] {asks} "
                              "earlier requests answered\n\n## Next Steps\n1. Go on chatting")
    before = messages[-2] if len(messages) > 1 else None
    if isinstance(last, ToolResultMessage) and last.is_error and \
            last.tool_name == "delete_note":
        return assistant_text(f"I left the note alone. ({_text_of(last)})")
    if isinstance(last, ToolResultMessage):
        return assistant_text(f"Done: {_text_of(last)} Anything else?")
    if isinstance(last, UserMessage) and isinstance(before, ToolResultMessage):
        return assistant_text(f"You steered me: \u201c{_text_of(last)}\u201d. Noted! The "
                              f"count said: {_text_of(before)}")
    asked = _text_of(last) if last is not None else ""
    if (deleting := _DELETE.search(asked)):
        title = deleting.group(1).strip().strip("\"'\u201c\u201d.")
        return assistant_tool_calls(("delete_note", {"title": title}),
                                    text=f"I will delete the note \u201c{title}\u201d once "
                                         f"you approve. ")
    found = re.search(r"\d+", asked)
    n = int(found.group()) if found else DEFAULT_COUNT
    return assistant_tool_calls(("count_slowly", {"n": n}),
                                text=f"Sure! Counting to {n} slowly, watch the progress. ")


def offline_stream_fn(chunk_delay: float = 0.03) -> StreamFn:
    """A scripted model that streams word by word (``chunk_delay`` between deltas)."""

    def stream(model: Model | None, context: Context,
               options: StreamOptions) -> AssistantMessageEventStream:
        return ScriptedStreamFn([_reply(context)], chunk_delay=chunk_delay)(
            model, context, options)

    return stream


PAGE = Path(__file__).resolve().parent / "static" / "chat.html"

# the usual environment variable of each hosted provider, checked when the server starts
KEY_VARIABLES = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY",),
                 "google": ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "groq": ("GROQ_API_KEY",),
                 "openrouter": ("OPENROUTER_API_KEY",), "mistral": ("MISTRAL_API_KEY",),
                 "xai": ("XAI_API_KEY",)}


def make_agent(model: str | None = None, *, base_url: str | None = None, step_s: float = 0.5,
               chunk_delay: float = 0.03) -> Agent:
    """The demo agent: offline unless ``model`` ("provider/model-id") is given.

    ``base_url`` points a model at an OpenAI-compatible server (Ollama, vLLM, ...). A hosted
    provider's key is checked here, when the server starts, not at the first message.
    """
    tools = [make_count_tool(step_s), make_delete_note_tool()]
    if model is None:
        if base_url:
            raise SystemExit("--base-url needs --model provider/model-id "
                             "(e.g. --model ollama/llama3.2).")
        # a small window, so that a long chat shows a compaction (docs/compaction.md)
        offline = dataclasses.replace(ScriptedStreamFn().model, context_window=1_200)
        return Agent(system_prompt=SYSTEM_PROMPT, model=offline, tools=tools,
                     stream_fn=offline_stream_fn(chunk_delay), compaction=COMPACTION)
    from piagent.providers import get_model

    provider, _, model_id = model.partition("/")
    if not model_id:
        msg = f"--model must look like provider/model-id (e.g. openai/gpt-4o-mini), got {model!r}"
        raise SystemExit(msg)
    if base_url:
        return Agent(system_prompt=SYSTEM_PROMPT, tools=tools, compaction=Compaction(),
                     model=Model(id=model_id, api="openai-completions", provider=provider,
                                 base_url=base_url))
    names = KEY_VARIABLES.get(provider, ())
    if names and not any(os.environ.get(name) for name in names):
        msg = (f"--model {model}: no API key; set {' or '.join(names)} in the environment "
               f"(or pass --base-url URL for a local OpenAI-compatible server).")
        raise SystemExit(msg)
    try:
        resolved = get_model(provider, model_id)
    except LookupError as exc:
        msg = (f"--model {model}: {exc.args[0] if exc.args else exc} For a local server, "
               f"add --base-url URL.")
        raise SystemExit(msg) from None
    return Agent(system_prompt=SYSTEM_PROMPT, model=resolved, tools=tools,
                 compaction=Compaction())


def agent_factory(model: str | None = None, *, base_url: str | None = None,
                  step_s: float = 0.5, chunk_delay: float = 0.03) -> Callable[[str], Agent]:
    """``make_agent(session_id)`` for a runner: a fresh demo agent per run, any session.

    The first agent is built here, so a missing key stops the server when it starts.
    """
    make_agent(model, base_url=base_url, step_s=step_s, chunk_delay=chunk_delay)

    def for_session(session_id: str) -> Agent:
        return make_agent(model, base_url=base_url, step_s=step_s, chunk_delay=chunk_delay)

    return for_session


def model_note(agent: Agent) -> str:
    """One line for the page: which model answers, and whether it is the offline one."""
    model = agent.state.model
    if model is None or model.provider == "scripted":
        return ("Offline demo: the model is scripted (no network, no key). It counts, "
                "acknowledges steering, and deletes a note once you approve (\u201cdelete note "
                "shopping\u201d). Start the server with --model "
                "provider/model-id for a real model.")
    return f"Model: {model.provider}/{model.id} at {model.base_url}"


def page_html(agent: Agent) -> bytes:
    """The chat page, with the model note under the title."""
    note = f'<p id="model-note" class="note">{html.escape(model_note(agent))}</p>'
    return PAGE.read_text(encoding="utf-8").replace("</h1>", "</h1>\n" + note, 1).encode()
