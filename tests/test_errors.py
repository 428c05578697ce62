"""The error tree is true: every exception class piagent defines is a ``PiAgentError`` with
its builtin base, and the tree in ``errors.py`` is the one docs/errors.md draws."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import threading
from pathlib import Path

import pytest

import piagent
from piagent import AgentBusyError, AssistantMessage, PiAgentError
from piagent.runs import LocalRunner, RunNotFoundError
from piagent.sessions import MemoryStore, SessionCorruptError
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT, configure_django

ROOT = Path(__file__).resolve().parent.parent

# raised and caught inside one package for control flow; never reach a caller
INTERNAL = {"Aborted", "Unsupported", "_BadRequest", "_Fail", "RefusedModel"}


def _exception_classes() -> dict[str, type[BaseException]]:
    configure_django()  # piagent.contrib.django's models import only under configured settings
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(piagent.__path__, "piagent."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an extra that is not installed: nothing of ours is lost
            continue
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) \
                    and value.__module__.startswith("piagent"):
                found[value.__qualname__] = value
    return found


def test_every_exception_class_piagent_defines_is_a_piagent_error() -> None:
    classes = _exception_classes()
    assert set(classes) >= INTERNAL, "an internal exception is gone: update INTERNAL"
    outside = sorted(name for name, cls in classes.items()
                     if name not in INTERNAL and not issubclass(cls, PiAgentError))
    assert outside == []


@pytest.mark.parametrize(("cls", "builtin"), [
    (RunNotFoundError, KeyError), (SessionCorruptError, ValueError),
    (AgentBusyError, RuntimeError)])
def test_each_keeps_its_builtin_base(cls: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(cls, PiAgentError) and issubclass(cls, builtin)


def test_an_unknown_run_id_is_a_key_error_and_a_piagent_error() -> None:
    runner = LocalRunner(MemoryStore(), lambda session_id: piagent.Agent())
    with pytest.raises(KeyError) as caught:
        runner.status("nope")
    assert isinstance(caught.value, PiAgentError)
    assert isinstance(caught.value, RunNotFoundError)
    assert str(caught.value).startswith("No run 'nope' in ")


def test_the_session_busy_error_is_an_agent_busy_error() -> None:
    gate = threading.Event()

    def held(context: object, options: object) -> AssistantMessage:
        gate.wait(WAIT)
        return assistant_text("one")

    fn = ScriptedStreamFn([held])
    runner = LocalRunner(MemoryStore(), lambda session_id: piagent.Agent(
        model=fn.model, stream_fn=fn))
    first = runner.start("s", "hi")
    try:
        with pytest.raises(AgentBusyError, match=rf"Session 's' already has a live run "
                                                 rf"\('{first}'\)") as caught:
            runner.start("s", "again")
        assert isinstance(caught.value, PiAgentError) and isinstance(caught.value, RuntimeError)
    finally:
        gate.set()
    assert runner.wait(first, WAIT)


def _tree(text: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines()]
    start = lines.index("PiAgentError")
    tree = []
    for line in lines[start:]:
        if not line or line.startswith("```"):
            break
        tree.append(line)
    return tree


def test_the_docs_draw_the_tree_of_errors_py() -> None:
    doc = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    drawn = _tree(doc[doc.index("The whole hierarchy"):])
    assert drawn == _tree(piagent.errors.__doc__ or "")
    named = {m.group(1) for line in drawn
             if (m := re.match(r"^[│├└─ ]*([A-Za-z]+Error)\b", line))}
    public = {name for name, value in vars(piagent).items()
              if inspect.isclass(value) and issubclass(value, BaseException)}
    assert public | {"RunNotFoundError", "SessionCorruptError", "MCPError", "MCPConnectionError",
                     "MCPTimeoutError", "CliError", "CompactionError"} == named
