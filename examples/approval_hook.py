"""Approval: ``before_tool_call`` asks before a risky tool runs, and can refuse.

The hook runs on the run's worker thread, in the order the model asked for the calls, with
validated arguments. Returning ``BeforeToolCallResult(block=True, reason=...)`` turns the
call into an error result the model reads. By default a fixed policy answers (offline,
non-interactive); ``--ask`` asks you on the terminal instead.
"""

from __future__ import annotations

import argparse

from piagent import Agent, BeforeToolCallResult, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

files = {"draft.txt": "first draft", "old.txt": "obsolete"}
RISKY = {"delete_file"}


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: The file to read.
    """
    return files[path]


@tool
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file to delete.
    """
    del files[path]
    return f"deleted {path}"


def make_approval(ask: bool):
    def before_tool_call(ctx, signal):
        if ctx.tool_call.name not in RISKY:
            return None  # run it
        question = f"Allow {ctx.tool_call.name}({ctx.args})? [y/N] "
        approved = input(question).strip().lower() == "y" if ask else False
        print(f"approval: {ctx.tool_call.name} {ctx.args} -> {'yes' if approved else 'no'}")
        if approved:
            return None
        return BeforeToolCallResult(block=True, reason="The user declined this deletion.")
    return before_tool_call


def answer(context, options):
    results = {m.tool_name: m for m in context.messages if m.role == "toolResult"}
    deleted = results["delete_file"]
    verdict = (f"I could not delete old.txt: {deleted.text}" if deleted.is_error
               else "I deleted old.txt.")
    return assistant_text(f"draft.txt says {results['read_file'].text!r}. {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ask", action="store_true", help="ask on the terminal")
    args = parser.parse_args()

    scripted = ScriptedStreamFn([
        assistant_tool_calls(("read_file", {"path": "draft.txt"}),
                             ("delete_file", {"path": "old.txt"})),
        answer,
    ])
    agent = Agent(model=scripted.model, tools=[read_file, delete_file], stream_fn=scripted,
                  before_tool_call=make_approval(args.ask))
    run = agent.prompt("Read draft.txt and delete old.txt.")
    for message in run.messages:
        if message.role == "toolResult":
            status = "error" if message.is_error else "ok"
            print(f"{message.tool_name}: {status}: {message.text}")
    print(run.messages[-1].text)
    print("files left:", sorted(files))


if __name__ == "__main__":
    main()
