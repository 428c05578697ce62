"""The examples leave the checkout as they found it: run from the repository root with no
``--db`` and no ``$PIAGENT_CHAT_DB``, the web chat (one run through its test client) and the
session scripts write their files in the system's temporary folder, never beside the code
(``.gitignore``'s ``*.db`` is only the backstop)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# what tools, not examples, leave in a checkout
_CACHES = ("__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache",
           "node_modules", ".coverage")

FLASK_RUN = r"""
import sys
sys.path.insert(0, "examples/flask_chat")
import app as flask_chat
application = flask_chat.create_app(flask_chat.agent_factory(step_s=0.0, chunk_delay=0.0))
client = application.test_client()
assert client.get("/").status_code == 200
run_id = client.post("/chat", json={"message": "count to 3"}).get_json()["run_id"]
assert b"agent_end" in client.get(f"/events/{run_id}").data
print(application.config["CHAT"].store.engine.url.database)
"""


def _untracked() -> set[str]:
    """Every file of the checkout git does not track, ignored ones included."""
    listing = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "-z"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    paths = {entry[3:] for entry in listing.split("\0") if entry[:2] in ("??", "!!")}
    return {p for p in paths if not any(part in _CACHES for part in Path(p).parts)}


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs the git checkout")
@pytest.mark.timeout(120)
def test_examples_run_from_the_root_leave_the_checkout_clean(tmp_path: Path) -> None:
    pytest.importorskip("flask")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    env.pop("PIAGENT_CHAT_DB", None)
    before = _untracked()
    flask = subprocess.run([sys.executable, "-c", FLASK_RUN], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
    assert flask.returncode == 0, flask.stderr
    assert Path(flask.stdout.strip()) == tmp_path / "piagent-examples" / "chat.db"
    assert (tmp_path / "piagent-examples" / "chat.db").is_file()
    for script in ("session_store.py", "save_resume.py"):
        proc = subprocess.run([sys.executable, f"examples/{script}"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert _untracked() - before == set()
