"""The conversations of the request differential: the same JSON drives pi (``pi_request_driver
.mjs``) and piagent (``request_driver.py``).

A conversation: ``system`` (the initial prompt), ``tools`` (names from the drivers' tool
table: ``weather``, ``noargs``, ``fail``, ``image``, ``lookup``, ``defs``, ``titled``),
``constrained`` (every tool's JSON-schema constrained sampling, pi's ``constrainedSampling``), ``thinking``
(the level),
``model`` (``"plain"``, ``"reasoning"`` or ``"outside"``: a model the catalogue does not list),
``compat`` (entries added to the model's compat on both sides),
``session`` (the agent's session id), ``retention`` (the requests' cache retention:
``"long"`` or ``"none"``),
``transform`` (a ``transform_context`` that edits old tool results in place: ``"mutate"`` the
content list's block or ``"reassign"`` the content list), ``payload`` (``"mark"``: an
``on_payload`` that edits the body in place), ``apis`` (default all four), ``script`` (the
capture server's replies, ``request_capture``) and ``steps``:

* ``{"prompt": text, "images": n}``: a user message (with ``n`` tiny PNGs), run to the end;
  ``"steer"`` queues a steering message at the first ``tool_execution_end``; ``"abort"``
  aborts at the first text delta;
* ``{"continue": true}``, ``{"follow_up": text}`` (queued, then ``continue``);
* ``{"system": text}``: a system message appended to ``state.messages``;
* ``{"set_tools": [names]}``, ``{"thinking": level}``;
* ``{"edit": kind}`` between prompts, on ``state.messages``: ``"mutate"`` (the first tool
  result's first block's text), ``"reassign"`` (its content list), ``"replace"`` (a new
  ``state.messages`` list with an edited copy), ``"delete"`` (the first user message deleted
  in place, with the assistant reply after it);
* ``{"append": [messages]}``: messages in pi's JSON form appended to ``state.messages`` (a
  history from another model or with ids the capture server does not give).

``xfail``: the APIs on which a conversation is known to fail (strict, so a fix shows as
XPASS). None now: the in-place edits (issue 44 cause 1) reach every request.
"""

from __future__ import annotations

import json
from typing import Any

APIS = ("openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai")
IN_PLACE = "cache: issue 44 cause 1"

SESSION = "session-" + "0123456789" * 8  # 88 characters: the cache key keeps 64
W = {"calls": [["weather", {"city": "Paris"}]]}
W2 = {"calls": [["weather", {"city": "Paris"}], ["weather", {"city": "Rome"}]]}
T = {"text": "Done."}


def _c(name: str, steps: list[Any], script: list[Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "steps": steps, "script": script, "system": extra.pop("system", "Be brief."),
            "tools": extra.pop("tools", ["weather"]), **extra}


def _p(text: str, **extra: Any) -> dict[str, Any]:
    return {"prompt": text, **extra}


def _a(content: list[Any], model: str = "gpt-4.1", provider: str = "openai",
       api: str = "openai-responses", stop: str = "stop") -> dict[str, Any]:
    """An assistant message in pi's JSON form (for an ``append`` step)."""
    zero = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
    return {"role": "assistant", "content": content, "api": api, "provider": provider,
            "model": model, "usage": {**zero, "totalTokens": 0, "cost": {**zero, "total": 0}},
            "stopReason": stop, "timestamp": 1700000000000}


def _u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}],
            "timestamp": 1700000000000}


def _r(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": call_id, "toolName": "weather",
            "content": [{"type": "text", "text": text}], "isError": False,
            "timestamp": 1700000000000}


LONG_ID = "msg_" + "x" * 70  # over the 64 characters an item id may have
_RESPONSES = ["openai-responses"]


def conversations() -> list[dict[str, Any]]:
    long_script = [{"calls": [["lookup", {"n": i}]]} for i in range(199)] + [T]
    convs = [
        _c("text-only", [_p("Hi")], [{"text": "Hello."}]),
        _c("no-system-no-tools", [_p("Hi")], [{"text": "Hello."}], system="", tools=[]),
        _c("two-prompts", [_p("Hi"), _p("Again")], [{"text": "One."}, {"text": "Two."}]),
        _c("one-tool-call", [_p("Weather?")], [W, T]),
        _c("parallel-tool-calls", [_p("Weather twice?")], [W2, T]),
        _c("text-and-tool-call", [_p("Weather?")],
           [{"text": "Let me look.", "calls": [["weather", {"city": "Oslo"}]]}, T]),
        _c("no-args-tool", [_p("Ping")], [{"calls": [["noargs", {}]]}, T],
           tools=["weather", "noargs"]),
        _c("error-tool-result", [_p("Fail")], [{"calls": [["fail", {}]]}, T],
           tools=["fail"]),
        _c("unknown-tool", [_p("Call it")], [{"calls": [["missing", {}]]}, T]),
        _c("bad-arguments", [_p("Call it")], [{"calls": [["weather", {"town": 3}]]}, T]),
        _c("nested-arguments", [_p("Look")],
           [{"calls": [["lookup", {"n": 1, "tags": ["a", "b"], "opts": {"deep": True}}]]}, T],
           tools=["lookup"]),
        _c("schema-with-defs", [_p("Go")], [{"calls": [["defs", {"p": {"x": 1}}]]}, T],
           tools=["defs"]),
        _c("unicode", [_p("Grüße 日本 🙂 \"quoted\" \\ back")], [{"text": "Ça va ✓"}]),
        _c("image-in-user", [_p("What is this?", images=1)], [{"text": "A dot."}]),
        _c("two-images-in-user", [_p("Compare", images=2)], [{"text": "Same."}]),
        _c("image-in-tool-result", [_p("Show me")], [{"calls": [["image", {}]]}, T],
           tools=["image"]),
        _c("system-changed", [_p("Hi"), {"system": "Now answer in French."}, _p("Again")],
           [{"text": "One."}, {"text": "Deux."}]),
        _c("system-changed-twice", [_p("Hi"), {"system": "Rule A."}, _p("Two"),
                                    {"system": "Rule B."}, _p("Three")],
           [{"text": "1"}, {"text": "2"}, {"text": "3"}]),
        _c("system-changed-mid-convo-compat", [_p("Hi"), {"system": "Now in French."},
                                               _p("Again"), {"set_tools": ["noargs"]},
                                               _p("Ping")],
           [{"text": "1"}, {"text": "2"}, {"calls": [["noargs", {}]]}, T],
           compat={"supportsMidConvoSystemMessages": True}),
        _c("system-added-without-initial", [_p("Hi"), {"system": "Be formal."}, _p("Again")],
           [{"text": "1"}, {"text": "2"}], system="", tools=[]),
        _c("tools-added", [_p("Hi"), {"set_tools": ["weather", "noargs"]}, _p("Ping")],
           [{"text": "1"}, {"calls": [["noargs", {}]]}, T]),
        _c("tools-removed", [_p("Weather?"), {"set_tools": ["noargs"]}, _p("Now ping")],
           [W, T, {"calls": [["noargs", {}]]}, T], tools=["weather", "noargs"]),
        _c("tools-to-none", [_p("Weather?"), {"set_tools": []}, _p("Thanks")],
           [W, T, {"text": "Bye."}]),
        _c("tools-from-none", [_p("Hi"), {"set_tools": ["weather"]}, _p("Weather?")],
           [{"text": "1"}, W, T], tools=[]),
        _c("thinking-replayed", [_p("Think"), _p("Again")],
           [{"thinking": "Hmm.", "signature": "sig-1", "text": "A."},
            {"thinking": "More.", "signature": "sig-2", "text": "B."}],
           model="reasoning", thinking="medium"),
        _c("thinking-with-tool", [_p("Weather?")],
           [{"thinking": "Need weather.", "signature": "sig-w", **W}, T],
           model="reasoning", thinking="high"),
        _c("thinking-low", [_p("Hi")], [{"text": "Hi."}], model="reasoning", thinking="low"),
        _c("thinking-minimal", [_p("Hi")], [{"text": "Hi."}], model="reasoning",
           thinking="minimal"),
        _c("thinking-off-reasoning-model", [_p("Hi")], [{"text": "Hi."}], model="reasoning"),
        _c("thinking-level-changed", [_p("Hi"), {"thinking": "high"}, _p("Deeper")],
           [{"text": "1"}, {"thinking": "Deep.", "signature": "sig-d", "text": "2"}],
           model="reasoning"),
        _c("steer-after-batch", [_p("Weather twice?", steer="Also Berlin")],
           [W2, {"text": "And Berlin."}, T]),
        _c("follow-up-continue", [_p("Hi"), {"follow_up": "More"}],
           [{"text": "1"}, {"text": "2"}]),
        _c("abort-then-prompt", [_p("Long story", abort=True), _p("Short one")],
           [{"hang": "Once upon"}, {"text": "Short."}]),
        _c("abort-then-continue", [_p("Long story", abort=True), {"follow_up": "Go on"}],
           [{"hang": "Once upon"}, {"text": "The end."}]),
        _c("abort-in-tool-turn", [_p("Weather?"), _p("Stop that", abort=True), _p("Hi")],
           [W, T, {"hang": "Thinking about"}, {"text": "Hi."}]),
        _c("outside-catalogue", [_p("Hi"), _p("Weather?")], [{"text": "1"}, W, T],
           model="outside"),
        _c("outside-catalogue-system-changed", [_p("Hi"), {"system": "Be terse."}, _p("Go")],
           [{"text": "1"}, {"text": "2"}], model="outside"),
        # near the guessed window: the output limit is clamped, from the estimate (Unicode
        # counted in UTF-16 units, an image as 4800 characters) and then from the usage
        _c("near-the-window", [_p("Read: " + "word 🙂 " * 50000, images=1),
                               {"system": "Be terse " * 2000}, _p("Again")],
           [{"text": "1", "usage": [110000, 20]}, {"text": "2"}], model="outside"),
        _c("long-200-turns", [_p("Count")], long_script, tools=["lookup"]),
        _c("many-prompts", [_p(f"Q{i}") for i in range(12)],
           [{"text": f"A{i}"} for i in range(12)]),
        _c("multi-tool-rounds", [_p("Go")], [W, W2, {"calls": [["noargs", {}]]}, T],
           tools=["weather", "noargs"]),
        # the in-place edits (issue 44 cause 1)
        _c("transform-mutate", [_p("Weather?"), _p("Again?")], [W, T, W, T],
           transform="mutate"),
        _c("transform-reassign", [_p("Weather?"), _p("Again?")], [W, T, W, T],
           transform="reassign"),
        _c("state-mutate", [_p("Weather?"), {"edit": "mutate"}, _p("Again")], [W, T, T]),
        _c("state-reassign", [_p("Weather?"), {"edit": "reassign"}, _p("Again")], [W, T, T]),
        _c("state-replace", [_p("Weather?"), {"edit": "replace"}, _p("Again")], [W, T, T]),
        _c("state-delete", [_p("One"), _p("Two"), {"edit": "delete"}, _p("Three")],
           [{"text": "1"}, {"text": "2"}, {"text": "3"}]),
        _c("payload-edit", [_p("Hi"), _p("Weather?")], [{"text": "1"}, W, T],
           payload="mark"),
        # prompt caching by session: the key (cut to 64 characters, counted in code
        # points), its retention and the session affinity headers
        _c("session-cache-key", [_p("Hi"), _p("Again")], [{"text": "1"}, {"text": "2"}],
           session=SESSION),
        _c("session-cache-key-enabled", [_p("Hi")], [{"text": "1"}], session=SESSION,
           compat={"promptCacheKeyMode": "enabled"}),
        _c("session-cache-key-disabled", [_p("Hi")], [{"text": "1"}], session=SESSION,
           compat={"promptCacheKeyMode": "disabled"}),
        # a key cut by code points (a header cannot carry the emoji: Chat Completions only)
        _c("session-cache-key-unicode", [_p("Hi")], [{"text": "1"}],
           session="s-" + "\U0001f642" * 70, compat={"promptCacheKeyMode": "enabled"},
           apis=["openai-completions"]),
        _c("session-long-retention", [_p("Hi")], [{"text": "1"}], session="s-1",
           retention="long"),
        _c("session-no-retention", [_p("Hi")], [{"text": "1"}], session="s-1",
           retention="none"),
        # tools that ask for JSON-schema constrained sampling (pi's constrainedSampling)
        _c("strict-tools-prefer", [_p("Weather?")], [W, T], tools=["weather", "lookup"],
           constrained={"type": "json_schema", "strict": "prefer"}),
        _c("strict-tools-prefer-reasoning", [_p("Weather?")], [W, T],
           tools=["weather", "lookup"], model="reasoning",
           constrained={"type": "json_schema", "strict": "prefer"}),
        _c("schema-with-root-title", [_p("Go")], [{"calls": [["titled", {"x": 1}]]}, T],
           tools=["titled"]),
        _c("strict-tools-titled", [_p("Go")], [{"calls": [["titled", {"x": 1}]]}, T],
           tools=["titled"], constrained={"type": "json_schema", "strict": "prefer"}),
        _c("long-retention-no-session", [_p("Hi")], [{"text": "1"}], retention="long"),
        # replayed histories the capture server does not give (Responses item ids)
        _c("replay-unsigned-text", [{"append": [
            _u("Hi"), _a([{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}]),
            _u("Again"), _a([{"type": "text", "text": "Three."}])]}, _p("More")],
           [{"text": "Four."}], apis=_RESPONSES),
        _c("replay-long-text-id", [_p("Hi"), {"append": [_a([
            {"type": "text", "text": "Long.", "textSignature": json.dumps({"v": 1, "id": LONG_ID})},
            {"type": "text", "text": "Legacy.", "textSignature": LONG_ID + "y"}],
            model="gpt-4o-mini")]}, _p("More")],
           [{"text": "1"}, {"text": "2"}], apis=_RESPONSES),
        _c("replay-foreign-call", [{"append": [
            _u("Weather?"), _a([{"type": "toolCall", "id": "call_abc|fc_" + "z" * 80,
                                 "name": "weather", "arguments": {"city": "Oslo"}}],
                               provider="openai-codex", api="openai-codex-responses",
                               model="gpt-5.1-codex", stop="toolUse"),
            _r("call_abc|fc_" + "z" * 80, "Sunny in Oslo"),
            _a([{"type": "text", "text": "Sunny."}], provider="openai-codex",
               api="openai-codex-responses", model="gpt-5.1-codex")]}, _p("And Rome?")],
           [T], apis=_RESPONSES),
        _c("replay-foreign-thinking", [{"append": [
            _u("Think"), _a([{"type": "thinking", "thinking": "Hmm, let me see."},
                             {"type": "text", "text": "Yes."}],
                            provider="anthropic", api="anthropic-messages",
                            model="claude-sonnet-4-5")]}, _p("Again")],
           [T], apis=_RESPONSES),
    ]
    return convs


def runs() -> list[tuple[dict[str, Any], str]]:
    """Every (conversation, API) pair."""
    return [(conv, api) for conv in conversations() for api in conv.get("apis", APIS)]
