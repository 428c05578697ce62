"""An agent with an MCP server's tools: mcp-server-time, run as a subprocess over stdio.

Offline: the model is scripted (it asks for the time in Tokyo, then repeats the answer).
Needs `pip install mcp-server-time`; any MCP server works the same (docs/mcp.md).
"""

import json
import sys

from piagent import Agent
from piagent.mcp import MCPServer
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls


def answer(context, options):
    reply = json.loads(context.messages[-1].text)
    return assistant_text(f"In Tokyo it is {reply['datetime'][11:16]} on {reply['day_of_week']}.")


scripted = ScriptedStreamFn([
    assistant_tool_calls(("get_current_time", {"timezone": "Asia/Tokyo"})),
    answer,
])

with MCPServer.stdio([sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"],
                     name="time") as server:
    print(f"connected to {server.server_info.get('name')} ({server.protocol_version})")
    tools = server.tools()
    print("tools:", ", ".join(tool.name for tool in tools))
    agent = Agent(model=scripted.model, tools=tools, stream_fn=scripted)
    agent.subscribe(lambda event, signal: event.type == "tool_execution_end" and print(
        f"[tool] {event.tool_name} -> error={event.is_error}"))
    run = agent.prompt("What time is it in Tokyo?")

print("final answer:", run.text)
