"""The chat's agent, named in settings: PIAGENT_AGENTS = {'default': 'chat.agents.build'}.

Offline by default: a scripted model counts with count_slowly (progress on the page; Stop
works mid-tool) and deletes a note with delete_note, which waits for Approve or Deny.
CHAT_MODEL=openai/gpt-4o-mini (and the provider's key) puts a real model behind the tools.
"""

import os
import re

from piagent import AbortSignal, Agent, AgentToolResult, TextContent, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

STEP_S = float(os.environ.get('CHAT_STEP_S', '0.5'))  # seconds between two counts


def _result(text: str, is_error: bool = False) -> AgentToolResult:
    return AgentToolResult(content=[TextContent(text)], is_error=is_error)


@tool(replay='safe')  # counting again is harmless: a resumed run counts again
def count_slowly(n: int, signal: AbortSignal, on_update) -> AgentToolResult:
    """Count from 1 to n slowly, reporting each number as progress.

    Args:
        n: the number to count to (1 to 100).
    """
    n = max(1, min(n, 100))
    for i in range(1, n + 1):
        if signal.wait(STEP_S):  # wakes at once when the run is stopped
            return _result(f'Stopped at {i - 1} of {n}.', is_error=True)
        on_update(_result(f'Counted {i} of {n}'))
    return _result(f'Counted to {n}.')


@tool(needs_approval=True)
def delete_note(title: str) -> str:
    """Delete one of the user's notes; runs only once the user approved the call.

    Args:
        title: the title of the note to delete.
    """
    return f'Deleted the note "{title}".'


def _scripted(model, context, options):
    """The offline model: one reply, chosen by the conversation's last message."""
    last = context.messages[-1]
    said = last.content if isinstance(last.content, str) else ''.join(
        getattr(block, 'text', '') for block in last.content)
    if last.role == 'toolResult':
        reply = assistant_text(f'Done: {said} Anything else?')
    elif (note := re.search(r'delete (?:the )?note (\w+)', said, re.IGNORECASE)):
        reply = assistant_tool_calls(('delete_note', {'title': note[1]}),
                                     text=f'I will delete the note "{note[1]}" once you approve. ')
    else:
        n = int(found[0]) if (found := re.search(r'\d+', said)) else 8
        reply = assistant_tool_calls(('count_slowly', {'n': n}),
                                     text=f'Sure! Counting to {n} slowly, watch the progress. ')
    return ScriptedStreamFn([reply], chunk_delay=0.03)(model, context, options)


def build(session_id: str) -> Agent:
    """A fresh agent for one run of the conversation session_id."""
    prompt = 'You are a friendly assistant. Count with count_slowly, delete notes with delete_note.'
    if os.environ.get('CHAT_MODEL'):
        return Agent(system_prompt=prompt, model=os.environ['CHAT_MODEL'],
                     tools=[count_slowly, delete_note])
    return Agent(system_prompt=prompt, model=ScriptedStreamFn().model,
                 tools=[count_slowly, delete_note], stream_fn=_scripted)
