"""The architecture, checked: imports point down the layers, privates stay in their folder,
no import cycle, and ``docs/architecture.md`` maps every module that exists.

The layers, bottom to top (a module may import only from lower layers, or from inside its
own top-level package). ``docs/architecture.md`` draws the same picture.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "piagent"

LAYERS: list[set[str]] = [
    {"_version", "errors"},
    {"abort", "messages"},
    {"models", "transcript"},
    {"stream", "sessions"},
    {"tools", "providers", "testing"},
    {"events", "proxy"},
    {"loop"},
    {"agent", "mcp"},
    {"runs"},
    {"web", "cli", "celery"},
    {"__init__", "__main__"},  # the facade and the command entry point
]
LAYER_OF = {name: index for index, layer in enumerate(LAYERS) for name in layer}

# the one private name the facade reaches below its folder: how the default stream
# function (piagent.providers.stream_simple) is installed without the stream layer
# importing the providers above it
ALLOWED_PRIVATE = {("piagent", "piagent.stream._options")}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every piagent import in the module, lazy ones included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)]
            modules = [c for c in candidates if c in MODULES]
            yield from ((node.lineno, m) for m in (modules[1:] or modules[:1]) if m != name)
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name in MODULES)


GRAPH = {name: sorted({target for _, target in _imports(name, path) if target.startswith("piagent")})
         for name, path in MODULES.items()}


def _component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_has_a_layer() -> None:
    missing = sorted({_component(m) for m in MODULES} - set(LAYER_OF))
    assert missing == [], f"add these to LAYERS and docs/architecture.md: {missing}"


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for name, path in MODULES.items():
        here = _component(name)
        for line, target in _imports(name, path):
            there = _component(target)
            if there == here or target == "piagent" and here == "__init__":
                continue
            if target == "piagent" or LAYER_OF[there] >= LAYER_OF[here]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert wrong == []


def test_private_modules_are_imported_only_from_their_folder() -> None:
    wrong = []
    for name, path in MODULES.items():
        for line, target in _imports(name, path):
            parts = target.split(".")
            private = [i for i, part in enumerate(parts) if part.startswith("_")
                       and part not in ("__init__", "__main__")]
            if not private:
                continue
            folder = ".".join(parts[:private[0]])  # the package the private module lives in
            importer_folder = name if path.name == "__init__.py" else name.rpartition(".")[0]
            inside = importer_folder == folder or importer_folder.startswith(folder + ".")
            if not inside and (name, target) not in ALLOWED_PRIVATE:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports private {target}")
    assert wrong == []


def test_no_import_cycle() -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in GRAPH.get(module, []):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target] if target in path
                              else [*path, target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in MODULES:
        if module not in state:
            visit(module, [module])
    # a package's __init__ re-exporting its own private modules is not a cycle of logic,
    # but a private module importing its package's __init__ would be: both are edges here
    assert cycles == []


@pytest.mark.parametrize(("low", "high"), [("providers", "loop"), ("providers", "agent"),
                                           ("loop", "providers"), ("loop", "agent"),
                                           ("messages", "loop"), ("stream", "providers")])
def test_named_rules(low: str, high: str) -> None:
    """Providers know no loop or Agent; the loop knows no provider; messages know no loop."""
    offenders = [m for m in MODULES if _component(m) == low
                 and any(_component(t) == high for t in GRAPH[m])]
    assert offenders == []


def test_architecture_doc_maps_every_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    mapped = set(re.findall(r"^\| `(piagent/[\w/]+\.py)` \|", text, flags=re.MULTILINE))
    files = {str(p.relative_to(ROOT)) for p in MODULES.values()}
    assert sorted(files - mapped) == [], "modules missing from docs/architecture.md's map"
    assert sorted(mapped - files) == [], "docs/architecture.md maps modules that do not exist"
