"""The typed usage files in tests/typed/ and every ```python block of the docs pass
``mypy --strict`` (issue 11). One mypy run over all files; errors are mapped back to
``docs/x.md:LINE``.

Every block must pass: there is no list of exceptions. A block that cannot (a snippet
needing a server) is still type-checked, even when marked ``<!-- no-run -->``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.test_docs import ALL_BLOCKS, ROOT

mypy_api = pytest.importorskip("mypy.api")

TYPED = sorted((ROOT / "tests" / "typed").glob("*.py"))
_ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<text>.*)$")


def test_typed_files_and_doc_blocks_pass_mypy_strict(tmp_path: Path) -> None:
    files: dict[str, tuple[str, int, int]] = {}
    ordinals: dict[str, int] = {}
    for index, (path, line, code, _skipped) in enumerate(ALL_BLOCKS):
        name = tmp_path / f"block_{index}.py"
        name.write_text(code + "\n", encoding="utf-8")
        doc = f"{path.relative_to(ROOT)}"
        ordinals[doc] = ordinals.get(doc, 0) + 1
        files[name.name] = (doc, line, ordinals[doc])
    args = ["--strict", "--no-error-summary", "--show-error-codes",
            "--cache-dir", str(ROOT / ".mypy_cache"),
            "--config-file", str(ROOT / "pyproject.toml"),
            *map(str, TYPED), *(str(tmp_path / name) for name in files)]
    limit = sys.getrecursionlimit()
    try:
        out, err, _status = mypy_api.run(args)
    finally:  # mypy raises the process's recursion limit and leaves it raised
        sys.setrecursionlimit(limit)
    failures: dict[str, list[str]] = {}
    for raw in out.splitlines():
        match = _ERROR.match(raw)
        if not match:
            continue
        origin = files.get(Path(match["file"]).name) if "block_" in match["file"] else None
        if origin is None:
            where, key = f"{match['file']}:{match['line']}", match["file"]
        else:
            # +1: the block's first line is the line after the fence
            where = f"{origin[0]}:{origin[1] + int(match['line'])}"
            key = f"{origin[0]}#{origin[2]}"
        failures.setdefault(key, []).append(f"{where}: {match['text']}")
    assert not err, err
    message = "\n".join(line for lines in failures.values() for line in lines)
    assert not failures, f"mypy --strict errors:\n{message}"
