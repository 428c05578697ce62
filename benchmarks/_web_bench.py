"""The end-to-end figure: a gunicorn ``gthread`` worker serving ``_web_app.py``, under load.

One gunicorn worker process with 200 threads (``-k gthread --threads 200``) serves
``/floor`` (the hand-written loop), ``/piagent`` (``Agent.prompt()`` per request, the run
on the request thread) and ``/piagent_worker`` (the same with a ``timeout``, so the run has
its own worker thread); a load generator on 127.0.0.1 keeps 200 connections busy for
``seconds`` on one view, then the next, ``pairs`` rounds (the views' order rotating every
round). Each pass gets a fresh gunicorn worker (so no view inherits the requests a previous
pass abandoned, or its memory) and a 2 s warm-up. Reported: the passes' averages of requests
per second, p50 and p99 latency and the worker's CPU per request (``/proc/<pid>/stat``), and
the piagent / floor requests-per-second ratio of each round with their median (the round's
two passes minutes apart, so a neighbour's load moves both). The load generator is ``wrk`` when it is
installed (``apt-get install wrk``), else a Python one (``_load``: threads with
keep-alive ``http.client`` connections; it needs CPU too, so its figures are lower).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.client import HTTPConnection
from typing import Any

from ._common import REPO, ServerProcess, _child_env, quantile

__all__ = ["run_web", "web_table"]

_THREADS = 200
_CONNECTIONS = 200
VIEWS = ["floor", "piagent", "piagent_worker"]  # the views, in the first round's order


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker_pid(master: int) -> int | None:
    try:
        with open(f"/proc/{master}/task/{master}/children", encoding="ascii") as children:
            pids = children.read().split()
    except OSError:
        return None
    return int(pids[0]) if pids else None


def _cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wrk(url: str, seconds: float, connections: int) -> dict[str, float]:
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{max(1, round(seconds))}s",
                          "--timeout", "60s", "--latency", url], capture_output=True,
                         text=True, timeout=seconds + 90, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def ms(label: str) -> float:
        found = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        if found is None:
            return float("nan")
        scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[found.group(2)]
        return float(found.group(1)) * scale

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    requests = re.search(r"(\d+) requests in", out)
    return {"rps": rps, "p50_ms": ms("50"), "p99_ms": ms("99"),
            "requests": float(requests.group(1)) if requests else 0.0,
            "errors": float(errors.group(1)) if errors else 0.0}


def _load(url: str, seconds: float, connections: int) -> dict[str, float]:
    """A Python closed-loop load generator: ``connections`` threads, keep-alive."""
    host, port, path = re.match(r"http://([^:/]+):(\d+)(/.*)", url).groups()  # type: ignore[union-attr]
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()  # guards latencies and errors
    stop_at = time.monotonic() + seconds

    def client() -> None:
        conn = HTTPConnection(host, int(port), timeout=60)
        mine: list[float] = []
        failed = 0
        while time.monotonic() < stop_at:
            start = time.perf_counter()
            conn.request("GET", path)
            response = response_ = conn.getresponse()
            response_.read()
            mine.append(time.perf_counter() - start)
            failed += response.status != 200
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += failed

    threads = [threading.Thread(target=client, name=f"load-{i}") for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 90)
    return {"rps": len(latencies) / seconds, "p50_ms": quantile(latencies, 0.5) * 1000,
            "p99_ms": quantile(latencies, 0.99) * 1000, "requests": float(len(latencies)),
            "errors": float(errors[0])}


class _Gunicorn:
    """One gunicorn worker process serving ``_web_app.py`` (started, ready, stopped)."""

    def __init__(self, llm_url: str) -> None:
        self.port = _free_port()
        env = _child_env()
        env["BENCH_LLM_URL"] = llm_url
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-k", "gthread", "--threads", str(_THREADS),
             "-w", "1", "-b", f"127.0.0.1:{self.port}", "--backlog", "2048", "--timeout",
             "120", "--log-level", "warning", "benchmarks._web_app:app"],
            cwd=REPO, env=env)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("GET", "/floor")
                status = conn.getresponse().status
                if status == 200:
                    break
                failure: Exception = RuntimeError(f"GET /floor answered {status}")
            except OSError as exc:
                failure = exc
            if time.monotonic() > deadline or self._proc.poll() is not None:
                self.stop()
                raise RuntimeError("the benchmark's gunicorn did not start serving") from failure
            time.sleep(0.1)
        self.worker = _worker_pid(self._proc.pid)

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)


def run_web(seconds: float, connections: int = _CONNECTIONS, pairs: int = 3) -> dict[str, Any]:
    """Load each view ``pairs`` times, each pass on a fresh gunicorn worker, the views'
    order rotating every round; return the averaged figures and the per-round ratios."""
    generator = "wrk" if shutil.which("wrk") else "python"
    drive = _wrk if generator == "wrk" else _load
    views = list(VIEWS)
    passes: dict[str, list[dict[str, float]]] = {v: [] for v in views}
    with ServerProcess() as llm:
        for round_ in range(pairs):
            shift = round_ % len(views)
            for view in views[shift:] + views[:shift]:
                server = _Gunicorn(llm.url)  # fresh: no earlier pass's requests or state
                try:
                    url = f"{server.base}/{view}"
                    drive(url, min(2.0, seconds), connections)  # warm-up
                    cpu0 = _cpu_s(server.worker)
                    figures = drive(url, seconds, connections)
                    figures["cpu_ms_per_request"] = ((_cpu_s(server.worker) - cpu0) * 1000
                                                     / max(1.0, figures["requests"]))
                finally:
                    server.stop()
                passes[view].append(figures)
    result: dict[str, Any] = {"generator": generator, "threads": _THREADS,
                              "connections": connections, "seconds": seconds, "pairs": pairs}
    for view, runs in passes.items():
        result[view] = {key: sum(r[key] for r in runs) / len(runs) for key in runs[0]}
        result[view]["rps_runs"] = [r["rps"] for r in runs]
    ratios = [p["rps"] / max(f["rps"], 1e-9)
              for f, p in zip(passes["floor"], passes["piagent"], strict=True)]
    result["rps_ratios"] = ratios
    result["rps_ratio"] = statistics.median(ratios)
    return result


def web_table(web: dict[str, Any]) -> str:
    """The figure as a markdown table."""
    out = [f"gunicorn gthread, 1 worker × {web['threads']} threads, {web['connections']} "
           f"connections ({web['generator']}), {web['seconds']:g} s per pass, "
           f"{web['pairs']} passes each, each pass on a fresh worker",
           "",
           "| view | requests/s | p50 ms | p99 ms | worker CPU ms/request | non-200 |",
           "|---|---|---|---|---|---|"]
    for view in VIEWS:
        f = web[view]
        out.append(f"| {view} | {f['rps']:.1f} | {f['p50_ms']:.1f} | {f['p99_ms']:.1f} | "
                   f"{f['cpu_ms_per_request']:.2f} | {f['errors']:.0f} |")
    ratios = ", ".join(f"{r:.2f}" for r in web["rps_ratios"])
    out.append(f"\npiagent / floor requests per second: {web['rps_ratio']:.2f} (median of the "
               f"rounds: {ratios})")
    return "\n".join(out)
