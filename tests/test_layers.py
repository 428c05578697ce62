"""The architecture, checked: imports point down the layers, privates stay in their folder
(in ``tests/`` too), no import cycle, and ``docs/architecture.md`` maps every module that
exists.

The layers are read from ``docs/architecture.md``'s diagram (the fenced block under
"## Layers": each line a layer's number, then its names), so the page and this test cannot
drift: a module may import only from lower layers, or from inside its own top-level package.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "piagent"
TESTS = ROOT / "tests"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def diagram_layers(text: str) -> dict[str, int]:
    """Each name of the "## Layers" diagram and its layer number.

    A line is ``<number> <names> (<comment>)``: parenthesised text is a comment, ``piagent``
    is the facade (``__init__``), ``piagent.x`` is ``x``.
    """
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```[^\n]*\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    assert block is not None, "docs/architecture.md's Layers section has no fenced diagram"
    layers: dict[str, int] = {}
    numbers: list[int] = []
    for line in block.group(1).splitlines():
        match = re.fullmatch(r"\s*(\d+)\s+(.*)", line)
        assert match is not None, f"a diagram line is not '<number> <names>': {line!r}"
        number = int(match.group(1))
        numbers.append(number)
        for word in re.split(r"[\s,]+", re.sub(r"\([^)]*\)", " ", match.group(2)).strip()):
            name = "__init__" if word == "piagent" else word.removeprefix("piagent.")
            assert name not in layers, f"{name!r} stands twice in the diagram"
            layers[name] = number
    assert sorted(numbers) == list(range(len(numbers))), f"layer numbers {numbers}"
    return layers


LAYER_OF = diagram_layers(ARCHITECTURE.read_text(encoding="utf-8"))

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
    assert missing == [], f"add these to docs/architecture.md's layer diagram: {missing}"


def test_the_diagram_names_only_what_exists() -> None:
    unknown = sorted(set(LAYER_OF) - {_component(m) for m in MODULES})
    assert unknown == [], f"docs/architecture.md's diagram names what does not exist: {unknown}"


def test_the_diagram_is_read_line_by_line() -> None:
    """The parser itself: numbers, names, comments, the facade; a missing layer is missing."""
    page = ("# A\n\n## Layers\n\n```\n2 piagent (the facade), piagent.__main__\n"
            "1  web   cli (a comment, here)\n0 errors\n```\n\n## Next\n")
    assert diagram_layers(page) == {"__init__": 2, "__main__": 2, "web": 1, "cli": 1,
                                    "errors": 0}
    with pytest.raises(AssertionError, match="layer numbers"):
        diagram_layers(page.replace("1  web", "3  web"))


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


def _private_imports(name: str, path: Path, folder_of_importer: str) -> Iterator[str]:
    """``path:line imports private x`` for each private module imported from outside its
    folder (the folder's subfolders are inside)."""
    for line, target in _imports(name, path):
        parts = target.split(".")
        private = [i for i, part in enumerate(parts) if part.startswith("_")
                   and part not in ("__init__", "__main__")]
        if not private:
            continue
        folder = ".".join(parts[:private[0]])  # the package the private module lives in
        inside = folder_of_importer == folder or folder_of_importer.startswith(folder + ".")
        if not inside and (name, target) not in ALLOWED_PRIVATE:
            yield f"{path.relative_to(ROOT)}:{line} imports private {target}"


def test_private_modules_are_imported_only_from_their_folder() -> None:
    wrong = []
    for name, path in MODULES.items():
        folder = name if path.name == "__init__.py" else name.rpartition(".")[0]
        wrong += _private_imports(name, path, folder)
    assert wrong == []


def _test_folder(path: Path) -> str:
    """The package a test file's folder tests: ``tests/runs/x.py`` tests ``piagent.runs``."""
    return ".".join(["piagent", *path.parent.relative_to(TESTS).parts])


def test_tests_import_only_their_own_folders_privates() -> None:
    """Tests of ``tests/<folder>/`` may import ``piagent/<folder>/``'s private modules;
    nothing else (another folder's privates are reached through its public names)."""
    files = [p for p in sorted(TESTS.rglob("*.py")) if "node_modules" not in p.parts]
    wrong = []
    for path in files:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        wrong += _private_imports(name, path, _test_folder(path))
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
