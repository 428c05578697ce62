"""Two tools in one batch run at the same time.

Each call waits on a shared ``threading.Barrier(2)``: if the tools ran one after the other,
the barrier would time out. ``tool_execution_end`` events arrive in completion order (the
second call finishes first here), while the tool results enter the transcript in the
order the model asked for them. Offline; no key needed.
"""

from __future__ import annotations

import threading
import time

from piagent import Agent, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

both_running = threading.Barrier(2, timeout=5)
second_done = threading.Event()


@tool
def weather(city: str) -> str:
    """Look up the weather for a city (slowly).

    Args:
        city: The city's name.
    """
    both_running.wait()  # proves the two calls overlap
    if city == "Hanoi":
        second_done.wait(5)  # finish after Lisbon, to show completion order
    return {"Hanoi": "31 C, humid", "Lisbon": "19 C, windy"}.get(city, "unknown")


def answer(context, options):
    results = [m for m in context.messages if m.role == "toolResult"]
    lines = [f"{m.tool_name} #{m.tool_call_id}: {m.text}" for m in results]
    return assistant_text("Here is the weather. " + "; ".join(lines))


def main() -> None:
    scripted = ScriptedStreamFn([
        assistant_tool_calls(("weather", {"city": "Hanoi"}), ("weather", {"city": "Lisbon"})),
        answer,
    ])
    agent = Agent(model=scripted.model, tools=[weather], stream_fn=scripted)
    end_order: list[str] = []

    def listen(event, signal):
        if event.type == "tool_execution_start":
            print(f"start {event.tool_call_id} {event.args}")
        elif event.type == "tool_execution_end":
            end_order.append(event.tool_call_id)
            print(f"end   {event.tool_call_id} after {event.duration_ms} ms")
            if len(end_order) == 1:
                second_done.set()

    agent.subscribe(listen)
    started = time.monotonic()
    run = agent.prompt("What's the weather in Hanoi and Lisbon?")
    took = time.monotonic() - started

    transcript_order = [m.tool_call_id for m in run.messages if m.role == "toolResult"]
    print("completion order:", ", ".join(end_order))
    print("transcript order:", ", ".join(transcript_order))
    print(run.messages[-1].text)
    print(f"batch finished in {took:.2f} s")
    assert end_order == ["call_2", "call_1"], end_order
    assert transcript_order == ["call_1", "call_2"], transcript_order


if __name__ == "__main__":
    main()
