"""Inside the rooms: no module reaches into another module's objects' private attributes, no
``Any`` stands for the agent, a run or a host, every module is at most 500 lines, the error
tree drawn in ``piagent/errors.py`` names every exception class, and the table of where
prompt, abort, approval and budget enter and are decided (``docs/architecture.md``) names
files and functions that exist.

The private-attribute check is read from the code (AST): ``other._x`` is a reach when
``other`` is not ``self``/``cls``/``super()`` and ``_x`` is not a private attribute of a
class the same module defines (one it assigns as ``self._x``/``cls._x`` or defines in a class
body; a ``Protocol``'s declarations own nothing). Only the stdlib's own underscore API is exempt (``STDLIB_UNDERSCORE``),
and Django's documented one (a model's ``_meta`` and ``_default_manager``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "piagent"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 500

# the stdlib's underscore API, which is public by its own documentation: a namedtuple's
# _replace/_asdict/_fields/_make/_field_defaults, os._exit, sys._getframe and
# sys._current_frames, and the _thread module
STDLIB_UNDERSCORE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults",
                               "_exit", "_getframe", "_current_frames", "_thread",
                               # Django's documented model API (docs: "Model _meta API")
                               "_meta", "_default_manager"})

MODULES = sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _own_privates(tree: ast.AST) -> set[str]:
    """The private names the module's own classes define: ``self._x = ...`` (or ``cls._x``)
    anywhere in it, and names defined in a class body."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef) and not any(
                ast.unparse(base).endswith("Protocol") for base in node.bases):
            # (a Protocol's private members are another class's: declaring them owns nothing)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(item.name)
                elif isinstance(item, ast.Assign):
                    names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            for item in node.body:  # __slots__ = ("_a", "_b")
                if isinstance(item, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets):
                    names.update(e.value for e in ast.walk(item.value)
                                 if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return names


def private_reaches(path: Path) -> list[str]:
    """``line: expression`` for every reach into a private attribute the module does not own."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _own_privates(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in STDLIB_UNDERSCORE:
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id == "super"):
            continue
        if name in own:
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", [pytest.param(path, id=_rel(path)) for path in MODULES])
def test_no_module_reaches_into_another_modules_private_attributes(path: Path) -> None:
    reaches = private_reaches(path)
    assert not reaches, f"{_rel(path)} reaches into private attributes:\n" + "\n".join(reaches)


def test_the_reach_check_finds_a_reach_and_leaves_own_attributes_alone(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os, sys\n"
        "class A:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    def same(self, other):\n"
        "        return other._mine + super()._x + sys._getframe().f_lineno\n"
        "def f(agent, p):\n"
        "    os._exit(0)\n"
        "    return agent._state, p._replace(a=1)\n", encoding="utf-8")
    assert private_reaches(module) == ["9: agent._state"]


# --- no Any standing for the agent, a run or a host ---------------------------------------

HOST_NAMES = re.compile(r"^_?(agent|run|host|owner|runner|agent_run)$")


def _any_hosts(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        targets: list[tuple[str, ast.expr | None, int]] = []
        if isinstance(node, ast.arg):
            targets.append((node.arg, node.annotation, node.lineno))
        elif isinstance(node, ast.AnnAssign):
            target = node.target
            name = target.attr if isinstance(target, ast.Attribute) else \
                target.id if isinstance(target, ast.Name) else ""
            targets.append((name, node.annotation, node.lineno))
        for name, annotation, line in targets:
            if annotation is None or not HOST_NAMES.match(name):
                continue
            text = ast.unparse(annotation)
            if re.search(r"\bAny\b", text):
                found.append(f"{line}: {name}: {text}")
    return found


@pytest.mark.parametrize("path", [p for p in MODULES if p.parent.name in
                                  ("agent", "loop", "runs")], ids=_rel)
def test_no_any_stands_for_the_agent_a_run_or_a_host(path: Path) -> None:
    found = _any_hosts(path)
    assert not found, f"{_rel(path)} types a host as Any:\n" + "\n".join(found)


# --- module size -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_every_module_is_at_most_500_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{_rel(path)} has {lines} lines (at most {MAX_LINES})"


# --- the error tree ------------------------------------------------------------------------


def test_the_drawn_error_tree_names_every_exception_class_piagent_defines() -> None:
    drawn = ast.get_docstring(ast.parse((PACKAGE / "errors.py").read_text(encoding="utf-8")))
    assert drawn is not None
    in_tree = set(re.findall(r"(?:^\s*|── )([A-Z]\w+)", drawn, flags=re.MULTILINE))
    bases: dict[str, set[str]] = {}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(
                    b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                    if isinstance(b, ast.Name | ast.Attribute))
    ours, grown = {"PiAgentError"}, True
    while grown:
        new = {name for name, of in bases.items() if of & ours} - ours
        ours |= new
        grown = bool(new)
    assert len(ours) > 15
    assert ours - in_tree == set(), "errors.py's drawn tree leaves out these classes"


# --- where things enter and are decided ----------------------------------------------------


def _where_table() -> list[tuple[str, str, str]]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n## Where things enter and are decided\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("what", "---"):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def _defines(path: Path, qualified: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scope: list[ast.stmt] = tree.body
    for part in qualified.split("."):
        found = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                      and n.name == part), None)
        if found is None:
            return False
        scope = found.body
    return True


def test_the_where_table_names_each_thing_once_and_files_and_functions_that_exist() -> None:
    rows = _where_table()
    assert [row[0] for row in rows] == ["prompt", "abort", "approval", "budget"]
    for what, *places in rows:
        for place in places:
            match = re.fullmatch(r"`([\w/]+\.py)` `([\w.]+)`", place)
            assert match is not None, f"{what}: {place!r} is not '`file` `function`'"
            path = ROOT / match.group(1)
            assert path.is_file(), f"{what}: {match.group(1)} does not exist"
            assert _defines(path, match.group(2)), \
                f"{what}: {match.group(1)} defines no {match.group(2)}"
