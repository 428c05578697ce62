"""piagent.compaction side by side with pi-coding-agent 1.6.0's own code (issue 47).

Random transcripts (user turns, tool batches with ``read``/``edit``/``write`` calls, long
results, thinking, failed and aborted responses, usage present or not, earlier compactions
made by piagent) go through pi's ``estimateTokens``, ``estimateContextTokens``,
``buildSessionProjection``, ``prepareCompaction`` and ``convertToLlm``
(``pica/pi_compaction.mjs``, one node process) and through piagent's ``estimate_tokens``,
``context_tokens``, ``project``, ``prepare`` and ``default_convert_to_llm``: the token counts,
what a request sees, where the cut falls, what is summarised, the split turn's prefix, the
previous summary, the files and the user message the model reads for a summary must be the
same.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from piagent import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    default_convert_to_llm,
    message_to_dict,
)
from piagent.compaction import context_tokens, estimate_tokens, prepare, project
from tests.conftest import WAIT, npm_installed

PICA = Path(__file__).parent / "pica"


@pytest.fixture(scope="module")
def pica_installed() -> Path:
    """tests/reference/pica/node_modules (pi-coding-agent 1.6.0 with pi-ai 1.6.1)."""
    return npm_installed(PICA, "@earendil-works/pi-coding-agent/package.json",
                         "the compaction reference (pi-coding-agent 1.6.0)")


def _turns(rng: random.Random, clock: list[int]) -> list[AgentMessage]:
    def tick() -> int:
        clock[0] += 1
        return clock[0]

    def used() -> Usage:
        tokens = rng.choice([0, rng.randint(1, 30_000)])
        return Usage(input=tokens, output=10 if tokens else 0,
                     total_tokens=tokens + (10 if tokens else 0))

    log: list[AgentMessage] = []
    for _ in range(rng.randint(1, 12)):
        log.append(UserMessage([TextContent(rng.choice(["u", "é", "\U0001f600"]) * rng.randint(0, 3000))],
                               timestamp=tick()))  # pi counts UTF-16 code units
        for _ in range(rng.randint(0, 4)):
            calls = [ToolCall(f"c{clock[0]}_{k}", rng.choice(["read", "edit", "bash", "write"]),
                              {"path": f"f{rng.randint(0, 5)}.py", "n": "x" * rng.randint(0, 300)})
                     for k in range(rng.randint(1, 3))]
            content: list[Any] = []
            if rng.random() < .5:
                content.append(TextContent("t" * rng.randint(0, 500)))
            if rng.random() < .3:
                content.append(ThinkingContent("h" * rng.randint(0, 800)))
            log.append(AssistantMessage(content=[*content, *calls], timestamp=tick(),
                                        stop_reason=rng.choice(["toolUse"] * 8 + ["error", "aborted"]),
                                        usage=used()))
            log += [ToolResultMessage(call.id, call.name,
                                      [TextContent(rng.choice(["r", "\U0001f600"]) * rng.randint(0, 4000))],
                                      timestamp=tick()) for call in calls]
        log.append(AssistantMessage(content=[TextContent("a" * rng.randint(1, 2000))],
                                    stop_reason="stop", timestamp=tick(), usage=used()))
    return log


def _case(rng: random.Random, number: int) -> tuple[list[AgentMessage], int]:
    clock = [number * 100_000]
    log = _turns(rng, clock)
    for _ in range(rng.choice([0, 0, 1, 2])):  # earlier compactions, made by piagent
        prep = prepare(log, rng.randint(200, 6000))
        if prep is None:
            break
        clock[0] += 1
        log.append(CompactionSummaryMessage(
            f"## Goal\nsummary {clock[0]}", prep.tokens_before, clock[0],
            first_kept=prep.first_kept, details={"readFiles": ["old.py"], "modifiedFiles": []}))
        log += _turns(rng, clock)
    return log, rng.choice([0, 100, 500, 1000, 2000, 5000, 20_000])


def _name(message: AgentMessage) -> Any:
    if isinstance(message, CompactionSummaryMessage):
        return f"summary:{message.summary}"
    return message.timestamp  # type: ignore[union-attr]  # unique in a case


def _ours(log: list[AgentMessage], keep: int) -> dict[str, Any]:
    prep = prepare(log, keep)
    return {
        "estimates": [None if isinstance(m, CompactionSummaryMessage) else estimate_tokens(m)
                      for m in log],
        "contextTokens": context_tokens([m for m in log
                                         if not isinstance(m, CompactionSummaryMessage)]),
        "projected": [_name(m) for m in project(log).messages],
        "framed": [message_to_dict(m) for m in default_convert_to_llm(
            [m for m in log if isinstance(m, CompactionSummaryMessage)])],
        "prep": None if prep is None else {
            "firstKept": prep.first_kept, "toSummarize": [_name(m) for m in prep.to_summarize],
            "turnPrefix": [_name(m) for m in prep.turn_prefix],
            "isSplitTurn": prep.is_split_turn, "tokensBefore": prep.tokens_before,
            "previousSummary": prep.previous_summary, "read": sorted(prep.read_files),
            "modified": sorted(prep.modified_files)},
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compaction_matches_pi_coding_agent(pica_installed: Path, seed: int) -> None:
    rng = random.Random(seed)
    cases = [_case(rng, n) for n in range(150)]
    payload = json.dumps([{"log": [message_to_dict(m) for m in log], "keep": keep}
                          for log, keep in cases])
    done = subprocess.run(["node", str(PICA / "pi_compaction.mjs")], input=payload,
                          capture_output=True, text=True, timeout=WAIT * 6, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    compacted = split = 0
    for number, ((log, keep), pi) in enumerate(zip(cases, theirs, strict=True)):
        ours = _ours(log, keep)
        assert ours == pi, f"seed {seed}, case {number}: {_diff(ours, pi)}"
        compacted += ours["prep"] is not None
        split += bool(ours["prep"] and ours["prep"]["isSplitTurn"])
    assert compacted > 50 and split > 5  # the cases reach the interesting paths


def _diff(ours: dict[str, Any], pi: dict[str, Any]) -> str:
    keys = [k for k in ours if ours[k] != pi[k]]
    if "prep" in keys and ours["prep"] and pi["prep"]:
        keys += [f"prep.{k}" for k in ours["prep"] if ours["prep"][k] != pi["prep"][k]]
    return ", ".join(keys)
