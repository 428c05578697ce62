"""Write the reference scenarios (``scenarios/*.json``) from the families below.

Run ``python tests/reference/make_scenarios.py`` after editing; the JSON files are committed
so either driver can be run on one by hand. The format is described in docs/reference.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
OUT = HERE / "scenarios"

Json = Any

READ = {"name": "read", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}
CALC = {"name": "calc", "description": "Add numbers",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}
WRITE = {"name": "write", "description": "Write a file",
         "parameters": {"type": "object",
                        "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                        "required": ["path", "text"]}}

SCENARIOS: list[dict[str, Any]] = []

# hooks that only log their calls: which of them run, in which order, with what
OBSERVE: dict[str, Any] = {"finishTurn": {}, "prepareNextTurn": {}, "prepareRequest": {},
                           "transformContext": {}, "convertToLlm": {},
                           "afterToolCall": [{"match": {"toolName": "-none-"}}]}


def text(t: str, stop: str = "stop", **extra: Any) -> Json:
    return {"role": "assistant", "content": [{"type": "text", "text": t}], "stopReason": stop,
            **extra}


def calls(*items: tuple[str, dict[str, Any], str], stop: str = "toolUse",
          lead: str | None = None) -> Json:
    content: list[Json] = [{"type": "text", "text": lead}] if lead else []
    content += [{"type": "toolCall", "id": i, "name": n, "arguments": a} for n, a, i in items]
    return {"role": "assistant", "content": content, "stopReason": stop}


def tool(base: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(base)), **extra}


def add(name: str, **spec: Any) -> None:
    spec.setdefault("steps", [{"prompt": "Go"}])
    SCENARIOS.append({"name": name, **spec})


# --- the seed's trace and streaming basics -------------------------------------------------

add("seed_trace_steer_during_tools",
    description="The seed's 25-step trace: two parallel reads, b finishes first, a steer typed "
                "while they run is delivered before the second request.",
    tools=[READ], finishOrder=["call_2", "call_1"],
    steps=[{"prompt": "Read a.txt and b.txt, then summarise"}],
    actions=[{"on": {"type": "tool_execution_start", "toolCallId": "call_2"},
              "do": [{"steer": "Only summarise a.txt"}]}],
    responses=[calls(("read", {"path": "a.txt"}, "call_1"), ("read", {"path": "b.txt"}, "call_2")),
               text("a.txt says hello.")])
add("seed_trace_follow_up_instead",
    description="The trace with follow_up() instead of steer(): a third turn after the agent "
                "would stop.",
    tools=[READ], finishOrder=["call_2", "call_1"],
    actions=[{"on": {"type": "tool_execution_start", "toolCallId": "call_2"},
              "do": [{"followUp": "Now b.txt only"}]}],
    responses=[calls(("read", {"path": "a.txt"}, "call_1"), ("read", {"path": "b.txt"}, "call_2")),
               text("Both read."), text("b.txt says bye.")])
add("seed_trace_sequential", description="The trace in sequential mode.",
    tools=[READ], config={"toolExecution": "sequential"},
    responses=[calls(("read", {"path": "a.txt"}, "call_1"), ("read", {"path": "b.txt"}, "call_2")),
               text("Done.")])
add("text_reply", description="One prompt, one text answer.", systemPrompt="Be brief.",
    responses=[text("Hello there, how can I help you today?")],
    entries=["agent", "run_loop", "agent_loop"])
add("text_reply_no_system_prompt", description="No system prompt and no tools: no system message.",
    responses=[text("Hi.")], entries=["agent", "run_loop", "agent_loop"])
add("thinking_with_signatures",
    description="Thinking with a signature, redacted thinking, and text with a signature.",
    responses=[{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Let me think about this carefully.",
         "thinkingSignature": "sig-think-1"},
        {"type": "thinking", "thinking": "", "thinkingSignature": "opaque", "redacted": True},
        {"type": "text", "text": "The answer is 42.", "textSignature": "sig-text-1"}],
        "stopReason": "stop"}], entries=["agent", "run_loop", "agent_loop"])
add("multiple_text_blocks", description="Two text blocks and a tool call with a lead text.",
    tools=[READ],
    responses=[{"role": "assistant", "content": [
        {"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."},
        {"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "x"}}],
        "stopReason": "toolUse"}, text("ok")])
add("usage_with_cost", description="An assistant message carrying usage and cost.",
    responses=[text("Costly.", usage={
        "input": 100, "output": 20, "cacheRead": 5, "cacheWrite": 3, "totalTokens": 128,
        "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0.01, "cacheWrite": 0.02,
                 "total": 0.33}})], entries=["agent", "run_loop", "agent_loop"])
add("thinking_level_high", description="thinkingLevel high: the request's reasoning and the "
    "messages' thinkingLevel.", config={"thinkingLevel": "high"}, responses=[text("Deep.")])

# --- stop reasons -------------------------------------------------------------------------

add("stop_length_text", description="A text answer cut off by the token limit.",
    responses=[text("This answer was cut", stop="length")])
add("stop_length_with_tool_calls",
    description="A length stop with tool calls: every call fails without running.",
    tools=[READ, CALC],
    responses=[calls(("read", {"path": "a"}, "c1"), ("calc", {"a": 1, "b": 2}, "c2"), stop="length"),
               text("Retrying later.")])
add("stop_error_no_content", description="A failed request: error, no content.",
    responses=[{"role": "assistant", "content": [], "stopReason": "error",
                "errorMessage": "Upstream 500"}])
add("stop_error_after_text", description="An error after some streamed text.",
    responses=[text("Partial answer", stop="error", errorMessage="Connection reset")])
add("stop_aborted_scripted", description="A response that ends aborted by the provider.",
    responses=[text("Stopped", stop="aborted", errorMessage="Request was aborted")])
add("script_runs_out", description="No scripted response left: the stream function's error.",
    tools=[READ], responses=[calls(("read", {"path": "a"}, "c1"))])
add("error_then_continue", description="continue() after a failed response is refused: the "
    "tail is the assistant's error message.",
    steps=[{"prompt": "Go"}, {"continue": True}],
    responses=[{"role": "assistant", "content": [], "stopReason": "error",
                "errorMessage": "boom"}], entries=["agent"])

# --- tools --------------------------------------------------------------------------------

add("single_tool_call", description="One tool call and a final answer.", tools=[READ],
    responses=[calls(("read", {"path": "a.txt"}, "call_1")), text("It says hello.")],
    entries=["agent", "run_loop", "agent_loop"])
add("parallel_three_reverse_order", description="Three parallel calls finishing 3, 2, 1.",
    tools=[READ], finishOrder=["c3", "c2", "c1"],
    responses=[calls(("read", {"path": "1"}, "c1"), ("read", {"path": "2"}, "c2"),
                     ("read", {"path": "3"}, "c3")), text("All read.")])
add("parallel_three_in_order", description="Three parallel calls finishing in source order.",
    tools=[READ], finishOrder=["c1", "c2", "c3"],
    responses=[calls(("read", {"path": "1"}, "c1"), ("read", {"path": "2"}, "c2"),
                     ("read", {"path": "3"}, "c3")), text("All read.")])
add("sequential_execution_mode_tool",
    description="One tool declares executionMode sequential: the whole batch runs in order.",
    tools=[READ, tool(WRITE, executionMode="sequential")],
    responses=[calls(("read", {"path": "a"}, "c1"), ("write", {"path": "b", "text": "x"}, "c2")),
               text("Written.")])
add("unknown_tool", description="A call to a tool that does not exist.", tools=[READ],
    responses=[calls(("delete", {"path": "a"}, "c1")), text("Sorry.")])
add("validation_missing_required", description="A required argument is missing.", tools=[READ],
    responses=[calls(("read", {}, "c1")), text("Sorry.")],
    defects=['validation-error-text'])
add("coercion_string_to_number", description='"5" for a number is converted to 5.',
    tools=[CALC], responses=[calls(("calc", {"a": "5", "b": 2}, "c1")), text("7")])
add("coercion_scalar_to_array", description='{"tags": "solo"} for an array of strings.',
    tools=[{"name": "tag", "parameters": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["tags"]}}],
    responses=[calls(("tag", {"tags": "solo"}, "c1")), text("ok")],
    defects=['coercion-scalar-to-array'])
add("coercion_optional_null", description='{"limit": null} for an optional number.',
    tools=[{"name": "list", "parameters": {"type": "object", "properties": {
        "limit": {"type": "number"}, "dir": {"type": "string"}}, "required": ["dir"]}}],
    responses=[calls(("list", {"dir": "/", "limit": None}, "c1")), text("ok")],
    defects=['coercion-optional-null'])
add("coercion_required_null", description="null for a required number.",
    tools=[CALC], responses=[calls(("calc", {"a": None, "b": 2}, "c1")), text("ok")])
add("validation_enum_text", description="A value outside an enum: the error text the model reads.",
    tools=[{"name": "mode", "parameters": {"type": "object", "properties": {
        "m": {"type": "string", "enum": ["fast", "slow"]}}, "required": ["m"]}}],
    responses=[calls(("mode", {"m": "medium"}, "c1")), text("ok")],
    defects=['validation-error-text'])
add("validation_array_item_path", description="A wrong array item: the error path.",
    tools=[{"name": "nums", "parameters": {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "number"}}}, "required": ["a"]}}],
    responses=[calls(("nums", {"a": [1, "x"]}, "c1")), text("ok")],
    defects=['validation-error-text'])
add("validation_additional_properties", description="An unexpected property where "
    "additionalProperties is false.",
    tools=[{"name": "strict", "parameters": {"type": "object", "properties": {
        "a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}}],
    responses=[calls(("strict", {"a": "x", "extra": 1}, "c1")), text("ok")],
    defects=["validation-error-text"])
add("validation_nested_required", description="A nested object misses a required property.",
    tools=[{"name": "nested", "parameters": {"type": "object", "properties": {
        "opts": {"type": "object", "properties": {"depth": {"type": "integer"}},
                 "required": ["depth"]}}, "required": ["opts"]}}],
    responses=[calls(("nested", {"opts": {}}, "c1")), text("ok")],
    defects=["validation-error-text"])
add("coercion_string_to_boolean", description='"true" for a boolean.',
    tools=[{"name": "flag", "parameters": {"type": "object", "properties": {
        "on": {"type": "boolean"}}, "required": ["on"]}}],
    responses=[calls(("flag", {"on": "true"}, "c1")), text("ok")])
add("coercion_number_to_string", description="5 for a string.",
    tools=[{"name": "name", "parameters": {"type": "object", "properties": {
        "n": {"type": "string"}}, "required": ["n"]}}],
    responses=[calls(("name", {"n": 5}, "c1")), text("ok")])
add("tool_throws", description="execute raises: an error tool result with its message.",
    tools=[tool(READ, default={"throw": "disk on fire"})],
    responses=[calls(("read", {"path": "a"}, "c1")), text("Oops.")],
    differences=['tool-error-names-its-type'])
add("tool_returns_is_error", description="execute returns isError: true.",
    tools=[tool(READ, default={"text": "no such file", "isError": True})],
    responses=[calls(("read", {"path": "a"}, "c1")), text("Missing.")])
add("tool_updates", description="A tool streams two partial results before its end.",
    tools=[tool(READ, default={"updates": [
        {"content": [{"type": "text", "text": "10%"}], "details": {"p": 10}},
        {"content": [{"type": "text", "text": "90%"}], "details": {"p": 90}}]})],
    responses=[calls(("read", {"path": "a"}, "c1")), text("Done.")])
add("tool_image_result", description="A tool returns an image and details.",
    tools=[tool(READ, default={"content": [
        {"type": "text", "text": "see image"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}],
        "details": {"w": 1, "h": 1}})],
    responses=[calls(("read", {"path": "p.png"}, "c1")), text("A pixel.")])
add("tool_no_details", description="A tool result whose details are an explicit null.",
    tools=[tool(READ, default={"details": None})],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")],
    differences=["details-none-is-no-details"])
add("tool_usage", description="A tool result carrying its own usage.",
    tools=[tool(READ, default={"usage": {
        "input": 7, "output": 3, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 10,
        "cost": {"input": 0.001, "output": 0.002, "cacheRead": 0, "cacheWrite": 0,
                 "total": 0.003}}})],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("terminate_all", description="Every call of the batch asks to terminate: no further request.",
    tools=[tool(READ, default={"terminate": True})],
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {"path": "b"}, "c2")), text("unused")])
add("terminate_some", description="Only one of two calls terminates: the loop goes on.",
    tools=[tool(READ, results={"c1": {"terminate": True}})],
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {"path": "b"}, "c2")), text("Go on.")])
add("prepare_arguments", description="prepareArguments adds a default before validation.",
    tools=[tool(WRITE, prepareArguments={"merge": {"text": "default"}})],
    responses=[calls(("write", {"path": "a"}, "c1")), text("ok")])

# --- hooks --------------------------------------------------------------------------------

add("before_block_default_reason", description="before_tool_call blocks without a reason.",
    tools=[READ], hooks={"beforeToolCall": [{"block": True}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("Blocked.")])
add("before_block_reason_one_of_two", description="Blocks one call with a reason, runs the other.",
    tools=[READ], hooks={"beforeToolCall": [{"match": {"toolCallId": "c2"}, "block": True,
                                             "reason": "Not allowed: b"}]},
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {"path": "b"}, "c2")), text("ok")])
add("before_block_terminate", description="A blocked call that asks to terminate the batch.",
    tools=[READ], hooks={"beforeToolCall": [{"block": True, "reason": "stop", "terminate": True}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("unused")])
add("before_mutates_args", description="before_tool_call changes the validated args in place.",
    tools=[READ], hooks={"beforeToolCall": [{"setArgs": {"path": "/safe/a"}}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("before_throws", description="before_tool_call raises: an error result with its message.",
    tools=[READ], hooks={"beforeToolCall": [{"throw": "policy engine down"}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("after_override_content", description="after_tool_call replaces content and details.",
    tools=[READ], hooks={"afterToolCall": [{"content": [{"type": "text", "text": "[redacted]"}],
                                            "details": {"redacted": True}}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("after_marks_error", description="after_tool_call turns a success into an error.",
    tools=[READ], hooks={"afterToolCall": [{"isError": True}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("after_terminate", description="after_tool_call asks to terminate.",
    tools=[READ], hooks={"afterToolCall": [{"terminate": True}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("unused")])
add("after_throws", description="after_tool_call raises: an error result.",
    tools=[READ], hooks={"afterToolCall": [{"throw": "audit failed"}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("after_sees_error_result", description="after_tool_call sees a failed tool's result.",
    tools=[tool(READ, default={"text": "denied", "isError": True})],
    hooks={"afterToolCall": [{"match": {"toolName": "nothing"}}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("finish_turn_end_after_tools", description="finish_turn ends the run after a tool turn.",
    tools=[READ], hooks={"finishTurn": {"1": "end"}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("unused")])
add("finish_turn_continue_after_text",
    description="finish_turn 'continue' after a text answer: one context-only turn more.",
    hooks={"finishTurn": {"1": "continue"}}, responses=[text("First."), text("Second.")])
add("finish_turn_continue_with_follow_up",
    description="'continue' plus a queued follow-up: the follow-up turn satisfies it.",
    hooks={"finishTurn": {"1": "continue"}},
    actions=[{"on": {"type": "message_end", "role": "assistant"}, "do": [{"followUp": "More"}]}],
    responses=[text("First."), text("Second."), text("Third?")])
add("finish_turn_throws", description="finish_turn raises.", hooks={"finishTurn": {"1": "throw"}},
    responses=[text("First.")],
    differences={"agent": ["agent-end-run-messages"], "agent_loop": ["agent-loop-error-not-hang"]})
add("prepare_next_turn_messages", description="prepare_next_turn appends a message.",
    tools=[READ], hooks={"prepareNextTurn": {"1": {"messages": ["Note: be brief"]}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("Brief.")])
add("prepare_next_turn_thinking", description="prepare_next_turn raises the thinking level.",
    tools=[READ], hooks={"prepareNextTurn": {"1": {"thinkingLevel": "medium"}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("Thought.")])
add("prepare_next_turn_tools", description="prepare_next_turn swaps the tool set: a system "
    "message declares the change.", tools=[READ, tool(WRITE, hidden=True)],
    hooks={"prepareNextTurn": {"1": {"tools": ["write"]}}},
    responses=[calls(("read", {"path": "a"}, "c1")),
               calls(("write", {"path": "b", "text": "t"}, "c2")), text("Done.")])
add("prepare_next_turn_replace_system_in_place",
    description="prepare_next_turn replaces context.messages[0] in place with a system message "
                "that declares no tools.", systemPrompt="Original.", tools=[READ],
    hooks={"prepareNextTurn": {"1": {"replaceFirstSystem": {"role": "system",
                                                            "content": "Compacted."}}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("prepare_request_thinking", description="prepare_request sets the thinking level.",
    hooks={"prepareRequest": {"1": {"thinkingLevel": "low"}}}, responses=[text("Low.")])
add("prepare_request_tools", description="prepare_request removes every tool for the request.",
    tools=[READ], hooks={"prepareRequest": {"2": {"tools": []}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("No tools now.")])
add("prepare_request_drop_last", description="prepare_request drops the last message from the "
    "request context.", tools=[READ], hooks={"prepareRequest": {"2": {"dropLast": 1}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("transform_context_keep_last", description="transform_context keeps the last 2 messages.",
    tools=[READ], hooks={"transformContext": {"*": {"keepLast": 2}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("transform_context_append", description="transform_context appends a user message.",
    hooks={"transformContext": {"*": {"appendUser": "(reminder)"}}}, responses=[text("ok")])
add("transform_context_replace_system_in_place",
    description="transform_context replaces messages[0] in place with a tool-less system message.",
    systemPrompt="Original.", tools=[READ],
    hooks={"transformContext": {"1": {"replaceFirstSystem": {"role": "system",
                                                             "content": "Compacted."}}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("convert_to_llm_drop_system", description="convert_to_llm drops system messages.",
    systemPrompt="Hidden.", hooks={"convertToLlm": {"*": {"dropRoles": ["system"]}}},
    responses=[text("ok")])
add("convert_to_llm_throws_agent", description="convert_to_llm raises inside an Agent run: the "
    "seed's handleRunFailure.", hooks={"convertToLlm": {"*": {"throw": "bad message"}}},
    responses=[text("unused")], entries=["agent"],
    differences=['agent-end-run-messages'])

# --- queues -------------------------------------------------------------------------------

add("steer_after_text_answer", description="A steer after a text answer still makes turn 2.",
    actions=[{"on": {"type": "message_end", "role": "assistant"}, "do": [{"steer": "And more"}]}],
    responses=[text("One."), text("Two.")])
add("steering_one_at_a_time", description="Two steers, one-at-a-time: one per turn.",
    actions=[{"on": {"type": "message_end", "role": "assistant"},
              "do": [{"steer": "s1"}, {"steer": "s2"}]}],
    responses=[text("One."), text("Two."), text("Three.")])
add("steering_all", description="Two steers in 'all' mode: both in one turn.",
    config={"steeringMode": "all"},
    actions=[{"on": {"type": "message_end", "role": "assistant"},
              "do": [{"steer": "s1"}, {"steer": "s2"}]}],
    responses=[text("One."), text("Two.")])
add("follow_up_all", description="Two follow-ups in 'all' mode.", config={"followUpMode": "all"},
    actions=[{"on": {"type": "message_end", "role": "assistant"},
              "do": [{"followUp": "f1"}, {"followUp": "f2"}]}],
    responses=[text("One."), text("Two.")])
add("steer_before_prompt", description="A steer queued before the run: the first poll takes it.",
    queued={"steering": ["early steer"]}, responses=[text("Both seen.")])
add("steer_from_tool", description="A tool queues a steer while running.",
    tools=[tool(READ, default={"steer": "from the tool"})],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("continue_from_user_tail", description="continue() with a user message at the end.",
    messages=[{"role": "user", "content": [{"type": "text", "text": "Earlier question"}]}],
    steps=[{"continue": True}], responses=[text("Answer.")], entries=["agent"])
add("loop_continue_caller_list", description="run_agent_loop_continue: what happens to the "
    "caller's context.messages.",
    messages=[{"role": "user", "content": [{"type": "text", "text": "Earlier question"}]}],
    steps=[{"continue": True}], responses=[text("Answer.")],
    entries=["run_loop", "agent_loop"], differences=["caller-list-not-mutated"])
add("continue_from_assistant_with_steer", description="continue() on an assistant tail runs "
    "the queued steer as a prompt.",
    steps=[{"prompt": "Go"}, {"steer": "queued"}, {"continue": True}],
    responses=[text("One."), text("Two.")], entries=["agent"])
add("continue_refused", description="continue() refused: assistant tail and no queue; empty "
    "transcript.", steps=[{"continue": True}, {"prompt": "Go"}, {"continue": True}],
    responses=[text("One.")], entries=["agent"])
add("multi_run_tool_change", description="Two runs; the tool set changes between them.",
    systemPrompt="Sys.", tools=[READ, tool(CALC, hidden=True)],
    steps=[{"prompt": "First"}, {"setTools": ["read", "calc"]}, {"prompt": "Second"},
           {"setTools": ["calc"]}, {"prompt": "Third"}],
    responses=[text("1"), text("2"), text("3")], entries=["agent"])
add("reset_between_runs", description="reset() keeps the replayed system baseline.",
    systemPrompt="Sys.", tools=[READ],
    steps=[{"prompt": "First"}, {"reset": True}, {"prompt": "Second"}],
    responses=[text("1"), text("2")], entries=["agent"])
add("prompt_with_images", description="A prompt with an image.",
    steps=[{"prompt": "What is this?", "images": [
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]}],
    responses=[text("A pixel.")], entries=["agent"])
add("initial_system_sections", description="A transcript with system sections and tool changes.",
    messages=[{"role": "system", "content": "Base.", "sections": {"style": "terse"},
               "toolsAdded": [{"name": "read", "description": "Read a file",
                               "parameters": READ["parameters"]}], "timestamp": 0},
              {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
              {"role": "assistant", "content": [{"type": "text", "text": "Hello"}],
               "api": "scripted", "provider": "scripted", "model": "scripted",
               "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0,
                         "totalTokens": 2, "cost": {"input": 0, "output": 0, "cacheRead": 0,
                                                    "cacheWrite": 0, "total": 0}},
                "stopReason": "stop"},
              {"role": "system", "content": "", "sections": {"style": None, "lang": "en"}}],
    tools=[READ], responses=[text("ok")])

# --- aborts and failures (several declared differences) -----------------------------------

add("abort_during_text_stream", description="Abort at the first text delta.",
    actions=[{"on": {"type": "message_update", "event": "text_delta"}, "do": [{"abort": True}]}],
    responses=[text("This is a long answer that will be cut.")])
add("abort_at_message_start", description="Abort at the assistant's message_start.",
    actions=[{"on": {"type": "message_start", "role": "assistant"}, "do": [{"abort": True}]}],
    responses=[text("Never streamed.")])
add("abort_during_tool", description="Abort while a tool runs; the loop would request again.",
    hooks=OBSERVE, tools=[tool(READ, default={"waitAbort": True})],
    actions=[{"on": {"type": "tool_execution_start"}, "do": [{"abort": True}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("unused")],
    differences=["no-request-when-aborted", "no-hooks-after-abort"])
add("abort_in_tool_with_queued_steer", description="A steer is queued, then the run aborts in a "
    "tool: is the steer delivered, kept or lost?",
    hooks=OBSERVE, tools=[tool(READ, default={"waitAbort": True})],
    actions=[{"on": {"type": "tool_execution_start"},
              "do": [{"steer": "keep me"}, {"abort": True}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("unused")],
    differences=["no-request-when-aborted", "no-hooks-after-abort", "queued-input-kept"],
    keptOnAbort=["keep me"])
add("abort_before_run", description="The loop is started with an aborted signal.",
    abortBeforeRun=True, responses=[text("unused")], entries=["run_loop"],
    differences=["no-request-when-aborted"])
add("abort_parallel_sibling", description="Abort while two parallel tools run.",
    hooks=OBSERVE, tools=[tool(READ, default={"waitAbort": True})],
    actions=[{"on": {"type": "tool_execution_start", "toolCallId": "c2"}, "do": [{"abort": True}]}],
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {"path": "b"}, "c2")), text("unused")],
    differences=["no-request-when-aborted", "no-hooks-after-abort"])
add("abort_in_before_hook", description="before_tool_call aborts the run.",
    tools=[READ], hooks={**OBSERVE, "beforeToolCall": [{"abort": True}]},
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {"path": "b"}, "c2")), text("unused")],
    differences=["no-request-when-aborted", "no-hooks-after-abort"])
add("abort_in_prepare_next_turn", description="prepare_next_turn aborts: which hooks still run?",
    tools=[READ], hooks={"prepareNextTurn": {"1": {"abort": True}},
                         "prepareRequest": {}, "transformContext": {}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("unused")],
    differences=["no-request-when-aborted", "no-hooks-after-abort"])
add("abort_finish_turn_sees_abort", description="finish_turn after an aborted stream.",
    hooks={"finishTurn": {}},
    actions=[{"on": {"type": "message_update", "event": "text_start"}, "do": [{"abort": True}]}],
    responses=[text("Cut here please.")], differences=["no-hooks-after-abort"])
add("listener_throws_at_message_end", description="A listener raises at the assistant's "
    "message_end: handleRunFailure.", listenerThrows=[
        {"on": {"type": "message_end", "role": "assistant"}, "message": "listener broke"}],
    responses=[text("Hello.")], entries=["agent"], differences=["agent-end-run-messages"])
add("listener_throws_at_tool_end_sibling_running",
    description="A listener raises at one tool's end while its sibling still runs.",
    tools=[READ], finishOrder=["c2", "c1"],
    listenerThrows=[{"on": {"type": "tool_execution_end", "toolCallId": "c2"},
                     "message": "listener broke"}],
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {"path": "b"}, "c2")), text("unused")],
    entries=["agent"],
    differences=["results-kept-after-listener-failure", "agent-end-run-messages"])
add("hook_throws_in_agent_loop_stream", description="prepare_request raises under agent_loop: "
    "pi's stream never ends; piagent raises AgentLoopError.",
    hooks={"prepareRequest": {"1": {"throw": "hook broke"}}}, responses=[text("unused")],
    entries=["agent_loop"], differences=["agent-loop-error-not-hang"])
add("hook_throws_in_run_loop", description="prepare_request raises under run_agent_loop.",
    hooks={"prepareRequest": {"1": {"throw": "hook broke"}}}, responses=[text("unused")],
    entries=["run_loop"])
add("busy_prompt_while_running", description="prompt() while a run is active.",
    tools=[READ], actions=[{"on": {"type": "tool_execution_start"},
                            "do": [{"prompt": "again"}, {"continue": True}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")], entries=["agent"],
    differences=["python-names"])

# --- more: pi-ai's own stream, partials, polling rules, continue branches -----------------

add("timed_stream_duration", description="The stream function returns pi-ai's own "
    "AssistantMessageEventStream (piagent: ScriptedStreamFn): pi times the response.",
    timedStream=True, responses=[text("Timed.")], defects=["assistant-duration-missing"])
add("event_partial_in_updates", description="message_update events keep their partial message.",
    keepPartial=True, responses=[text("Partial please.")])
add("set_tools_during_run", description="state.tools assigned during a run counts from the next "
    "run only.", tools=[READ, tool(CALC, hidden=True)],
    actions=[{"on": {"type": "tool_execution_start"}, "do": [{"setTools": ["calc"]}]}],
    steps=[{"prompt": "First"}, {"prompt": "Second"}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("1"), text("2")], entries=["agent"])
add("steer_poll_skipped_after_prepare", description="A steer polled at turn_end, another queued "
    "by prepare_next_turn: one-at-a-time, so the second waits for the next turn.",
    tools=[READ], hooks={"prepareNextTurn": {"1": {"steer": "from prepare"}}},
    actions=[{"on": {"type": "turn_end"}, "do": [{"steer": "at turn end"}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("1"), text("2")])
add("steer_repolled_after_prepare", description="Nothing queued at turn_end; prepare_next_turn "
    "queues a steer: the loop polls again and delivers it in this turn.",
    tools=[READ], hooks={"prepareNextTurn": {"1": {"steer": "from prepare"}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("1")])
add("continue_from_assistant_with_follow_up", description="continue() on an assistant tail with "
    "only a follow-up queued runs it as a prompt (with the initial steering poll).",
    steps=[{"prompt": "Go"}, {"followUp": "queued follow-up"}, {"continue": True}],
    responses=[text("One."), text("Two.")], entries=["agent"])
add("thinking_level_between_runs", description="state.thinking_level changed between runs.",
    steps=[{"prompt": "First"}, {"setThinkingLevel": "low"}, {"prompt": "Second"}],
    responses=[text("1"), text("2")], entries=["agent"])
add("abort_with_reason_loop", description="The loop's controller aborts with a reason.",
    actions=[{"on": {"type": "message_update", "event": "text_delta"},
              "do": [{"abort": True, "reason": "user pressed stop"}]}],
    responses=[text("A long answer that gets cut off.")], entries=["run_loop"])
add("follow_ups_one_at_a_time", description="Two follow-ups one-at-a-time: two more turns.",
    actions=[{"on": {"type": "message_end", "role": "assistant"},
              "do": [{"followUp": "f1"}, {"followUp": "f2"}]}],
    responses=[text("One."), text("Two."), text("Three.")])
add("steer_and_follow_up_together", description="A steer and a follow-up queued together: the "
    "steer first, the follow-up when the agent would stop.",
    actions=[{"on": {"type": "message_end", "role": "assistant"},
              "do": [{"followUp": "later"}, {"steer": "now"}]}],
    responses=[text("One."), text("Two."), text("Three.")])
add("set_messages_between_runs", description="state.messages replaced between runs (a "
    "compacted transcript without a system message), then a prompt.",
    systemPrompt="Sys.", tools=[READ],
    steps=[{"prompt": "First"}, {"setMessages": [
        {"role": "user", "content": [{"type": "text", "text": "Summary of before"}]}]},
        {"prompt": "Second"}],
    responses=[text("1"), text("2")], entries=["agent"])
add("retry_after_error_by_dropping_it", description="A failed response is dropped from "
    "state.messages, then continue() retries from the user tail.",
    steps=[{"prompt": "Go"}, {"dropLastMessages": 1}, {"continue": True}],
    responses=[{"role": "assistant", "content": [], "stopReason": "error",
                "errorMessage": "overloaded"}, text("Second try.")], entries=["agent"])
add("clear_queues_between_runs", description="clear_all_queues() drops queued input.",
    steps=[{"prompt": "First"}, {"steer": "dropped"}, {"clearQueues": True}, {"continue": True}],
    responses=[text("1")], entries=["agent"])


def with_latches(scenario: dict[str, Any]) -> dict[str, Any]:
    """Give every parallel batch of two or more calls a finish order (source order by default).

    ``finishOrder`` is a list of groups: in a group the first call finishes once every call of
    the group has started, each later one once its predecessor's ``tool_execution_end`` was
    emitted. Without it, parallel tools would finish in whatever order the threads run.
    """
    order = scenario.get("finishOrder")
    if order and isinstance(order[0], str):
        order = [order]
    groups: list[list[str]] = list(order or [])
    sequential = {t["name"] for t in scenario.get("tools", []) if t.get("executionMode") == "sequential"}
    if scenario.get("config", {}).get("toolExecution", "parallel") == "parallel":
        for response in scenario.get("responses", []):
            ids = [b["id"] for b in response["content"] if b["type"] == "toolCall"]
            names = {b["name"] for b in response["content"] if b["type"] == "toolCall"}
            if (len(ids) >= 2 and response.get("stopReason") != "length" and not names & sequential
                    and not any(set(ids) & set(g) for g in groups)):
                groups.append(ids)
    if groups:
        scenario["finishOrder"] = groups
    return scenario


def with_stream_entry(scenario: dict[str, Any]) -> dict[str, Any]:
    """Also run under agent_loop when nothing in the scenario needs a barrier.

    agent_loop's stream does not hold the loop back, so actions taken on events and latches
    released by events would race; scenarios without them run there too.
    """
    entries = scenario.get("entries", ["agent", "run_loop"])
    eligible = (
        "run_loop" in entries and "agent_loop" not in entries and "agent" in entries
        and not scenario.get("actions") and not scenario.get("finishOrder")
        and not scenario.get("listenerThrows") and not scenario.get("timedStream")
        and len(scenario.get("steps", [])) == 1)
    if eligible:
        scenario["entries"] = [*entries, "agent_loop"]
    return scenario


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.json"):
        old.unlink()
    names = set()
    for scenario in SCENARIOS:
        assert scenario["name"] not in names, scenario["name"]
        names.add(scenario["name"])
        (OUT / f"{scenario['name']}.json").write_text(
            json.dumps(with_stream_entry(with_latches(scenario)), indent=1) + "\n")
    print(f"{len(SCENARIOS)} scenarios written to {OUT}")


if __name__ == "__main__":
    main()
