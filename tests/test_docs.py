"""Every ```python block in docs/*.md and README.md runs.

Each block runs in a fresh namespace, in a temporary working folder, with no default stream
function, no provider keys and no connections beyond localhost, so a block that would
reach a real provider fails instead of silently going online. A block that truly needs a
real key or server opts out with ``<!-- no-run -->`` on the line before its fence; those
must stay few.
"""

from __future__ import annotations

import re
import socket
import sys
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
NO_RUN = "<!-- no-run -->"
MAX_NO_RUN = 12
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                  "GROQ_API_KEY", "OPENROUTER_API_KEY", "XAI_API_KEY", "MISTRAL_API_KEY")


def _blocks(path: Path) -> list[tuple[int, str, bool]]:
    """(line number, code, skipped) for each python block of a Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match and match.group(2):
            indent, language, start = match.group(1), match.group(2), i
            i += 1
            body = []
            while i < len(lines) and not re.match(rf"^{indent}```\s*$", lines[i]):
                body.append(lines[i])
                i += 1
            if language == "python":
                previous = next((lines[j].strip() for j in range(start - 1, -1, -1)
                                 if lines[j].strip()), "")
                blocks.append((start + 1, textwrap.dedent("\n".join(body)), previous == NO_RUN))
        i += 1
    return blocks


ALL_BLOCKS = [(path, line, code, skipped) for path in DOCS if path.exists()
              for line, code, skipped in _blocks(path)]


def test_docs_have_runnable_blocks():
    assert len([b for b in ALL_BLOCKS if not b[3]]) >= 20


def test_no_run_blocks_are_few():
    skipped = [f"{path.name}:{line}" for path, line, _, skip in ALL_BLOCKS if skip]
    assert len(skipped) <= MAX_NO_RUN, skipped


@pytest.fixture
def offline(monkeypatch, tmp_path):
    import piagent

    for name in _KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    real_connect = socket.socket.connect

    def connect(sock, address):
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and host not in ("127.0.0.1", "::1", "localhost"):
            msg = f"documentation examples must run offline; a block tried to reach {address!r}"
            raise OSError(msg)
        return real_connect(sock, address)

    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host not in (None, "127.0.0.1", "::1", "localhost"):
            msg = f"documentation examples must run offline; a block looked up {host!r}"
            raise OSError(msg)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.chdir(tmp_path)
    # no block may fall back to a provider
    piagent.set_default_stream_fn(None)
    yield
    piagent.reset_default_stream_fn()
    piagent.loop.set_tracing(None)  # a block that turned piagent.otel on leaves it off


@pytest.mark.parametrize(
    ("path", "line", "code"),
    [pytest.param(path, line, code, id=f"{path.name}:{line}",
                  marks=[pytest.mark.skip(reason="marked no-run")] if skip else [])
     for path, line, code, skip in ALL_BLOCKS])
def test_doc_block_runs(path, line, code, offline, monkeypatch):
    if "from django" in code:  # the tests' Django settings, configured once per process
        from tests.conftest import configure_django

        configure_django()
    # A real module, so dataclasses and typing can find the block's globals.
    module = types.ModuleType("__docs__")
    monkeypatch.setitem(sys.modules, "__docs__", module)
    # Pad so tracebacks point at the Markdown line of the failing statement.
    source = "\n" * line + code
    exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)


def test_readme_opens_with_the_two_commands():
    """The first lines of the README are the lead's two commands, exactly (``.ci/run``
    runs the second)."""
    lines = [line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    assert lines[:4] == ["# piagent", "```sh", "pip install . && python -m piagent demo",
                         "pip install '.[test]' && python -m pytest"]


def test_readme_says_how_long_the_test_suite_takes():
    """Issue 49 item 6: a new user running the second command knows what to expect."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "the whole suite takes about 15 minutes on a 2-core machine" in text


# Pages other engineers write; a link to one of them may land before the page does.
_OTHERS = {"providers.md", "proxy.md", "web.md"}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(path):
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        resolved = (path.parent / target).resolve()
        if resolved.name in _OTHERS:
            continue
        assert resolved.exists(), f"{path.name} links to missing {target}"
