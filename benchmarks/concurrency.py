"""Many concurrent conversations in one process: the floor against piagent, N = 1 … 2,000.

``python -m benchmarks.concurrency [--n 1,10,100,400,1000,2000] [--modes floor,blocking,
nonblocking] [--rounds 5] [--tools 2] [--repeat K] [--pin] [--timeout 300] [--out FILE.json]
[--web]``

For each N and each mode, a fresh process (``--child``) runs N conversations at once
against the local scripted server (``_openai_server.py``, its own process), each
``rounds`` rounds × ``tools`` instant tools, then a final answer (``rounds + 1`` turns):

* ``floor``: N threads, each running the hand-written requests + SSE loop (``_floor.py``)
  with its own ``requests.Session``: what a view does without piagent.
* ``blocking``: N threads, each calling ``Agent.prompt(...)`` and blocking until the run
  settles: a gunicorn ``gthread`` worker or Django/Flask view.
* ``nonblocking``: one thread starts N runs with ``prompt(block=False)``, then waits for
  each with ``run.wait()``.

The N threads are started first and released together by a barrier; the figures cover
the barrier's release until every conversation has finished: *wall*, *CPU per turn*
(``getrusage``: user + system time of every thread of the process), *context switches per
turn* (voluntary + involuntary; a thread that blocks and is woken counts one: the wake-ups
per turn), *peak threads* (``/proc/self/status``, sampled every 20 ms; the figure per live
run is (peak − before the N threads were made) / N) and *RSS per live run* (peak RSS
sampled the same way, less the RSS before the N conversations were set up, / N). Small N
repeat the whole batch (``batches``) so that a figure covers at least ~200 conversations.
*Peak fds* are sampled the same way (``/proc/self/fd``), and *fds left* is the count after the
batch less the count before the conversations were set up. Every conversation's transcript
(roles, texts, tool calls and results) is compared with the warm-up conversation's: *differ*
counts those that are not the same.

The pinned method (issue "a thousand conversations at the floor's cost"): ``--pin`` runs the
server on CPU 0 and every measured process on CPU 1 (``os.sched_setaffinity``), so the
two never share a core; with ``--repeat 3`` the modes alternate within each round and each
row is the median of the three. The parent prints a table with each mode's ratio to the
floor at the same N and, with ``--out``, writes the JSON. ``--web`` adds the end-to-end figure (``_web_bench.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
from typing import Any

from ._common import (
    PROMPT,
    SYSTEM,
    ServerProcess,
    floor_tools,
    piagent_tool,
    run_json_subprocess,
    tool_specs,
)

__all__ = ["MODES", "main", "run_child", "sweep"]

MODES = ("floor", "blocking", "nonblocking")
DEFAULT_N = (1, 10, 100, 400, 1000, 2000)
_SAMPLE_S = 0.02  # the sampler's period (threads and RSS)


def _fds() -> int:
    """Open file descriptors of this process (0 where ``/proc`` is missing)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _proc_status() -> tuple[int, float]:
    """(OS threads of this process, current RSS in MB) from ``/proc/self/status``."""
    threads, rss = threading.active_count(), 0.0
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Threads:"):
                    threads = int(line.split()[1])
                elif line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
    except OSError:  # not Linux: Python threads, and no RSS
        pass
    return threads, rss


class _Sampler:
    """Samples threads and RSS every ``_SAMPLE_S`` until stopped; keeps the peaks."""

    def __init__(self) -> None:
        self.peak_threads, self.peak_rss = _proc_status()
        self.peak_fds = _fds()
        self._stop = threading.Event()  # set by stop(); the sampler thread waits on it
        self._thread = threading.Thread(target=self._sample, name="bench-sampler",
                                        daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(_SAMPLE_S):
            threads, rss = _proc_status()
            self.peak_threads = max(self.peak_threads, threads)
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_fds = max(self.peak_fds, _fds())

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def _usage() -> tuple[float, int, int]:
    """(CPU seconds, voluntary, involuntary context switches) of the whole process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw, usage.ru_nivcsw


def _floor_transcript(messages: list[dict[str, Any]]) -> str:
    """A floor conversation's transcript, without what differs between equal ones."""
    out = []
    for m in messages:
        calls = [(c["function"]["name"], c["function"]["arguments"])
                 for c in m.get("tool_calls") or ()]
        out.append((m["role"], m.get("content"), calls))
    return json.dumps(out, sort_keys=True)


def _agent_transcript(messages: list[Any]) -> str:
    """An Agent's transcript (roles, texts, tool calls and results), as ``_floor_transcript``."""
    out = []
    for m in messages:
        blocks = [[getattr(b, "type", ""), getattr(b, "text", None), getattr(b, "name", None),
                   getattr(b, "arguments", None)] for b in getattr(m, "content", ()) or ()]
        if isinstance(getattr(m, "content", None), str):
            blocks = [["text", m.content, None, None]]
        out.append((getattr(m, "role", ""), blocks, getattr(m, "is_error", None)))
    return json.dumps(out, sort_keys=True, default=str)


def _make_job(mode: str, url: str, rounds: int, tools: int,
              timeout_s: float) -> tuple[Any, Any]:
    """(``prepare() -> state``, ``finish(state) -> error or None``) for one conversation.

    ``prepare`` runs before the barrier (an Agent or a Session is made per conversation, as
    a view makes one per request); ``finish`` runs the conversation to its end.
    """
    model_id = f"script:{rounds}:{tools}:instant"
    if mode == "floor":
        import requests

        from ._floor import run_floor

        specs, fns = tool_specs("instant"), floor_tools("instant")

        def prepare_floor() -> Any:
            return requests.Session()

        def finish_floor(session: Any) -> str | None:
            try:
                result = run_floor(session, url, model_id, SYSTEM, PROMPT, specs, fns,
                                   max_rounds=rounds + 1, timeout_s=timeout_s)
            finally:
                session.close()
            answers = sum(1 for m in result.messages if m["role"] == "assistant")
            if answers != rounds + 1:
                return f"{answers} answers"
            return "=" + _floor_transcript(result.messages)

        return prepare_floor, finish_floor

    from piagent import Agent, Model

    model = Model(id=model_id, api="openai-completions", provider="local", base_url=url)
    tool = piagent_tool("instant")

    def prepare_agent() -> Any:
        return Agent(system_prompt=SYSTEM, model=model, tools=[tool])

    def check(run: Any) -> str | None:
        if run.error_message:
            return str(run.error_message)
        answers = sum(1 for m in run.messages if getattr(m, "role", None) == "assistant")
        if answers != rounds + 1:
            return f"{answers} answers"
        return "=" + _agent_transcript(run.messages)

    def finish_agent(agent: Any) -> str | None:
        return check(agent.prompt(PROMPT))  # as a view calls it (the batch is bounded)

    finish_agent.check = check  # type: ignore[attr-defined]  # the non-blocking mode's
    return prepare_agent, finish_agent


def _batch(mode: str, n: int, prepare: Any, finish: Any, timeout_s: float,
           expected: str) -> dict[str, Any]:
    """N conversations at once; the figures of this one batch. ``finish`` answers an error,
    or ``"="`` and the transcript, which must equal ``expected`` (the warm-up's)."""
    errors: list[str] = []
    differ = [0]
    errors_lock = threading.Lock()  # guards errors and differ (written by the N threads)
    fds_before = _fds()
    threads_before, rss_before = _proc_status()
    states = [prepare() for _ in range(n)]
    barrier = threading.Barrier(n + 1, timeout=timeout_s)

    def record(outcome: str | None) -> None:
        if outcome is not None and outcome.startswith("="):
            if outcome[1:] != expected:
                with errors_lock:
                    differ[0] += 1
        elif outcome is not None:
            with errors_lock:
                errors.append(outcome)

    def conversation(index: int) -> None:
        try:
            barrier.wait()
            record(finish(states[index]))
        except Exception as exc:  # counted and reported, never hidden
            record(f"{type(exc).__name__}: {exc}")

    workers: list[threading.Thread] = []
    if mode != "nonblocking":
        workers = [threading.Thread(target=conversation, args=(i,), name=f"bench-conv-{i}")
                   for i in range(n)]
        for worker in workers:
            worker.start()
    with _Sampler() as sampler:
        if workers:
            barrier.wait()
        cpu0, vol0, invol0 = _usage()
        start = time.perf_counter()
        if workers:
            deadline = time.monotonic() + timeout_s
            for worker in workers:
                worker.join(max(0.0, deadline - time.monotonic()))
            stuck = sum(1 for worker in workers if worker.is_alive())
            if stuck:
                errors.append(f"{stuck} conversations still running after {timeout_s:g} s")
        else:
            runs = [agent.prompt(PROMPT, block=False) for agent in states]
            deadline = time.monotonic() + timeout_s
            for run in runs:
                if run.wait(max(0.0, deadline - time.monotonic())):
                    record(finish.check(run))
                else:
                    record(f"not finished after {timeout_s:g} s")
        wall = time.perf_counter() - start
        cpu1, vol1, invol1 = _usage()
    states.clear()  # the conversations go before the fds left are counted
    if differ[0]:
        errors.append(f"{differ[0]} transcripts differ from the scripted one")
    return {"wall_s": wall, "cpu_s": cpu1 - cpu0, "voluntary": vol1 - vol0,
            "involuntary": invol1 - invol0, "errors": errors, "differ": differ[0],
            "peak_fds": sampler.peak_fds, "fds_left": _fds() - fds_before,
            "threads_per_run": (sampler.peak_threads - threads_before) / n,
            "peak_threads": sampler.peak_threads,
            "rss_per_run_kb": max(0.0, sampler.peak_rss - rss_before) * 1024 / n}


def run_child(mode: str, n: int, url: str, rounds: int, tools: int,
              timeout_s: float) -> dict[str, Any]:
    """One mode at one N, in this process: a warm-up conversation, then the batches."""
    if mode not in MODES:
        msg = f"mode must be one of {', '.join(MODES)}, not {mode!r}"
        raise ValueError(msg)
    prepare, finish = _make_job(mode, url, rounds, tools, timeout_s)
    warm = finish(prepare())  # imports, first connections
    if warm is None or not warm.startswith("="):
        msg = f"the warm-up conversation failed: {warm}"
        raise RuntimeError(msg)
    batches = max(1, min(20, 200 // n))
    results = [_batch(mode, n, prepare, finish, timeout_s, warm[1:]) for _ in range(batches)]
    turns = n * (rounds + 1) * batches
    walls = sorted(r["wall_s"] for r in results)
    errors = [e for r in results for e in r["errors"]]
    switches = sum(r["voluntary"] + r["involuntary"] for r in results)
    return {
        "mode": mode, "n": n, "rounds": rounds, "tools": tools, "batches": batches,
        "finished": n * batches - len(errors), "errors": errors[:5],
        "wall_s": walls[len(walls) // 2],
        "cpu_ms_per_turn": sum(r["cpu_s"] for r in results) * 1000 / turns,
        "switches_per_turn": switches / turns,
        "voluntary_per_turn": sum(r["voluntary"] for r in results) / turns,
        "peak_threads": max(r["peak_threads"] for r in results),
        "threads_per_run": max(r["threads_per_run"] for r in results),
        "rss_per_run_kb": max(r["rss_per_run_kb"] for r in results),
        "differ": sum(r["differ"] for r in results),
        "peak_fds": max(r["peak_fds"] for r in results),
        "fds_left": max(r["fds_left"] for r in results),
    }


def sweep(ns: list[int], modes: list[str], rounds: int, tools: int,
          timeout_s: float, url: str | None = None, repeat: int = 1,
          pin: bool = False) -> list[dict[str, Any]]:
    """Every (N, mode), each in a fresh process, sharing one server; ``repeat`` times.

    The repeats of one N alternate the modes (their order rotates every repeat), so a
    neighbour's load lands on all of them alike; each row holds the medians of its (N, mode)
    (``_median_row``). ``pin``: the server on CPU 0, each measured process on CPU 1."""
    rows: list[dict[str, Any]] = []
    server = ServerProcess(cpu=0 if pin else None) if url is None else None
    try:
        target = url if url is not None else server.url  # type: ignore[union-attr]
        for n in ns:
            samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
            for rep in range(repeat):
                shift = rep % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    row = _child(mode, n, target, rounds, tools, timeout_s, pin)
                    samples[mode].append(row)
                    if repeat > 1:
                        print(f"  run {rep + 1}/{repeat}: " + _line(row, [*rows, row]),
                              file=sys.stderr, flush=True)
            for mode in modes:
                rows.append(_median_row(samples[mode]))
                print(_line(rows[-1], rows), file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.close()
    return rows


def _child(mode: str, n: int, url: str, rounds: int, tools: int,
           timeout_s: float, pin: bool = False) -> dict[str, Any]:
    args = ["-m", "benchmarks.concurrency", "--child", mode, "--n", str(n), "--url", url,
            "--rounds", str(rounds), "--tools", str(tools), "--timeout", str(timeout_s)]
    if pin:
        args.append("--pin")
    try:
        return run_json_subprocess(args, timeout_s * 25 + 60)
    except Exception as exc:  # a mode that failed or hung is a result too
        return {"mode": mode, "n": n, "finished": 0,
                "errors": [f"{type(exc).__name__}: {str(exc)[-300:]}"]}


def _median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for the runs of an (N, mode): the median of each time and count figure, the
    largest threads and RSS, every run kept under ``runs``. A failed run makes the row a
    failure (a mode that does not always finish has no figure)."""
    failed = [r for r in runs if "wall_s" not in r or r["errors"]]
    row = dict(failed[0] if failed else runs[0])
    if len(runs) == 1:
        return row
    row["runs"] = runs
    if failed:
        return row
    for key in ("wall_s", "cpu_ms_per_turn", "switches_per_turn", "voluntary_per_turn"):
        row[key] = statistics.median(r[key] for r in runs)
    for key in ("peak_threads", "threads_per_run", "rss_per_run_kb", "peak_fds", "fds_left",
                "differ"):
        row[key] = max(r[key] for r in runs)
    row["finished"] = min(r["finished"] for r in runs)
    return row


def _line(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    floor = next((r for r in rows if r["n"] == row["n"] and r["mode"] == "floor"
                  and "wall_s" in r), None)
    if "wall_s" not in row:
        return f"N={row['n']:>5} {row['mode']:<11} FAILED {row['errors']}"
    ratio = ""
    if floor is not None and row is not floor:
        ratio = (f"  ({row['wall_s'] / floor['wall_s']:.2f}x wall, "
                 f"{row['cpu_ms_per_turn'] / floor['cpu_ms_per_turn']:.2f}x CPU)")
    return (f"N={row['n']:>5} {row['mode']:<11} wall {row['wall_s']:7.3f} s  CPU "
            f"{row['cpu_ms_per_turn']:6.3f} ms/turn  switches {row['switches_per_turn']:6.1f}"
            f"/turn  threads/run {row['threads_per_run']:5.2f}  RSS/run "
            f"{row['rss_per_run_kb']:6.1f} kB  fds {row.get('peak_fds', 0)} (left "
            f"{row.get('fds_left', 0)})  finished {row['finished']}{ratio}")


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table, each mode's wall and CPU as a ratio to the floor."""
    out = ["| N | mode | wall s | × floor | CPU ms/turn | × floor | switches/turn | "
           "peak threads | threads/run | RSS kB/run | peak fds | fds left | finished | "
           "runs: wall s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "wall_s" not in row:
            out.append(f"| {row['n']} | {row['mode']} | failed: {row['errors'][:1]} "
                       "| | | | | | | | | | | |")
            continue
        floor = next((r for r in rows if r["n"] == row["n"] and r["mode"] == "floor"
                      and "wall_s" in r), None)
        wall_x = cpu_x = "—"
        if floor is not None:
            wall_x = f"{row['wall_s'] / floor['wall_s']:.2f}"
            cpu_x = f"{row['cpu_ms_per_turn'] / floor['cpu_ms_per_turn']:.2f}"
        out.append(
            f"| {row['n']:,} | {row['mode']} | {row['wall_s']:.3f} | {wall_x} | "
            f"{row['cpu_ms_per_turn']:.3f} | {cpu_x} | {row['switches_per_turn']:.1f} | "
            f"{row['peak_threads']:,} | {row['threads_per_run']:.2f} | "
            f"{row['rss_per_run_kb']:.0f} | {row.get('peak_fds', 0)} | {row.get('fds_left', 0)} | "
            f"{row['finished']}/{row['n'] * row['batches']} | "
            f"{_walls(row)} |")
    return "\n".join(out)


def _walls(row: dict[str, Any]) -> str:
    return ", ".join(f"{run['wall_s']:.2f}" for run in row.get("runs", [row]))


def _ints(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        msg = f"--n takes positive integers separated by commas, not {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return values


def _positive(text: str) -> int:
    """``--repeat``/``--web-pairs``: argparse names the flag before this message."""
    if not text.isdigit() or int(text) < 1:
        msg = f"expected a positive integer, not {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=_ints, default=list(DEFAULT_N))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tools", type=int, default=2)
    parser.add_argument("--repeat", type=_positive, default=1,
                        help="runs of each (N, mode), modes alternating; the median is shown")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one batch may take before it counts as not finished")
    parser.add_argument("--url", help="an already running server (default: start one)")
    parser.add_argument("--pin", action="store_true",
                        help="the server on CPU 0, each measured process on CPU 1")
    parser.add_argument("--out", help="write every row (and --web's figures) as JSON here")
    parser.add_argument("--web", action="store_true",
                        help="also the gunicorn + Flask end-to-end figure (_web_bench.py)")
    parser.add_argument("--web-seconds", type=float, default=15.0)
    parser.add_argument("--web-connections", type=int, default=200)
    parser.add_argument("--web-pairs", type=_positive, default=3,
                        help="rounds of the web figure (each view once a round)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        if args.pin:
            os.sched_setaffinity(0, {1})
        print(json.dumps(run_child(args.child, args.n[0], args.url, args.rounds, args.tools,
                                   args.timeout)))
        return
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)} (choose from {', '.join(MODES)})")
    rows = sweep(args.n, modes, args.rounds, args.tools, args.timeout, args.url, args.repeat,
                 args.pin)
    result: dict[str, Any] = {"rows": rows, "cpus": os.cpu_count(), "pinned": args.pin,
                              "load": os.getloadavg(), "python": sys.version.split()[0]}
    print(table(rows))
    if args.web:
        from ._web_bench import run_web, web_table

        result["web"] = run_web(args.web_seconds, args.web_connections, args.web_pairs)
        print()
        print(web_table(result["web"]))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
