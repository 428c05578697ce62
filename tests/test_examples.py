"""Every script in examples/ runs offline and prints what it promises; the notebook runs
top to bottom in a real kernel (or, if no kernel can start, cell by cell inside a running
event loop, which is the situation a Jupyter cell is in)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

EXPECTED = {
    "hello.py": ["[tool] greet({'name': 'Ada'})",
                 "final answer: The greet tool says: Hello, Ada! Welcome to piagent."],
    "parallel_tools.py": ["completion order: call_2, call_1",
                          "transcript order: call_1, call_2"],
    "steering.py": ["steered while the tool was running",
                    "transcript: user -> assistant -> toolResult -> user -> assistant",
                    "'Only list the ones from this year.'"],
    "follow_up.py": ["user: Now write the summary.", "assistant: Done: Now write the summary.",
                     "continue: Done: And a title, please."],
    "approval_hook.py": ["approval: delete_file {'path': 'old.txt'} -> no",
                         "delete_file: error: The user declined this deletion.",
                         "files left: ['draft.txt', 'old.txt']"],
    "custom_message.py": ["roles sent to the model: ['system', 'user', 'user']",
                          "[note from the app] The user is on the free plan.",
                          "round trip ok"],
    "tool_set_change.py": ["tools_added: ['calculator']", "tools_removed: ['search']",
                           "declared: ['calculator']"],
    "save_resume.py": ["saved 5 messages", "system prompt after loading: You remember things.",
                       "So far you said: My name is Linh. | I like green tea. | What do you "
                       "know about me?"],
    "mcp_tools.py": ["connected to mcp-time (2026-07-28)",
                     "tools: get_current_time, convert_time",
                     "[tool] get_current_time -> error=False", "final answer: In Tokyo it is "],
    "session_store.py": ["stored 5 messages in chat.db",
                         "So far you said: My name is Linh. | I like green tea. | What do you "
                         "know about me?", "sessions: ['user-42']"],
}


def _run(script: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_every_example_has_a_test():
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_offline(name, tmp_path):
    proc = _run(EXAMPLES / name, tmp_path)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    for text in EXPECTED[name]:
        assert text in proc.stdout, f"{name}: {text!r} not in output:\n{proc.stdout}"


def _code_cells(nb):
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def _outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            data = output.get("data", {})
            parts.append(data.get("text/plain", ""))
            if output.get("output_type") == "error":
                parts.append("\n".join(output.get("traceback", [])))
    return "\n".join(parts)


NOTEBOOK_EXPECTED = ["an event loop is running", "That sentence has 5 words.",
                     "Streaming works in a notebook too.", "Noted: Keep it to one line."]


def test_notebook_runs_top_to_bottom(tmp_path, capsys, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    try:
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError:  # pragma: no cover - nbclient is a test extra
        NotebookClient = None  # noqa: N806
    if NotebookClient is not None:
        client = NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=False,
                                resources={"metadata": {"path": str(tmp_path)}})
        try:
            client.execute()
        except CellExecutionError:
            raise
        except Exception as exc:  # the kernel could not start here: run the cells ourselves
            print(f"kernel unavailable ({type(exc).__name__}: {exc}); running cells in-process")
        else:
            text = _outputs_text(nb)
            for expected in NOTEBOOK_EXPECTED:
                assert expected in text, f"{expected!r} not in the notebook's output:\n{text}"
            return

    async def run_cells() -> None:
        namespace: dict[str, object] = {"__name__": "__main__"}
        for index, source in enumerate(_code_cells(nb)):
            exec(compile(source, f"notebook.ipynb cell {index}", "exec"), namespace)

    monkeypatch.chdir(tmp_path)
    asyncio.run(run_cells())
    out = capsys.readouterr().out
    for expected in NOTEBOOK_EXPECTED:
        assert expected in out
