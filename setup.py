"""Build glue: the PyPI long description is README.md with its relative links made readable.

PyPI cannot follow a relative link such as ``[Quickstart](docs/quickstart.md)``; on the
project page it would lead nowhere. The project has no public home page yet, so instead of
guessing one, each relative link becomes its text followed by the path, which is in the
source distribution (MANIFEST.in). Absolute links are kept. Everything else is in setup.cfg.
"""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import setup

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def pypi_long_description(markdown: str) -> str:
    """``markdown`` with every relative link ``[text](path)`` rewritten to ``text (`path`)``
    and a closing line saying where those paths are."""

    def rewrite(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)
        return f"{text} (`{target}`)"

    rewritten = _LINK.sub(rewrite, markdown)
    if rewritten == markdown:
        return markdown
    return rewritten + ("\n---\n\nPaths in backticks are files in the source distribution "
                        "(`pip download --no-binary :all: --no-deps piagent`).\n")


if __name__ == "__main__":
    readme = Path(__file__).with_name("README.md").read_text(encoding="utf-8")
    setup(long_description=pypi_long_description(readme),
          long_description_content_type="text/markdown")
