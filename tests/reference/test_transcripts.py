"""Transcripts both ways between pi-agent-core (1.6.0, the reference, and 1.4.0) and piagent.

pi → piagent: every message pi writes (a real Agent run, and one message of every kind and
field pi-ai 1.4.0 declares; ``pi_transcript.mjs``) loads with ``message_from_dict`` and dumps
back to exactly the same JSON. piagent → pi: transcripts piagent writes (an Agent run, and
one message of every kind built from piagent's dataclasses) are given to pi's ``Agent`` and
loop as their transcript, and the next request each side makes — the messages the stream
function receives, the replayed system prompt and tools — is the same.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from piagent import (
    AssistantMessage,
    Cost,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    Usage,
    UserMessage,
    message_from_dict,
    message_to_dict,
    messages_from_json,
    messages_to_json,
)

from .conftest import HERE, Pi, load_scenario
from .piagent_driver import run_scenario
from .ref_normalise import first_difference, normalise, scrub

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

@pytest.fixture(scope="session")
def pi_transcripts(pi: Pi) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(pi.run("pi_transcript.mjs"))
    return data


def _case_names() -> list[str]:
    names = ["system_prompt", "system_sections_and_tool_changes", "system_text_blocks",
             "system_constrained_sampling", "user_string", "user_text_and_image",
             "assistant_every_block", "assistant_pi_1_4_fields", "assistant_usage_extras",
             "assistant_tool_call_extras", "assistant_error", "assistant_aborted",
             "assistant_deferred", "tool_result_full", "tool_result_error",
             "tool_result_nested_calls", "tool_result_no_details_legacy",
             "tool_result_explicit_null_details", "assistant_explicit_false",
             "assistant_future_field"]
    return names


def _round_trip(message: dict[str, Any]) -> dict[str, Any]:
    return message_to_dict(message_from_dict(json.loads(json.dumps(message))))


@pytest.mark.parametrize("name", _case_names())
def test_pi_message_round_trips(name: str, pi_transcripts: dict[str, Any]) -> None:
    original = pi_transcripts["cases"][name]
    try:
        back = _round_trip(original)
    except Exception as exc:  # a message pi writes must load
        pytest.fail(f"piagent cannot load pi's {name}: {type(exc).__name__}: {exc}")
    assert back == original, first_difference({"m": original}, {"m": back})


def test_pi_agent_run_round_trips(pi_transcripts: dict[str, Any]) -> None:
    run = pi_transcripts["run"]
    assert all("durationMs" in m for m in run if m["role"] == "assistant")  # pi timed them
    back = json.loads(messages_to_json(messages_from_json(json.dumps(run))))
    assert back == run, first_difference({"m": run}, {"m": back})


# --- piagent → pi ----------------------------------------------------------------------

def _usage() -> Usage:
    return Usage(input=120, output=30, cache_read=10, cache_write=5, total_tokens=165,
                 cost=Cost(input=0.00036, output=0.00045, cache_read=0.000003,
                           cache_write=0.00001875, total=0.00082175))


def _piagent_built() -> list[Any]:
    read = ToolDeclaration("read", "Read a file", {"type": "object", "properties": {
        "path": {"type": "string"}}, "required": ["path"]})
    return [
        SystemMessage(content="You read files.", tools_added=[read], timestamp=0),
        UserMessage(content=[TextContent("Look"), ImageContent(PNG, "image/png")],
                    timestamp=1700000000001),
        AssistantMessage(content=[ThinkingContent("Hmm.", "sig-t"),
                                  ThinkingContent("", "opaque", redacted=True),
                                  TextContent("Reading.", "sig-x"),
                                  ToolCall("call_1", "read", {"path": "a"}, "sig-c")],
                         api="anthropic-messages", provider="anthropic", model="claude-x",
                         usage=_usage(), stop_reason="toolUse", thinking_level="high",
                         timestamp=1700000000002),
        ToolResultMessage("call_1", "read", [TextContent("hi"), ImageContent(PNG, "image/png")],
                          details={"bytes": 2}, usage=_usage(), is_error=False, duration_ms=4,
                          timestamp=1700000000003),
        SystemMessage(content="", sections={"style": "terse"}, tools_removed=["read"],
                      tools_added=[ToolDeclaration("write", "Write", {"type": "object"})],
                      timestamp=1700000000004),
        AssistantMessage(content=[TextContent("Failed")], api="openai-completions",
                         provider="openai", model="gpt-x", usage=_usage(), stop_reason="error",
                         error_message="429 Too Many Requests", timestamp=1700000000005),
        UserMessage(content="Try again", timestamp=1700000000006),
    ]


def _replay_scenarios() -> dict[str, dict[str, Any]]:
    seed = load_scenario(HERE / "scenarios" / "seed_trace_steer_during_tools.json")
    run = run_scenario(seed, "agent")["transcript"]
    built = json.loads(messages_to_json(_piagent_built()))
    assert built[4]["toolsRemoved"] == [{"name": "read"}]
    reply = {"role": "assistant", "content": [{"type": "text", "text": "Next."}],
             "stopReason": "stop"}
    return {
        name: {"name": name, "messages": messages, "tools": [],
               "steps": [{"prompt": "And now?"}], "responses": [reply],
               "entries": ["agent", "run_loop"]}
        for name, messages in (("replay_piagent_agent_run", run),
                               ("replay_piagent_built_messages", built))
    }


@pytest.fixture(scope="session")
def replay_outputs(pi: Pi, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("replay")
    files = []
    for name, scenario in _replay_scenarios().items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(scenario))
        files.append(str(path))
    outputs: dict[str, Any] = json.loads(pi.run("pi_driver.mjs", *files))
    return outputs


@pytest.mark.parametrize("entry", ["agent", "run_loop"])
@pytest.mark.parametrize("name", ["replay_piagent_agent_run", "replay_piagent_built_messages"])
def test_piagent_transcript_replays_in_pi(name: str, entry: str,
                                          replay_outputs: dict[str, Any]) -> None:
    scenario = _replay_scenarios()[name]
    pi = normalise(replay_outputs[name][entry], entry)
    ours = normalise(run_scenario(scenario, entry), entry)
    request = next(e for e in pi["log"] if e.get("kind") == "request")
    transcript = scrub(scenario["messages"])
    assert request["messages"][:len(transcript)] == transcript, \
        "pi does not send piagent's transcript as written"
    difference = first_difference(pi, ours)
    assert difference is None, difference
