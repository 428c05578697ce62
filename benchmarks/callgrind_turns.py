"""``python -m benchmarks.callgrind_turns REPS [--rounds 20 --tools 4]``: the process to run
under ``valgrind --tool=callgrind`` for machine instructions per turn.

It starts the scripted server (its own process, not traced: ``--trace-children=no``), runs
two warm-up conversations, collects and freezes the garbage collector's heap
(``gc.freeze()``), then runs ``REPS`` conversations of ``rounds`` × ``tools`` instant tools.
Run it twice with different ``REPS`` and divide the difference of the two totals by the
turns between them (``rounds`` per conversation; see README.md, "Profiling a miss").

Why the freeze: a full collection walks every object the process holds, so whether one
falls inside the window of the extra repetitions depends on everything allocated before it
(imports, caches); without the freeze one full collection more or less moves the figure by
about 4 % (12–17 M instructions over 80 turns), a change of phase, not of cost per turn.
"""

from __future__ import annotations

import argparse
import gc

from ._common import ServerProcess
from ._turns import _PiagentRunner


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.callgrind_turns")
    parser.add_argument("reps", type=int, help="conversations after the warm-up")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tools", type=int, default=4)
    args = parser.parse_args(argv)
    with ServerProcess() as server:
        spec = f"script:{args.rounds}:{args.tools}:instant"
        runner = _PiagentRunner(server.url, spec, "instant", args.rounds, args.tools)
        runner.run()
        runner.run()
        gc.collect()
        gc.freeze()  # the heap so far out of the window's full collections (docstring)
        for _ in range(args.reps):
            runner.run()


if __name__ == "__main__":
    main()
