"""What PyPI gets: metadata with license and Python classifiers, a long description whose
links all work there, and a source distribution that holds every path the README names."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir",
                           str(out), str(ROOT)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = out.glob("piagent-*.whl")
    (sdist,) = out.glob("piagent-*.tar.gz")
    return wheel, sdist


def _metadata(wheel: Path) -> tuple[dict[str, list[str]], str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode("utf-8"))
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return fields, str(message.get_payload())


def test_metadata_has_license_and_python_classifiers(dists: tuple[Path, Path]) -> None:
    fields, _ = _metadata(dists[0])
    classifiers = fields["Classifier"]
    assert "License :: OSI Approved :: MIT License" in classifiers
    assert {f"Programming Language :: Python :: 3.{v}" for v in (10, 11, 12, 13)} <= set(classifiers)
    assert "Typing :: Typed" in classifiers
    assert fields["Requires-Python"] == [">=3.10"]
    assert fields["Description-Content-Type"] == ["text/markdown"]


def test_long_description_has_no_link_pypi_cannot_follow(dists: tuple[Path, Path]) -> None:
    _, description = _metadata(dists[0])
    targets = re.findall(r"\]\(([^)\s]+)\)", description)
    relative = [t for t in targets if not re.match(r"^(https?|mailto):", t)]
    assert relative == [], f"PyPI cannot follow these links: {relative}"
    assert "[pi-agent-core](https://github.com/earendil-works/pi)" in description  # kept
    assert "Quickstart (`docs/quickstart.md`)" in description
    assert "files in the source distribution" in description


def test_sdist_holds_every_path_the_readme_names(dists: tuple[Path, Path]) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = [t for t in re.findall(r"\]\(([^)\s#]+)\)", readme) if "://" not in t]
    assert named, "the README links to docs/ and examples/"
    with tarfile.open(dists[1]) as archive:
        members = [m.split("/", 1)[1] for m in archive.getnames() if "/" in m]
    for path in named:
        assert any(m == path.rstrip("/") or m.startswith(path) for m in members), path


def test_the_django_apps_templates_ship_in_both(dists: tuple[Path, Path]) -> None:
    template = "piagent/contrib/django/templates/piagent/chat.html"
    with zipfile.ZipFile(dists[0]) as archive:
        assert template in archive.namelist()
    with tarfile.open(dists[1]) as archive:
        assert any(m.endswith("/" + template) for m in archive.getnames())
    migrations = "piagent/contrib/django/migrations/0002_runs_conversations.py"
    with zipfile.ZipFile(dists[0]) as archive:
        assert migrations in archive.namelist()
