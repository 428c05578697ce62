"""Regenerate ``piagent/providers/models.json`` from an ``npm pack`` of ``@earendil-works/pi-ai``.

Offline: it reads only the tarball (``npm pack @earendil-works/pi-ai@1.6.1`` writes
``earendil-works-pi-ai-1.6.1.tgz``)::

    python scripts/gen_catalogue.py path/to/earendil-works-pi-ai-1.6.1.tgz

What it takes from the package:

- ``dist/providers/data/*.json``: every chat model (``"type": "chat"``) of every provider, in
  pi-ai's order, flattened as pi-ai's ``flattenChatModelCatalog`` does (one entry per model
  id; a later API group's entry wins). Models on the APIs piagent speaks go to
  ``providers`` with every field pi-ai has (``id``, ``provider`` and ``type`` are implied);
  the others go to ``unsupported`` (id -> API) so ``piagent models --all`` can say why.
- ``dist/env-api-keys.js``: the environment variables holding each provider's key;
  ``dist/providers/<id>.js``: each provider's display name.
- ``package.json``: the version and licence; the licence text (``LICENSE`` if the tarball
  has one, else the MIT text with the package's author) is kept in ``source.notice``.

docs/providers.md ("The catalogue") says when to rerun it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

SPOKEN_APIS = ("openai-completions", "openai-responses", "anthropic-messages",
               "google-generative-ai",
               "google-vertex",
               "bedrock-converse-stream",
               "azure-openai-responses",
               "mistral-conversations")
OUT = Path(__file__).resolve().parent.parent / "piagent" / "providers" / "models.json"
_DROPPED = ("id", "provider", "type")  # implied by where the entry sits

_MIT = """MIT License

Copyright (c) {author}

Permission is hereby granted, free of charge, to any person obtaining a copy of this software \
and associated documentation files (the "Software"), to deal in the Software without \
restriction, including without limitation the rights to use, copy, modify, merge, publish, \
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the \
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or \
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING \
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND \
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, \
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, \
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""


def read_package(tarball: Path) -> dict[str, str]:
    """The files of the tarball this script reads, by path below ``package/``."""
    wanted = re.compile(r"^package/(package\.json|LICENSE(\.md|\.txt)?|dist/env-api-keys\.js|"
                        r"dist/providers/data/[^/.][^/]*\.json|dist/providers/[\w-]+\.js)$")
    files: dict[str, str] = {}
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and wanted.match(member.name):
                handle = tar.extractfile(member)
                assert handle is not None
                files[member.name.removeprefix("package/")] = handle.read().decode("utf-8")
    if "package.json" not in files or not any(k.startswith("dist/providers/data/")
                                              for k in files):
        sys.exit(f"{tarball}: not an npm pack of @earendil-works/pi-ai (no package.json or "
                 "dist/providers/data/*.json)")
    return files


def chat_models(files: dict[str, str]) -> dict[str, dict[str, dict[str, Any]]]:
    """provider -> model id -> pi-ai's entry, as ``flattenChatModelCatalog`` builds them."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in sorted(k for k in files if k.startswith("dist/providers/data/")):
        groups: dict[str, dict[str, dict[str, Any]]] = json.loads(files[name])
        for models in groups.values():
            for entry in models.values():
                if entry.get("type") == "chat":
                    out.setdefault(entry["provider"], {})[entry["id"]] = entry
    return out


def env_vars(source: str) -> dict[str, list[str]]:
    """provider -> key variables, from ``getApiKeyEnvVars`` in ``dist/env-api-keys.js``."""
    body = re.search(r"function getApiKeyEnvVars\(provider\) \{(.*?)\n\}", source, re.S)
    if body is None:
        sys.exit("dist/env-api-keys.js: no getApiKeyEnvVars(provider) function")
    text = body.group(1)
    consts = dict(re.findall(r'export const (\w+) = "([^"]+)";', source))
    out: dict[str, list[str]] = {}
    for provider, returned in re.findall(r'provider === "([^"]+)"\) \{\s*return \[([^\]]*)\]',
                                         text):
        out[provider] = _names(returned, consts)
    env_map = re.search(r"const envMap = \{(.*?)\n    \};", text, re.S)
    if env_map is None:
        sys.exit("dist/env-api-keys.js: no envMap in getApiKeyEnvVars")
    pattern = r'^\s*"?([\w.-]+)"?: (\[[^\]]*\]|"[^"]*"),'
    for provider, value in re.findall(pattern, env_map.group(1), re.M):
        out[provider] = _names(value, consts)
    return out


def provider_names(files: dict[str, str]) -> dict[str, str]:
    """provider -> display name, from each ``dist/providers/<id>.js``'s ``createProvider``."""
    out: dict[str, str] = {}
    for name in sorted(files):
        if name.startswith("dist/providers/") and name.endswith(".js"):
            found = re.search(r'createProvider\(\{\s*id: "([^"]+)",\s*name: "([^"]+)"',
                              files[name])
            if found:
                out[found.group(1)] = found.group(2)
    return out


def _names(value: str, consts: dict[str, str]) -> list[str]:
    return [consts.get(token, token.strip('"'))
            for token in (t.strip() for t in value.strip("[]").split(",")) if token]


def notice(files: dict[str, str], package: dict[str, Any]) -> str:
    for name in ("LICENSE", "LICENSE.md", "LICENSE.txt"):
        if name in files:
            return files[name]
    if package.get("license") != "MIT":
        sys.exit(f"package.json: licence {package.get('license')!r}, not MIT: check the terms "
                 "before bundling its data")
    return _MIT.format(author=package.get("author") or "the pi-ai authors")


def build(tarball: Path) -> str:
    """The text of ``models.json`` for the pi-ai tarball ``tarball``."""
    files = read_package(tarball)
    package = json.loads(files["package.json"])
    models = chat_models(files)
    keys = env_vars(files.get("dist/env-api-keys.js", ""))
    spoken: dict[str, dict[str, dict[str, Any]]] = {}
    unsupported: dict[str, dict[str, str]] = {}
    for provider, entries in models.items():
        for model_id, entry in entries.items():
            if entry["api"] in SPOKEN_APIS:
                kept = {k: v for k, v in entry.items() if k not in _DROPPED}
                spoken.setdefault(provider, {})[model_id] = kept
            else:
                unsupported.setdefault(provider, {})[model_id] = entry["api"]
    head = {
        "source": {"package": package["name"], "version": package["version"],
                   "license": package.get("license"), "notice": notice(files, package)},
        "note": (f"Generated by scripts/gen_catalogue.py from {package['name']} "
                 f"{package['version']} (dist/providers/data/*.json, dist/env-api-keys.js); "
                 "do not edit by hand. Prices in dollars per million tokens, as pi-ai has them."),
        "apis": list(SPOKEN_APIS),
        "keys": {p: keys[p] for p in sorted(keys)},
        "names": provider_names(files),
    }
    return _dump(head, spoken, unsupported)


def _dump(head: dict[str, Any], spoken: dict[str, dict[str, dict[str, Any]]],
          unsupported: dict[str, dict[str, str]]) -> str:
    """One model a line, so a new release's diff reads model by model."""
    lines = ["{"]
    for key, value in head.items():
        lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},")
    for section, data in (("providers", spoken), ("unsupported", unsupported)):
        lines.append(f' "{section}": {{')
        for i, (provider, entries) in enumerate(data.items()):
            lines.append(f"  {json.dumps(provider)}: {{")
            for j, (model_id, entry) in enumerate(entries.items()):
                comma = "," if j < len(entries) - 1 else ""
                text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
                lines.append(f"   {json.dumps(model_id)}: {text}{comma}")
            lines.append("  }" + ("," if i < len(data) - 1 else ""))
        lines.append(" }" + ("," if section == "providers" else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tarball", type=Path, help="an npm pack of @earendil-works/pi-ai")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default {OUT}")
    args = parser.parse_args(argv)
    text = build(args.tarball)
    json.loads(text)  # well-formed before it replaces the old file
    args.out.write_text(text, encoding="utf-8")
    data = json.loads(text)
    count = sum(len(m) for m in data["providers"].values())
    sys.stdout.write(f"{args.out}: {count} models of {len(data['providers'])} providers on "
          f"{', '.join(SPOKEN_APIS)}; {sum(len(m) for m in data['unsupported'].values())} "
          f"on other APIs ({data['source']['package']} {data['source']['version']})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
