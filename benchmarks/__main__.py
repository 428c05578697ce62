"""``python -m benchmarks [--quick] [--out DIR] [--sections a,b]``: run, then write the table.

Writes ``DIR/latest.json`` and ``DIR/latest.md`` (default ``benchmarks/results/``). Every
section runs in its own subprocess (clean memory figures, no state carried between them);
the scripted OpenAI-compatible server runs in another, so its CPU is not the client's.
See ``benchmarks/README.md`` for what each figure means and the targets.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from ._common import REPO, ServerProcess, median, run_json_subprocess
from ._report import evaluate_targets, render_markdown

SECTIONS = ("per_turn", "loop_alone", "abort", "steer", "imports", "memory", "many_agents")

# name, rounds, tools, tool kind, (full reps, quick reps), quick rounds
_SCENARIOS: tuple[tuple[str, int, int, str, tuple[int, int], int], ...] = (
    ("20x4_instant", 20, 4, "instant", (30, 2), 20),
    ("5x8_sleep100", 5, 8, "sleep100", (8, 1), 2),
    ("100x1_instant", 100, 1, "instant", (24, 1), 30),  # more reps: per-round medians are noisy
)
_SUBPROCESS_TIMEOUT_S = 600.0


def _stats(url: str) -> dict[str, int]:
    base = url.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(base + "/stats", timeout=5) as response:  # noqa: S310
        data: dict[str, int] = json.loads(response.read())
    return data


def _round_profile(rounds_by_rep: list[list[float]]) -> list[float]:
    """Per round index, the median duration across repetitions (ms)."""
    count = min(len(r) for r in rounds_by_rep)
    return [median([rep[i] for rep in rounds_by_rep]) * 1000 for i in range(count)]


def _scenario(url: str, name: str, rounds: int, tools: int, kind: str,
              reps: int) -> dict[str, Any]:
    args = ["-m", "benchmarks._turns", "--url", url, "--rounds", str(rounds), "--tools",
            str(tools), "--kind", kind]
    timing = run_json_subprocess([*args, "--reps", str(reps)], _SUBPROCESS_TIMEOUT_S)
    turns = int(timing["turns"])
    floor, pi = timing["floor"], timing["piagent"]
    paired_wall = [(p - f) / turns * 1000 for p, f in zip(pi["wall"], floor["wall"], strict=True)]
    paired_cpu = [(p - f) / turns * 1000 for p, f in zip(pi["cpu"], floor["cpu"], strict=True)]
    floor_rounds = _round_profile(floor["rounds"])
    pi_rounds = _round_profile(pi["rounds"])
    added_by_round = [p - f for p, f in zip(pi_rounds, floor_rounds, strict=False)]
    window = min(10, max(1, len(added_by_round) // 3))
    out: dict[str, Any] = {
        "rounds": rounds, "tools": tools, "tool": kind, "turns": turns, "reps": reps,
        "floor_wall_ms": median(floor["wall"]) * 1000,
        "piagent_wall_ms": median(pi["wall"]) * 1000,
        "floor_cpu_ms": median(floor["cpu"]) * 1000,
        "piagent_cpu_ms": median(pi["cpu"]) * 1000,
        "added_ms_per_turn": median(paired_wall),
        "added_cpu_ms_per_turn": median(paired_cpu),
        "wall_ratio": median(pi["wall"]) / median(floor["wall"]),
        "growth_window": window,
        "added_first_rounds_ms": sum(added_by_round[:window]) / window,
        "added_last_rounds_ms": sum(added_by_round[-window:]) / window,
        "floor_first_rounds_ms": sum(floor_rounds[:window]) / window,
        "floor_last_rounds_ms": sum(floor_rounds[-window:]) / window,
    }
    # peak RSS and connection reuse: each implementation alone, in a fresh process
    for impl in ("floor", "piagent"):
        before = _stats(url)
        alone = run_json_subprocess([*args, "--reps", "1", "--warmup", "0", "--impls", impl],
                                    _SUBPROCESS_TIMEOUT_S)
        after = _stats(url)
        out[f"{impl}_peak_rss_mb"] = alone["peak_rss_mb"]
        out[f"{impl}_rss_before_runs_mb"] = alone["rss_before_runs_mb"]
        # less one: the GET /stats that read ``after`` came on a connection of its own
        out[f"{impl}_connections_per_request"] = (
            (after["connections"] - before["connections"] - 1)
            / max(1, after["requests"] - before["requests"]))
    return out


def _per_turn(url: str, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, rounds, tools, kind, (full_reps, quick_reps), quick_rounds in _SCENARIOS:
        print(f"  per_turn: {name}", file=sys.stderr, flush=True)
        out[name] = _scenario(url, name, quick_rounds if quick else rounds, tools, kind,
                              quick_reps if quick else full_reps)
    return out


def _meta(quick: bool) -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True, timeout=10,
                                check=False).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "piagent"], cwd=REPO,
                                    capture_output=True, text=True, timeout=10,
                                    check=False).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", False
    import os

    return {"quick": quick, "python": platform.python_version(),
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "commit": commit, "piagent_tree_dirty": dirty,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def run(quick: bool, sections: tuple[str, ...]) -> dict[str, Any]:
    """Run the chosen sections; returns the results JSON."""
    results: dict[str, Any] = {"meta": _meta(quick)}
    started = time.perf_counter()
    q = ["--quick"] if quick else []
    with ServerProcess(max_seconds=3600) as server:
        url = server.url
        if "per_turn" in sections:
            results["per_turn"] = _per_turn(url, quick)
        if "loop_alone" in sections:
            print("  loop_alone", file=sys.stderr, flush=True)
            results["loop_alone"] = run_json_subprocess(["-m", "benchmarks.loop_bench", *q],
                                                        _SUBPROCESS_TIMEOUT_S)
        if "abort" in sections or "steer" in sections:
            print("  abort, steer", file=sys.stderr, flush=True)
            latency = run_json_subprocess(["-m", "benchmarks.latency_bench", "--url", url, *q],
                                          _SUBPROCESS_TIMEOUT_S)
            if "abort" in sections:
                results["abort"] = {"reps": latency["reps"],
                                    "stalled_stream": latency["abort_stalled_stream"],
                                    "waiting_tool": latency["abort_waiting_tool"]}
            if "steer" in sections:
                results["steer"] = latency["steer"]
        if "imports" in sections:
            print("  imports", file=sys.stderr, flush=True)
            results["imports"] = run_json_subprocess(["-m", "benchmarks.import_bench", *q],
                                                     _SUBPROCESS_TIMEOUT_S)
        if "memory" in sections:
            results["memory"] = _memory(results.get("per_turn"), url)
        if "many_agents" in sections:
            print("  many_agents", file=sys.stderr, flush=True)
            agents, rounds = (50, 3) if quick else (200, 5)
            results["many_agents"] = run_json_subprocess(
                ["-m", "benchmarks.many_agents", "--url", url, "--agents", str(agents),
                 "--rounds", str(rounds)], _SUBPROCESS_TIMEOUT_S)
    results["meta"]["seconds"] = time.perf_counter() - started
    results["targets"] = evaluate_targets(results)
    return results


def _memory(per_turn: dict[str, Any] | None, url: str) -> dict[str, Any]:
    """Peak RSS of the first scenario's run, per implementation (a fresh process each)."""
    if per_turn is None:
        name, rounds, tools, kind = _SCENARIOS[0][:4]
        args = ["-m", "benchmarks._turns", "--url", url, "--rounds", str(rounds), "--tools",
                str(tools), "--kind", kind, "--reps", "1", "--warmup", "0"]
        rss = {impl: run_json_subprocess([*args, "--impls", impl], _SUBPROCESS_TIMEOUT_S)
               for impl in ("floor", "piagent")}
        return {"scenario": name,
                "floor_peak_rss_mb": rss["floor"]["peak_rss_mb"],
                "piagent_peak_rss_mb": rss["piagent"]["peak_rss_mb"],
                "piagent_rss_before_runs_mb": rss["piagent"]["rss_before_runs_mb"]}
    first = per_turn[_SCENARIOS[0][0]]
    return {"scenario": _SCENARIOS[0][0],
            "floor_peak_rss_mb": first["floor_peak_rss_mb"],
            "piagent_peak_rss_mb": first["piagent_peak_rss_mb"],
            "piagent_rss_before_runs_mb": first["piagent_rss_before_runs_mb"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="one repetition, small sizes (CI); well under a minute")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results",
                        help="directory for latest.json and latest.md")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)}")
    args = parser.parse_args(argv)
    sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    results = run(args.quick, sections)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(results, indent=2) + "\n",
                                          encoding="utf-8")
    markdown = render_markdown(results)
    (args.out / "latest.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    print(f"wrote {args.out / 'latest.md'} and {args.out / 'latest.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
