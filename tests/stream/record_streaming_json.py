"""Re-record ``streaming_json_pi161.json``: pi-ai 1.6.1's partial tool arguments for
``CASES`` (``python -m tests.stream.record_streaming_json DIST``, DIST: the ``dist`` folder
of ``@earendil-works/pi-ai@1.6.1``, e.g. from ``npm pack``; node 20)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.reference.test_ref_partial_json import DOCUMENTS

HERE = Path(__file__).parent
RECORDING = HERE / "streaming_json_pi161.json"

EXTRA = {
    "open_string_trailing_spaces": '{"text": "a  b   ", "n": 1}',
    "pending_scalars": '{"a": tru, "b": 1.5e, "c": -, "d": 123, "e": [1, 2.5E+3, fals',
    "lenient": '{"a" 1 "b": 2, : 3, "c": {"d" : [1,,2]}, "e": x, "f": nul} trailing {',
    "surrogate_escapes": '{"s": "\\ud83d\\ude00 and \\ud83d", "t": "\\udc00\\ud800\\udc00"}',
    "root_string": '"abc',
    "root_array": "[1, 2",
    "large_open_array": json.dumps({"a": list(range(600)), "b": "x"}),
    "large_open_object": json.dumps({f"k{i}": i for i in range(400)}),
}


def cases() -> list[list[str]]:
    out = []
    for doc in [*DOCUMENTS.values(), *EXTRA.values()]:
        sizes = (1, 3, 10) if len(doc) < 150 else (5, 16) if len(doc) < 400 else (331,)
        out += [[doc[i:i + k] for i in range(0, len(doc), k)] for k in sizes]
    return out


def main(dist: str) -> None:
    all_cases = cases()
    done = subprocess.run(["node", str(HERE / "record_streaming_json.mjs"), dist],
                          input=json.dumps(all_cases), capture_output=True, text=True,
                          check=True, timeout=300)
    # per case: [piece index, partial JSON] where the partial arguments changed
    changes = [[[i, p] for i, p in enumerate(partials) if i == 0 or p != partials[i - 1]]
               for partials in json.loads(done.stdout)]
    RECORDING.write_text(json.dumps({"cases": all_cases, "changes": changes}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
