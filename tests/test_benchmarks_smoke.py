"""The benchmark suite runs end to end in --quick mode and writes every section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECTIONS = ("per_turn", "loop_alone", "abort", "steer", "imports", "memory", "many_agents")


@pytest.mark.timeout(150)
def test_quick_benchmarks_write_every_section(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    for section in (*SECTIONS, "meta", "targets"):
        assert results.get(section), f"section {section!r} is missing or empty"
    assert set(results["per_turn"]) == {"20x4_instant", "5x8_sleep100", "100x1_instant"}
    assert results["many_agents"]["finished"] == results["many_agents"]["agents"]
    assert results["abort"]["stalled_stream"] and results["abort"]["waiting_tool"]
    assert all(t["value"] is not None for t in results["targets"])
    markdown = (tmp_path / "latest.md").read_text(encoding="utf-8")
    assert "## Targets" in markdown and "## 6. Many agents" in markdown


@pytest.mark.timeout(60)
def test_sessions_bench_runs_quick() -> None:
    proc = subprocess.run([sys.executable, "benchmarks/sessions_bench.py", "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=50, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "ms/message with short answers" in proc.stdout
    assert "(12.0 per run)" in proc.stdout  # one append per message, none per delta


@pytest.mark.timeout(120)
def test_sessions_bench_runs_the_contrib_stores_on_sqlite() -> None:
    """The ORM stores' rows (``--stores sa-sqlite,dj-sqlite``): the Django app's models
    migrate in the benchmark's own settings."""
    proc = subprocess.run([sys.executable, "benchmarks/sessions_bench.py", "--quick",
                           "--stores", "sa-sqlite,dj-sqlite"], cwd=REPO,
                          capture_output=True, text=True, timeout=110, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert {"sa-sqlite", "dj-sqlite"} <= set(rows), proc.stdout


@pytest.mark.timeout(90)
def test_runs_bench_runs_quick() -> None:
    proc = subprocess.run([sys.executable, "benchmarks/runs_bench.py", "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=80, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(proc.stdout.splitlines()[-1])
    latency, poll = rows[:4], rows[4:]
    assert [r["case"] for r in latency] == ["one process, MemoryStore",
                                            "one process, SQLiteStore",
                                            "across processes, SQLiteStore",
                                            "abort -> agent_end, across processes"]
    assert all(r["events"] > 0 for r in latency)
    # the steering poll point's inbox read, per store (PostgreSQL when it is reachable)
    assert [r["case"] for r in poll][:2] == ["poll point, MemoryStore", "poll point, SQLiteStore"]
    assert all(r["inbox_read_p50_ms"] >= 0 and r["turn_median_ms"] > 0 for r in poll)


@pytest.mark.timeout(90)
def test_recovery_bench_runs_quick() -> None:
    proc = subprocess.run([sys.executable, "benchmarks/recovery_bench.py", "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=80, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.splitlines()[-1].startswith("worst recovery beyond the lease: ")


@pytest.mark.timeout(170)
def test_concurrency_bench_runs_tiny(tmp_path: Path) -> None:
    out = tmp_path / "concurrency.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.concurrency", "--n", "1,3",
                           "--rounds", "1", "--timeout", "30", "--repeat", "2", "--web",
                           "--web-seconds", "2", "--web-connections", "10", "--web-pairs", "1",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=160, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    rows = result["rows"]
    assert [(r["n"], r["mode"]) for r in rows] == [
        (n, mode) for n in (1, 3) for mode in ("floor", "blocking", "nonblocking")]
    for row in rows:
        assert row["finished"] == row["n"] * row["batches"], row
        assert row["cpu_ms_per_turn"] > 0 and row["switches_per_turn"] > 0
        # --repeat 2: both runs kept, the row their median
        walls = sorted(run["wall_s"] for run in row["runs"])
        assert len(walls) == 2 and row["wall_s"] == pytest.approx(sum(walls) / 2), row
    web = result["web"]
    for view in ("floor", "piagent", "piagent_worker"):
        assert web[view]["requests"] > 0 and web[view]["errors"] == 0, web
        assert len(web[view]["rps_runs"]) == 1, web
    assert web["rps_ratio"] == pytest.approx(web["piagent"]["rps"] / web["floor"]["rps"])
    assert "| 3 | blocking |" in proc.stdout and "requests/s" in proc.stdout


@pytest.mark.timeout(90)
def test_opcode_count_runs_tiny() -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.opcodes", "--rounds", "1",
                           "--tools", "2", "--runs", "1", "--top", "3"], cwd=REPO,
                          capture_output=True, text=True, timeout=80, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    floor = next(line for line in lines if line.startswith("floor: "))
    piagent = next(line for line in lines if line.startswith("piagent: "))
    for line in (floor, piagent):
        assert int(line.split()[1].replace(",", "")) > 1000, line  # a turn runs code
        assert "(1 rounds x 2 tools, 1 runs)" in line
    assert len([line for line in lines if line.startswith("  ")]) == 6  # 3 functions each
    assert lines[-1].startswith("piagent - floor: ")
