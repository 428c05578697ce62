"""Another process of the web site, for the worker tests: ``python -m tests.celery._client``.

``stream RUN_ID`` prints each event of the run as one JSON line (``{"id", "type", "text"}``)
until ``agent_end``; ``steer SESSION TEXT`` and ``abort RUN_ID REASON`` send control;
``approve SESSION CALL_ID`` decides a waiting call and prints the id of the run that goes on
(or ``none``). The
wiring comes from the environment, as for the workers (``tests/celery/app.py``).
"""

from __future__ import annotations

import json
import sys

from tests.celery.app import runner, store


def main(argv: list[str]) -> int:
    command, *args = argv
    try:
        if command == "stream":
            for item in runner.events(args[0], timeout=20.0):
                if item is None:
                    print(json.dumps({"type": "idle"}), flush=True)
                    continue
                message = item.event.get("message") or {}
                text = "".join(b.get("text", "") for b in message.get("content", [])
                               if isinstance(b, dict))
                print(json.dumps({"id": item.id, "type": item.type, "text": text}), flush=True)
        elif command == "steer":
            runner.steer(args[0], args[1])
        elif command == "abort":
            runner.abort(args[0], args[1])
        elif command == "approve":
            print(runner.approve(args[0], args[1]) or "none", flush=True)
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
