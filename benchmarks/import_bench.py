"""Import time of ``piagent`` against ``requests`` alone, each in a fresh interpreter.

Each sample is a new ``python -c`` process timing the import statement itself
(``perf_counter`` around it), alternating the modules so drift hits both alike; the
figure is the median. Also recorded: the whole process's wall time (interpreter start
included), and which heavy dependencies the import pulled in.

``python -m benchmarks.import_bench [--quick]`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from ._common import REPO, median

__all__ = ["run"]

_PROBE = """
import json, sys, time
start = time.perf_counter()
import {module}
took = time.perf_counter() - start
print(json.dumps({{"seconds": took, "modules": len(sys.modules),
                  "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""
_HEAVY = ("requests", "jsonschema", "dataclasses_json", "sseclient", "urllib3",
          "piagent.providers", "marshmallow")


def _sample(module: str) -> dict[str, Any]:
    code = _PROBE.format(module=module, heavy=_HEAVY)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)
    wall = time.perf_counter() - start
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    data["process_wall"] = wall
    return data


def run(quick: bool) -> dict[str, Any]:
    """Measure; returns the section's JSON."""
    reps = 3 if quick else 11
    modules = ("piagent", "requests", "piagent.providers")
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in modules}
    for module in modules:
        _sample(module)  # warm the OS file cache and the .pyc files
    for _ in range(reps):
        for module in modules:
            samples[module].append(_sample(module))
    out: dict[str, Any] = {"reps": reps}
    for module, values in samples.items():
        out[module] = {
            "import_ms": median([v["seconds"] for v in values]) * 1000,
            "process_ms": median([v["process_wall"] for v in values]) * 1000,
            "modules": values[-1]["modules"],
            "loaded": values[-1]["loaded"],
        }
    out["ratio_piagent_vs_requests"] = out["piagent"]["import_ms"] / out["requests"]["import_ms"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.quick)))


if __name__ == "__main__":
    main()
