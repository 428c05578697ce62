"""The modules that execute a tool batch, checked: docs/architecture.md's module map names
them (rows ending ``(executes a batch)``), together they stay under 600 lines and each
under 500; they reach into no other object's private attributes, and the runner a run keeps
between batches holds no per-batch state (a ``Batch`` is made per batch)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BATCH_LIMIT = 600
MODULE_LIMIT = 500


def batch_modules() -> list[Path]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    names = re.findall(r"^\| `(piagent/[\w/]+\.py)` \| .*\(executes a batch\) \|$", text,
                       flags=re.MULTILINE)
    return [ROOT / name for name in names]


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_modules_that_execute_a_batch_are_named_and_stay_small() -> None:
    modules = batch_modules()
    assert {p.name for p in modules} >= {"_tools.py", "_call.py", "_approval.py"}
    assert all(p.is_file() for p in modules), [str(p) for p in modules if not p.is_file()]
    sizes = {p.name: lines(p) for p in modules}
    assert sum(sizes.values()) < BATCH_LIMIT, sizes
    assert max(sizes.values()) <= MODULE_LIMIT, sizes


def _private_reaches(path: Path) -> list[str]:
    """``other._x`` where ``other`` is not ``self``, ``cls`` or ``super()``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if (isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name)
                and owner.func.id == "super"):
            continue
        found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_no_private_attribute_is_reached_into_or_out_of_the_batch_modules() -> None:
    modules = batch_modules()
    assert modules and [r for p in modules for r in _private_reaches(p)] == []
    # nothing to reach into either: their objects keep no private attributes
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                private = node.attr.startswith("_") and not node.attr.startswith("__")
                assert not private, f"{path.name}:{node.lineno} {node.attr}"


def test_the_runner_keeps_no_state_of_a_batch() -> None:
    """``ToolRunner`` sets its fields once, when the run starts (its pool when first
    needed); ``run_batch`` assigns none, so a batch's state lives in its ``Batch``."""
    tree = ast.parse((ROOT / "piagent" / "loop" / "_tools.py").read_text(encoding="utf-8"))
    runner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ToolRunner")
    assigned = {method.name: sorted({node.attr for node in ast.walk(method)
                                     if isinstance(node, ast.Attribute)
                                     and isinstance(node.ctx, ast.Store)})
                for method in runner.body if isinstance(method, ast.FunctionDef)}
    assert assigned == {"__init__": ["abandoned", "cap", "emit", "executor", "own", "signal",
                                     "timed", "timeout", "trace"],
                        "submit": ["own"], "close": ["own"], "run_batch": []}
