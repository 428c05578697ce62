"""Paired per-turn overhead: the floor and piagent alternate in one process, over several.

``python -m benchmarks.paired [--procs P] [--reps N] [--scenarios a,b] [--out DIR]``

Each scenario runs in ``P`` fresh processes (``benchmarks._turns --alternate``); in each,
after one warm-up of both, ``N`` repetitions run the floor and piagent back to back (which
goes first swaps every repetition). One *pair* is one repetition: (piagent wall − floor
wall) / turns. A pair's two runs are milliseconds apart, so a neighbour's load hits both
alike; the figure reported is the median of all ``P × N`` pairs with its interquartile
range (and the spread of the per-process medians, which shows process-to-process drift).

*Growth* is paired too: per repetition, (piagent − floor) averaged over the first 10 rounds
and over the last 10; the median of (last − first).

Scenarios: ``20x4`` (20 rounds × 4 instant tools), ``100x1`` (100 × 1), and ``100x1_hog``
and ``100x1_owned_hog``: 100 × 1 while one busy-looping process per core competes for the
CPU, with piagent's default run-scoped tool pool and with a caller-owned executor
(``Agent(tool_executor=...)``). The targets are read from these figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ._common import REPO, ServerProcess, median, quantile, run_json_subprocess

__all__ = ["SCENARIOS", "main", "run"]

# name: rounds, tools, executor, cpu hog, target ms/turn
SCENARIOS: dict[str, tuple[int, int, str, bool, float]] = {
    "20x4": (20, 4, "run", False, 0.3),
    "100x1": (100, 1, "run", False, 0.1),
    "100x1_hog": (100, 1, "run", True, 0.0),  # no target: the default pool, for comparison
    "100x1_owned_hog": (100, 1, "owned", True, 0.25),
}
GROWTH_TOLERANCE_MS = 0.05  # "no growth": the median paired growth within this
_TIMEOUT_S = 900.0
# spins until killed, or until its parent (this harness) is gone
_HOG = ("import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n"
        "    for _ in range(200000):\n        pass\n")


class _Hogs:
    """One busy-looping process per core (owned here; ended by ``close`` by their pids)."""

    def __init__(self, count: int) -> None:
        self._procs = [subprocess.Popen([sys.executable, "-c", _HOG])
                       for _ in range(count)]

    def close(self) -> None:
        for proc in self._procs:
            proc.kill()
        for proc in self._procs:
            proc.wait(10)

    def __enter__(self) -> _Hogs:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _iqr(values: list[float]) -> tuple[float, float]:
    return quantile(values, 0.25), quantile(values, 0.75)


def _scenario(url: str, name: str, procs: int, reps: int) -> dict[str, Any]:
    rounds, tools, executor, hog, _target = SCENARIOS[name]
    args = ["-m", "benchmarks._turns", "--url", url, "--rounds", str(rounds), "--tools",
            str(tools), "--kind", "instant", "--reps", str(reps), "--alternate",
            "--executor", executor]
    pairs: list[float] = []
    cpu_pairs: list[float] = []
    growth: list[float] = []
    per_process: list[float] = []
    floor_ms: list[float] = []
    window = min(10, max(1, (rounds + 1) // 3))
    for index in range(procs):
        print(f"  paired: {name} process {index + 1}/{procs}", file=sys.stderr, flush=True)
        if hog:
            with _Hogs(os.cpu_count() or 1):
                data = run_json_subprocess(args, _TIMEOUT_S)
        else:
            data = run_json_subprocess(args, _TIMEOUT_S)
        turns = int(data["turns"])
        floor, pi = data["floor"], data["piagent"]
        mine = [(p - f) / turns * 1000 for p, f in zip(pi["wall"], floor["wall"], strict=True)]
        pairs.extend(mine)
        per_process.append(median(mine))
        cpu_pairs.extend((p - f) / turns * 1000
                         for p, f in zip(pi["cpu"], floor["cpu"], strict=True))
        floor_ms.extend(w / turns * 1000 for w in floor["wall"])
        for f_rounds, p_rounds in zip(floor["rounds"], pi["rounds"], strict=True):
            added = [(p - f) * 1000 for p, f in zip(p_rounds, f_rounds, strict=True)]
            first = sum(added[:window]) / window
            last = sum(added[-window:]) / window
            growth.append(last - first)
    low, high = _iqr(pairs)
    g_low, g_high = _iqr(growth)
    return {"rounds": rounds, "tools": tools, "executor": executor, "cpu_hog": hog,
            "procs": procs, "reps": reps, "pairs": len(pairs),
            "floor_ms_per_turn": median(floor_ms),
            "added_ms_per_turn": median(pairs), "added_q1": low, "added_q3": high,
            "added_cpu_ms_per_turn": median(cpu_pairs),
            "process_medians": per_process,
            "growth_window": window, "growth_ms": median(growth), "growth_q1": g_low,
            "growth_q3": g_high}


def _meta() -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True, timeout=10,
                                check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"commit": commit, "cpus": os.cpu_count(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of issue 18 with its paired figure and whether it is met."""
    items: list[dict[str, Any]] = []
    for name, (_rounds, _tools, _executor, _hog, goal) in SCENARIOS.items():
        row = results.get("scenarios", {}).get(name)
        if row is None or not goal:
            continue
        value = row["added_ms_per_turn"]
        items.append({"name": f"added ms/turn, {name}", "goal": f"<= {goal}",
                      "value": value, "met": value <= goal})
    row = results.get("scenarios", {}).get("100x1")
    if row is not None:
        items.append({"name": "growth, last vs first 10 rounds, 100x1 (ms/turn)",
                      "goal": f"<= {GROWTH_TOLERANCE_MS}", "value": row["growth_ms"],
                      "met": row["growth_ms"] <= GROWTH_TOLERANCE_MS})
    return items


def render(results: dict[str, Any]) -> str:
    """The Markdown tables of one paired run."""
    meta = results["meta"]
    lines = [f"Paired run — {meta['date']}, commit {meta['commit']}, {meta['cpus']} CPUs.", "",
             "| scenario | pool | CPU hog | pairs | floor ms/turn | added ms/turn (median) "
             "| IQR | per-process medians | added CPU ms/turn | growth last-first 10 ms "
             "(IQR) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in results["scenarios"].items():
        medians = ", ".join(f"{v:.3f}" for v in row["process_medians"])
        lines.append(
            f"| {name} | {row['executor']} | {'yes' if row['cpu_hog'] else 'no'} "
            f"| {row['pairs']} | {row['floor_ms_per_turn']:.3f} "
            f"| {row['added_ms_per_turn']:.3f} | {row['added_q1']:.3f} – {row['added_q3']:.3f} "
            f"| {medians} | {row['added_cpu_ms_per_turn']:.3f} "
            f"| {row['growth_ms']:.3f} ({row['growth_q1']:.3f} – {row['growth_q3']:.3f}) |")
    lines += ["", "| target | goal | measured | result |", "|---|---|---|---|"]
    for item in targets(results):
        lines.append(f"| {item['name']} | {item['goal']} | {item['value']:.3f} "
                     f"| {'met' if item['met'] else '**missed**'} |")
    return "\n".join(lines) + "\n"


def run(names: list[str], procs: int, reps: int) -> dict[str, Any]:
    """Run the chosen scenarios against one server process; returns the results JSON."""
    results: dict[str, Any] = {"meta": _meta(), "scenarios": {}}
    with ServerProcess(max_seconds=3600) as server:
        for name in names:
            results["scenarios"][name] = _scenario(server.url, name, procs, reps)
    results["targets"] = targets(results)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paired", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--procs", type=int, default=5, help="processes per scenario")
    parser.add_argument("--reps", type=int, default=12, help="pairs per process")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results",
                        help="directory for paired.json and paired.md")
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(unknown)}")
    if args.procs < 1 or args.reps < 1:
        parser.error("--procs and --reps must be at least 1")
    results = run(names, args.procs, args.reps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "paired.json").write_text(json.dumps(results, indent=2) + "\n",
                                          encoding="utf-8")
    markdown = render(results)
    (args.out / "paired.md").write_text(markdown, encoding="utf-8")
    print(markdown)


if __name__ == "__main__":
    main()
