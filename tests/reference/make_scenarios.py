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
    differences=["validation-pi-schema"])
add("coercion_string_to_number", description='"5" for a number is converted to 5.',
    tools=[CALC], responses=[calls(("calc", {"a": "5", "b": 2}, "c1")), text("7")])
add("coercion_scalar_to_array", description='{"tags": "solo"} for an array of strings.',
    tools=[{"name": "tag", "parameters": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["tags"]}}],
    responses=[calls(("tag", {"tags": "solo"}, "c1")), text("ok")],
    differences=["validation-pi-schema"])
add("coercion_optional_null", description='{"limit": null} for an optional number.',
    tools=[{"name": "list", "parameters": {"type": "object", "properties": {
        "limit": {"type": "number"}, "dir": {"type": "string"}}, "required": ["dir"]}}],
    responses=[calls(("list", {"dir": "/", "limit": None}, "c1")), text("ok")])
add("coercion_required_null", description="null for a required number.",
    tools=[CALC], responses=[calls(("calc", {"a": None, "b": 2}, "c1")), text("ok")])
add("validation_enum_text", description="A value outside an enum: the error text the model reads.",
    tools=[{"name": "mode", "parameters": {"type": "object", "properties": {
        "m": {"type": "string", "enum": ["fast", "slow"]}}, "required": ["m"]}}],
    responses=[calls(("mode", {"m": "medium"}, "c1")), text("ok")],
    differences=["validation-pi-schema"])
add("validation_array_item_path", description="A wrong array item: the error path.",
    tools=[{"name": "nums", "parameters": {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "number"}}}, "required": ["a"]}}],
    responses=[calls(("nums", {"a": [1, "x"]}, "c1")), text("ok")],
    differences=["validation-pi-schema"])
add("validation_additional_properties", description="An unexpected property where "
    "additionalProperties is false.",
    tools=[{"name": "strict", "parameters": {"type": "object", "properties": {
        "a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}}],
    responses=[calls(("strict", {"a": "x", "extra": 1}, "c1")), text("ok")],
    differences=["validation-pi-schema"])
add("validation_nested_required", description="A nested object misses a required property.",
    tools=[{"name": "nested", "parameters": {"type": "object", "properties": {
        "opts": {"type": "object", "properties": {"depth": {"type": "integer"}},
                 "required": ["depth"]}}, "required": ["opts"]}}],
    responses=[calls(("nested", {"opts": {}}, "c1")), text("ok")],
    differences=["validation-pi-schema"])
_BAD_ARGS = calls(("read", {}, "c1"))
_BAD_ARGS["content"][0]["argumentsError"] = (
    "Expected ',' or '}' after property value in JSON at position 12\n\nReceived arguments:\n"
    '{"path": "a" "b"}')
add("validation_arguments_error", description="A tool call whose arguments text was no JSON "
    "object (argumentsError): the model reads pi-ai's \"Invalid arguments\" text.",
    tools=[READ], responses=[_BAD_ARGS, text("Sorry.")])
add("coercion_dangling_ref", description="A $ref naming nothing rejects only its own value "
    "(pi-ai 1.6.1); the other calls of the tool run.",
    tools=[{"name": "mcp", "parameters": {"type": "object", "properties": {
        "p": {"$ref": "#/$defs/Gone"}, "n": {"type": "integer"}}}}],
    responses=[calls(("mcp", {"n": "2"}, "c1"), ("mcp", {"p": 1}, "c2")), text("ok")],
    differences=["validation-pi-schema"])
add("coercion_through_ref_and_union", description="Arguments converted through a $ref and "
    "a union (pi-ai 1.6.1); an integer's fraction cut.",
    tools=[{"name": "edit", "parameters": {"type": "object", "$defs": {"E": {
        "type": "object", "properties": {"line": {"type": "integer"}}}}, "properties": {
        "edits": {"type": "array", "items": {"$ref": "#/$defs/E"}},
        "mode": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        "n": {"type": "integer"}}}}],
    responses=[calls(("edit", {"edits": {"line": "3"}, "mode": "fast", "n": 2.5}, "c1")),
               text("ok")],
    differences=["validation-pi-schema"])
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
    differences={"agent": ["agent-end-run-messages", "failed-run-names-its-type"],
                 "agent_loop": ["agent-loop-error-not-hang"]})
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
    differences=['agent-end-run-messages', 'failed-run-names-its-type'])

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
    differences=["abort-answers-every-call", "no-request-when-aborted", "no-hooks-after-abort"])
add("abort_sequential_rest_answered", description="Abort while the first of three sequential "
    "tools runs: the two not run yet are answered too (pi-agent-core 1.6.0, #9986).",
    hooks=OBSERVE, config={"toolExecution": "sequential"},
    tools=[tool(READ, default={"waitAbort": True})],
    actions=[{"on": {"type": "tool_execution_start", "toolCallId": "c1"}, "do": [{"abort": True}]}],
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {"path": "b"}, "c2"),
                     ("read", {"path": "c"}, "c3")), text("unused")],
    differences=["abort-answers-every-call", "no-request-when-aborted", "no-hooks-after-abort"])
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
    responses=[text("Hello.")], entries=["agent"],
    differences=["agent-end-run-messages", "failed-run-names-its-type"])
add("listener_throws_at_tool_end_sibling_running",
    description="A listener raises at one tool's end while its sibling still runs.",
    tools=[READ], finishOrder=["c2", "c1"],
    listenerThrows=[{"on": {"type": "tool_execution_end", "toolCallId": "c2"},
                     "message": "listener broke"}],
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {"path": "b"}, "c2")), text("unused")],
    entries=["agent"],
    differences=["results-kept-after-listener-failure", "agent-end-run-messages",
                 "failed-run-names-its-type"])
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
    timedStream=True, responses=[text("Timed.")])
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


# --- application messages (custom roles) through convert_to_llm -----------------------------
# pi: a custom role by declaration merging; piagent: a dataclass registered with
# register_message_type (the driver registers "appNote" and "bashExecution").

NOTE = {"role": "appNote", "text": "The user prefers short answers."}
BASH = {"role": "bashExecution", "command": "ls", "output": "a.txt b.txt", "exitCode": 0}
MAP_APPS = {"convertToLlm": {"*": {"mapRoles": ["appNote", "bashExecution"]}}}
IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
IMAGE2 = {"type": "image", "data": "R0lGODlhAQABAAAAACw=", "mimeType": "image/gif"}
TAG = {"name": "tag", "description": "Tag things", "parameters": {
    "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["tags"]}}


def earlier(*extra: Json) -> list[Json]:
    """A short earlier conversation (user, assistant), then ``extra`` messages."""
    return [{"role": "user", "content": [{"type": "text", "text": "Earlier question"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Earlier answer"}],
             "api": "scripted", "provider": "scripted", "model": "scripted",
             "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0,
                       "totalTokens": 2, "cost": {"input": 0, "output": 0, "cacheRead": 0,
                                                  "cacheWrite": 0, "total": 0}},
             "stopReason": "stop"}, *extra]


add("app_message_in_transcript_dropped", description="An application message in the "
    "transcript: convert_to_llm's default filter leaves it out of the request.",
    messages=earlier(NOTE), hooks={"convertToLlm": {}}, responses=[text("ok")])
add("app_message_mapped_to_user", description="convert_to_llm maps application messages "
    "(note, bashExecution) to user messages; the transcript keeps them as they are.",
    messages=earlier(NOTE, BASH), hooks=MAP_APPS, responses=[text("ok")])
add("app_message_default_convert_agent", description="The Agent's own default convert_to_llm "
    "(none given) drops application messages.", defaultConvert=True,
    messages=earlier(NOTE, BASH), responses=[text("ok")], entries=["agent"])
add("app_message_prompted", description="prompt() with an application message.",
    steps=[{"prompt": NOTE}], hooks=MAP_APPS, responses=[text("Noted.")])
add("app_message_prompt_list", description="prompt() with a list: a user message and an "
    "application message.",
    steps=[{"prompt": [{"role": "user", "content": [{"type": "text", "text": "Run it"}]}, BASH]}],
    hooks=MAP_APPS, responses=[text("Ran.")])
add("app_message_steered", description="An application message steered while a tool runs.",
    tools=[READ], hooks=MAP_APPS,
    actions=[{"on": {"type": "tool_execution_start"}, "do": [{"steer": NOTE}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("app_message_follow_up", description="An application message as a follow-up.",
    hooks=MAP_APPS,
    actions=[{"on": {"type": "message_end", "role": "assistant"}, "do": [{"followUp": BASH}]}],
    responses=[text("One."), text("Two.")])
add("app_message_from_prepare_next_turn", description="prepare_next_turn adds an application "
    "message to the next turn.", tools=[READ],
    hooks={**MAP_APPS, "prepareNextTurn": {"1": {"messages": [NOTE]}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("app_message_from_transform_context", description="transform_context appends an "
    "application message to the request only; convert_to_llm maps it.",
    hooks={**MAP_APPS, "transformContext": {"*": {"append": NOTE}}}, responses=[text("ok")])
add("app_message_continue_from_app_tail", description="continue() with an application message "
    "at the end of the transcript.", messages=earlier(NOTE), hooks=MAP_APPS,
    steps=[{"continue": True}], responses=[text("Answer.")],
    entries=["agent", "run_loop", "agent_loop"],
    differences={"run_loop": ["caller-list-not-mutated"],
                 "agent_loop": ["caller-list-not-mutated"]})
add("app_message_map_one_drop_other", description="convert_to_llm maps one application role "
    "and drops the other.", messages=earlier(NOTE, BASH),
    hooks={"convertToLlm": {"*": {"mapRoles": ["appNote"], "dropRoles": ["bashExecution"]}}},
    responses=[text("ok")])

# --- images in tool results -----------------------------------------------------------------

add("tool_image_only_result", description="A tool result whose content is one image.",
    tools=[tool(READ, default={"content": [IMAGE]})],
    responses=[calls(("read", {"path": "p.png"}, "c1")), text("An image.")])
add("tool_image_in_updates", description="A tool streams partial results carrying images.",
    tools=[tool(READ, default={"updates": [
        {"content": [{"type": "text", "text": "frame 1"}, IMAGE], "details": {"f": 1}},
        {"content": [IMAGE2], "details": {"f": 2}}],
        "content": [IMAGE, IMAGE2]})],
    responses=[calls(("read", {"path": "v.gif"}, "c1")), text("Two frames.")])
add("tool_images_parallel", description="Two parallel calls, each returning its own image.",
    tools=[tool(READ, results={"c1": {"content": [IMAGE]},
                               "c2": {"content": [{"type": "text", "text": "gif"}, IMAGE2]}})],
    responses=[calls(("read", {"path": "a.png"}, "c1"), ("read", {"path": "b.gif"}, "c2")),
               text("Both.")])
add("continue_from_tool_result_with_image", description="continue() from a tool result "
    "carrying an image (a transcript saved mid-turn).", tools=[READ],
    messages=earlier({"role": "assistant", "content": [
        {"type": "toolCall", "id": "c0", "name": "read", "arguments": {"path": "p.png"}}],
        "api": "scripted", "provider": "scripted", "model": "scripted", "stopReason": "toolUse",
        "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                  "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                           "total": 0}}},
        {"role": "toolResult", "toolCallId": "c0", "toolName": "read",
         "content": [{"type": "text", "text": "see"}, IMAGE], "details": {}, "isError": False}),
    steps=[{"continue": True}], responses=[text("A pixel.")], entries=["agent"])
add("after_replaces_with_image", description="after_tool_call replaces the content with text "
    "and an image.", tools=[READ],
    hooks={"afterToolCall": [{"content": [{"type": "text", "text": "rendered"}, IMAGE]}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("steer_with_image", description="A steered user message with an image while a tool runs.",
    tools=[READ],
    actions=[{"on": {"type": "tool_execution_start"}, "do": [{"steer": {
        "role": "user", "content": [{"type": "text", "text": "Also this:"}, IMAGE]}}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])

# --- redacted thinking ----------------------------------------------------------------------

REDACTED = {"type": "thinking", "thinking": "[Reasoning redacted]",
            "thinkingSignature": "EqQBCkgIARABGAIiQL", "redacted": True}
add("redacted_thinking_before_tool_call", description="Redacted thinking before a tool call: "
    "the next request replays the block with its signature.", tools=[READ],
    responses=[{"role": "assistant", "content": [
        REDACTED, {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a"}}],
        "stopReason": "toolUse"}, text("ok")])
add("redacted_thinking_in_transcript", description="An earlier assistant message with "
    "redacted thinking is sent back as it was.",
    messages=[{"role": "user", "content": [{"type": "text", "text": "Q"}]},
              {"role": "assistant", "content": [REDACTED, {"type": "text", "text": "A"}],
               "api": "scripted", "provider": "scripted", "model": "scripted",
               "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0,
                         "totalTokens": 2, "cost": {"input": 0, "output": 0, "cacheRead": 0,
                                                    "cacheWrite": 0, "total": 0}},
               "stopReason": "stop"}],
    responses=[text("ok")])
add("redacted_thinking_error_stop", description="Redacted thinking, some text, then an error.",
    responses=[{"role": "assistant", "content": [REDACTED, {"type": "text", "text": "Part"}],
                "stopReason": "error", "errorMessage": "Overloaded"}])
add("redacted_thinking_only", description="A response that is only a redacted thinking block.",
    responses=[{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "", "thinkingSignature": "opaque-2", "redacted": True}],
        "stopReason": "stop"}], entries=["agent", "run_loop", "agent_loop"])

# --- an error stop in the middle of a tool call's arguments ---------------------------------

add("stop_error_mid_tool_arguments", description="The stream fails inside a tool call's "
    "arguments: no toolcall_end, no tool runs, the run ends with the error.", tools=[READ],
    hooks={"finishTurn": {}}, cutToolCall={"1": '{"path": "/tmp/very/long/na'},
    responses=[calls(("read", {"path": "/tmp/very/long/na"}, "c1"), stop="error",
                     lead="Reading.") | {"errorMessage": "Connection reset"}])
add("stop_error_mid_second_tool_call", description="The first call is complete, the second "
    "is cut: neither runs.", tools=[READ], cutToolCall={"1": '{"pa'},
    responses=[calls(("read", {"path": "a"}, "c1"), ("read", {}, "c2"), stop="error")
               | {"errorMessage": "Upstream 502"}])
add("stop_aborted_mid_tool_arguments", description="The provider reports aborted inside a tool "
    "call's arguments.", tools=[READ], cutToolCall={"1": '{"path": "a'},
    responses=[calls(("read", {"path": "a"}, "c1"), stop="aborted")
               | {"errorMessage": "Request was aborted"}])
add("stop_error_mid_tool_arguments_follow_up_queued", description="A follow-up queued while "
    "the arguments stream; the error ends the run and the follow-up stays queued.",
    tools=[READ], cutToolCall={"1": '{"path": "a'},
    actions=[{"on": {"type": "message_update", "event": "toolcall_start"},
              "do": [{"followUp": "later"}]}],
    responses=[calls(("read", {"path": "a"}, "c1"), stop="error")
               | {"errorMessage": "Connection reset"}])
add("retry_after_cut_tool_call", description="The cut response is dropped and continue() "
    "retries: the full call runs.", tools=[READ], cutToolCall={"1": '{"path": "a'},
    steps=[{"prompt": "Go"}, {"dropLastMessages": 1}, {"continue": True}],
    responses=[calls(("read", {"path": "a"}, "c1"), stop="error")
               | {"errorMessage": "Connection reset"},
               calls(("read", {"path": "a"}, "c2")), text("Read.")], entries=["agent"])

# --- queues under abort and under finish_turn -----------------------------------------------

for mode in ("one-at-a-time", "all"):
    slug = mode.replace("-", "_")
    add(f"abort_queued_steers_{slug}", description=f"Two steers queued ({mode}), then the run "
        "aborts in a tool.", hooks=OBSERVE, config={"steeringMode": mode},
        tools=[tool(READ, default={"waitAbort": True})],
        actions=[{"on": {"type": "tool_execution_start"},
                  "do": [{"steer": "s1"}, {"steer": "s2"}, {"abort": True}]}],
        responses=[calls(("read", {"path": "a"}, "c1")), text("unused")],
        differences=["no-request-when-aborted", "no-hooks-after-abort", "queued-input-kept"],
        keptOnAbort=["s1"] if mode == "one-at-a-time" else ["s1", "s2"])
    add(f"abort_queued_follow_ups_{slug}", description=f"Two follow-ups queued ({mode}), then "
        "the run aborts in a tool: neither side polls them.", config={"followUpMode": mode},
        tools=[tool(READ, default={"waitAbort": True})],
        actions=[{"on": {"type": "tool_execution_start"},
                  "do": [{"followUp": "f1"}, {"followUp": "f2"}, {"abort": True}]}],
        responses=[calls(("read", {"path": "a"}, "c1")), text("unused")],
        differences=["no-request-when-aborted"])
    add(f"abort_text_stream_queued_steers_{slug}", description=f"Two steers queued ({mode}) "
        "at message_start, abort at the first text delta.", config={"steeringMode": mode},
        actions=[{"on": {"type": "message_start", "role": "assistant"},
                  "do": [{"steer": "s1"}, {"steer": "s2"}]},
                 {"on": {"type": "message_update", "event": "text_delta"},
                  "do": [{"abort": True}]}],
        responses=[text("A long answer that will be cut.")])
    add(f"abort_text_stream_queued_follow_ups_{slug}", description=f"Two follow-ups queued "
        f"({mode}), abort at the first text delta.", config={"followUpMode": mode},
        actions=[{"on": {"type": "message_start", "role": "assistant"},
                  "do": [{"followUp": "f1"}, {"followUp": "f2"}]},
                 {"on": {"type": "message_update", "event": "text_delta"},
                  "do": [{"abort": True}]}],
        responses=[text("A long answer that will be cut.")])
    add(f"finish_turn_end_queued_steers_{slug}", description=f"finish_turn 'end' with two "
        f"steers queued ({mode}): they stay queued.", config={"steeringMode": mode},
        hooks={"finishTurn": {"1": "end"}},
        actions=[{"on": {"type": "message_end", "role": "assistant"},
                  "do": [{"steer": "s1"}, {"steer": "s2"}]}],
        responses=[text("One."), text("unused")])
    add(f"finish_turn_end_queued_follow_ups_{slug}", description=f"finish_turn 'end' after a "
        f"tool turn with two follow-ups queued ({mode}).", config={"followUpMode": mode},
        tools=[READ], hooks={"finishTurn": {"1": "end"}},
        actions=[{"on": {"type": "tool_execution_start"},
                  "do": [{"followUp": "f1"}, {"followUp": "f2"}]}],
        responses=[calls(("read", {"path": "a"}, "c1")), text("unused")])
    add(f"finish_turn_continue_queued_steers_{slug}", description=f"finish_turn 'continue' "
        f"with two steers queued ({mode}): the steering turn satisfies it.",
        config={"steeringMode": mode}, hooks={"finishTurn": {"1": "continue"}},
        actions=[{"on": {"type": "message_end", "role": "assistant"},
                  "do": [{"steer": "s1"}, {"steer": "s2"}]}],
        responses=[text("One."), text("Two."), text("Three.")])
    add(f"finish_turn_continue_queued_follow_ups_{slug}", description=f"finish_turn "
        f"'continue' with two follow-ups queued ({mode}).", config={"followUpMode": mode},
        hooks={"finishTurn": {"1": "continue"}},
        actions=[{"on": {"type": "message_end", "role": "assistant"},
                  "do": [{"followUp": "f1"}, {"followUp": "f2"}]}],
        responses=[text("One."), text("Two."), text("Three.")])

# --- tool-set changes while input is queued -------------------------------------------------

add("set_tools_with_queued_steer_then_continue", description="A steer queued between runs, "
    "the tool set changed, then continue(): the change is declared before the steer.",
    systemPrompt="Sys.", tools=[READ, tool(CALC, hidden=True)],
    steps=[{"prompt": "First"}, {"steer": "Use calc now"}, {"setTools": ["read", "calc"]},
           {"continue": True}],
    responses=[text("1"), text("2")], entries=["agent"])
add("set_tools_with_queued_follow_up_then_continue", description="A follow-up queued, the tool "
    "set changed, then continue().", systemPrompt="Sys.", tools=[READ, tool(CALC, hidden=True)],
    steps=[{"prompt": "First"}, {"followUp": "Later, with calc"}, {"setTools": ["calc"]},
           {"continue": True}],
    responses=[text("1"), text("2")], entries=["agent"])
add("set_tools_during_run_with_queued_steer", description="A listener assigns state.tools and "
    "steers while a tool runs: the steer goes out with the old tools, the next run has the "
    "new ones.", tools=[READ, tool(CALC, hidden=True)],
    actions=[{"on": {"type": "tool_execution_start"},
              "do": [{"setTools": ["calc"]}, {"steer": "now"}]}],
    steps=[{"prompt": "First"}, {"prompt": "Second"}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("1"), text("2")], entries=["agent"])
add("prepare_next_turn_tools_with_queued_steer", description="prepare_next_turn swaps the "
    "tools while a steer is queued: the declaring system message comes before the steer.",
    tools=[READ, tool(WRITE, hidden=True)], hooks={"prepareNextTurn": {"1": {"tools": ["write"]}}},
    actions=[{"on": {"type": "turn_end"}, "do": [{"steer": "write it"}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("prepare_next_turn_system_and_tools_with_queued_steer", description="prepare_next_turn "
    "adds a system message and swaps the tools while a steer is queued: the pending system "
    "message carries the tool change.", tools=[READ, tool(WRITE, hidden=True)],
    hooks={"prepareNextTurn": {"1": {"tools": ["write"], "messages": [
        {"role": "system", "content": "Now write only."}]}}},
    actions=[{"on": {"type": "turn_end"}, "do": [{"steer": "write it"}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("queued_steer_with_undeclared_tools", description="The transcript declares read; the tool "
    "set is read and calc; a steer is queued before the run.",
    messages=[{"role": "system", "content": "Base.", "toolsAdded": [
        {"name": "read", "description": "Read a file", "parameters": READ["parameters"]}]}],
    tools=[READ, CALC], queued={"steering": ["early steer"]}, responses=[text("ok")])
add("prepare_request_tools_with_queued_steer", description="prepare_request removes the tools "
    "for request 1; a steer queued at turn_end makes turn 2.", tools=[READ],
    hooks={"prepareRequest": {"1": {"tools": []}}},
    actions=[{"on": {"type": "turn_end"}, "do": [{"steer": "and now?"}]}],
    responses=[text("1"), text("2")])

# --- hooks that replace a list versus edit it in place --------------------------------------

add("transform_context_append_in_place", description="transform_context appends to the list "
    "it received (the context's own) and returns it: the message stays for later turns.",
    tools=[READ], hooks={"transformContext": {"1": {"appendInPlace": "(reminder)"}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("transform_context_drop_system_in_place", description="transform_context removes the "
    "system message from its list in place at request 2; request 3 follows.", tools=[READ],
    hooks={"transformContext": {"2": {"dropRolesInPlace": ["system"]}}},
    responses=[calls(("read", {"path": "a"}, "c1")), calls(("read", {"path": "b"}, "c2")),
               text("ok")])
add("transform_context_drop_system_replace", description="transform_context returns a new "
    "list without the system message at request 2 only.", tools=[READ],
    hooks={"transformContext": {"2": {"dropRoles": ["system"]}}},
    responses=[calls(("read", {"path": "a"}, "c1")), calls(("read", {"path": "b"}, "c2")),
               text("ok")])
add("transform_context_edit_results_replace", description="transform_context returns copies "
    "of the tool results with their images replaced; the transcript keeps the images.",
    tools=[tool(READ, default={"content": [IMAGE]})],
    hooks={"transformContext": {"*": {"editToolResults": "[image omitted]"}}},
    responses=[calls(("read", {"path": "a.png"}, "c1")), text("ok")])
add("transform_context_edit_results_in_place", description="transform_context edits the tool "
    "results' content lists in place (dropping their images).",
    tools=[tool(READ, default={"content": [IMAGE]})],
    hooks={"transformContext": {"*": {"editToolResultsInPlace": "[image omitted]"}}},
    responses=[calls(("read", {"path": "a.png"}, "c1")), text("ok")])
add("transform_context_clear_tools_in_place", description="transform_context deletes the "
    "first system message's tool declarations, editing the message object: the next turn "
    "must declare the tools again.", tools=[READ],
    hooks={"transformContext": {"1": {"clearToolsInPlace": True}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("prepare_next_turn_clear_tools_in_place", description="prepare_next_turn deletes the "
    "first system message's tool declarations in place before turn 2.", tools=[READ],
    hooks={"prepareNextTurn": {"1": {"clearToolsInPlace": True}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("prepare_request_clear_tools_in_place", description="prepare_request deletes the first "
    "system message's tool declarations in place before request 1.", tools=[READ],
    hooks={"prepareRequest": {"1": {"clearToolsInPlace": True}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("convert_to_llm_drop_in_place", description="convert_to_llm removes the system message "
    "from the list it received, in place, at request 1.", systemPrompt="Sys.", tools=[READ],
    hooks={"convertToLlm": {"1": {"dropRolesInPlace": ["system"]}}},
    responses=[calls(("read", {"path": "a"}, "c1")), calls(("read", {"path": "b"}, "c2")),
               text("ok")])
add("prepare_next_turn_append_in_place", description="prepare_next_turn appends to "
    "context.messages in place instead of returning messages.", tools=[READ],
    hooks={"prepareNextTurn": {"1": {"appendInPlace": "Note: be brief"}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("Brief.")])
add("prepare_next_turn_tools_in_place", description="prepare_next_turn replaces the contents "
    "of context.tools in place (read -> write) and returns nothing.",
    tools=[READ, tool(WRITE, hidden=True)],
    hooks={"prepareNextTurn": {"1": {"toolsInPlace": ["write"]}}},
    responses=[calls(("read", {"path": "a"}, "c1")),
               calls(("write", {"path": "b", "text": "t"}, "c2")), text("Done.")])
add("prepare_next_turn_tools_in_place_same_last", description="prepare_next_turn edits "
    "context.tools in place keeping its length and last element (read, calc -> write, calc).",
    tools=[READ, CALC, tool(WRITE, hidden=True)],
    hooks={"prepareNextTurn": {"1": {"toolsInPlace": ["write", "calc"]}}},
    responses=[calls(("read", {"path": "a"}, "c1")),
               calls(("write", {"path": "b", "text": "t"}, "c2")), text("Done.")])
add("prepare_request_drop_last_in_place", description="prepare_request deletes the last "
    "message from context.messages in place at request 2.", tools=[READ],
    hooks={"prepareRequest": {"2": {"dropLastInPlace": 1}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("prepare_request_tools_in_place", description="prepare_request empties context.tools in "
    "place at request 2; a steer makes request 3.", tools=[READ],
    hooks={"prepareRequest": {"2": {"toolsInPlace": []}}},
    actions=[{"on": {"type": "turn_end"}, "nth": 2, "do": [{"steer": "again"}]}],
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok"), text("again ok")])
add("finish_turn_edit_results_in_place", description="finish_turn edits the turn's tool "
    "results in place (their content lists).", tools=[READ],
    hooks={"finishTurn": {"1": {"editToolResultsInPlace": "[compacted]"}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("finish_turn_append_in_place", description="finish_turn appends to the turn's "
    "context.messages in place.", tools=[READ],
    hooks={"finishTurn": {"1": {"appendInPlace": "(finish note)"}}},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("after_append_content_in_place", description="after_tool_call appends an image to the "
    "result's content list in place and returns nothing.", tools=[READ],
    hooks={"afterToolCall": [{"appendContentInPlace": [IMAGE]}]},
    responses=[calls(("read", {"path": "a"}, "c1")), text("ok")])
add("before_append_arg_in_place", description="before_tool_call appends to a list argument in "
    "place: the tool sees it; what does the transcript's tool call keep?", tools=[TAG],
    hooks={"beforeToolCall": [{"appendArgInPlace": {"tags": ["checked"]}}]},
    responses=[calls(("tag", {"tags": ["solo"]}, "c1")), text("ok")])

# --- prompt(message, images) ----------------------------------------------------------------

add("prompt_message_with_images_refused", description="prompt(message, images) and "
    "prompt([message], images): pi drops the images and runs; piagent refuses with TypeError.",
    steps=[{"prompt": "Plain"},
           {"prompt": {"role": "user", "content": [{"type": "text", "text": "What is this?"}]},
            "images": [IMAGE]},
           {"prompt": [{"role": "user", "content": [{"type": "text", "text": "And this?"}]}],
            "images": [IMAGE2]}],
    responses=[text("Seen."), text("unused"), text("unused")], entries=["agent"],
    differences=["prompt-images-refused"])

# --- the front door's checks (issue 27) -------------------------------------------------------

add("duplicate_tool_names_refused", description="state.tools assigned two tools named 'read': "
    "pi takes both (the model is offered the last, a call runs the first); piagent refuses "
    "with ValueError.",
    tools=[READ], steps=[{"prompt": "First"}, {"setTools": ["read", "read"]}],
    responses=[text("Done.")], entries=["agent"], differences=["duplicate-tool-names-refused"])
add("temperature_out_of_range_refused", description="AgentLoopConfig(temperature=7): pi sends "
    "it (the provider refuses it, or worse, takes it); piagent refuses with ValueError before "
    "the loop starts.", config={"temperature": 7}, responses=[text("unused")],
    entries=["run_loop"], differences=["option-values-checked"])

# --- approvals (an addition: pi has none) ---------------------------------------------------

GUARDED = {"name": "write", "description": "Write a file",
           "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                          "required": ["path"]}}
add("approval_not_asked", description="A tool whose needs_approval function says no, called "
    "twice in a parallel batch: exactly pi's run (no event, no state of its own).",
    tools=[tool(GUARDED, needsApproval="never")],
    responses=[calls(("write", {"path": "a"}, "c1"), ("write", {"path": "b"}, "c2")),
               text("Written.")])
add("approval_asked_then_approved", description="A call waits for approval: piagent's run ends "
    "after tool_approval_request; approve() goes on with the call (its start again), as pi's "
    "one run does.", tools=[tool(GUARDED, needsApproval=True)],
    steps=[{"prompt": "Go"}, {"approve": "c1"}], entries=["agent"],
    responses=[calls(("write", {"path": "a"}, "c1")), text("Written.")],
    differences=["approval-waits"])


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
    # a hook editing message objects in place changes what a reader behind the loop sees
    hooks = json.dumps(scenario.get("hooks", {}))
    edits_shared = "editToolResultsInPlace" in hooks or "clearToolsInPlace" in hooks
    eligible = (
        not edits_shared and "run_loop" in entries and "agent_loop" not in entries and "agent" in entries
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
