"""``benchmarks/mcp_bench.py`` runs and reports the added cost per call."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from .conftest import HERE

ROOT = HERE.parent.parent


def test_mcp_bench_reports_the_added_cost_per_call() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "benchmarks.mcp_bench", "--calls", "50",
                           "--rounds", "1"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^added +-?\d+\.\d{3} ms/call \(target <= 0\.2\), 1 rounds x 50 calls$",
                     done.stdout, re.M), done.stdout
