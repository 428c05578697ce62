"""Import a recorded provider response into ``data/`` (a tool, not a test).

Three sources are understood:

* ``vcr``: a VCR/pytest-recording cassette (YAML; needs PyYAML, ``pip install pyyaml``).
  The response body is stored byte for byte as the cassette holds it; the request is stored
  as its method, URI and JSON body (headers are dropped: they hold the keys).
* ``chunks``: a capture that stored one JSON chunk per line (the Vercel AI SDK's
  ``*.chunks.txt``). The SSE framing is rebuilt (``--framing``) and the meta file says so.
* ``body``: a stored HTTP error body (the Vercel AI SDK's ``*-error.json``), kept byte for
  byte; the capture holds no status line, so ``--status`` gives the one the API sent (the
  body's own ``code`` where it has one).

Every import writes ``data/<name>.meta.json`` (provenance, API, provider, model, status) and
the body (``<name>.sse`` or, for an HTTP error, ``<name>.body``); ``sources`` rewrites
``SOURCES.md`` from the meta files. Run from the repository root::

    python -m tests.providers.recorded.import_recording vcr CASSETTE.yaml 0 my-name \\
        --api openai-completions --provider groq --server Groq --repo owner/name \\
        --path tests/x.yaml --commit SHA --license MIT --what "text + tool call"
    python -m tests.providers.recorded.import_recording sources
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
DATA = HERE / "data"

_SECRETS = [
    re.compile(r"sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"AIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{16,}"),
    re.compile(r"gsk_[A-Za-z0-9]{20,}"),
    re.compile(r"xai-[A-Za-z0-9]{20,}"),
]

FRAMINGS = {
    "completions": "rebuilt: each stored chunk line sent as `data: <line>` + blank line, then "
                   "`data: [DONE]` (the source stored only the chunk JSON)",
    "responses": "rebuilt: each stored chunk line sent as `event: <type>` + `data: <line>` + "
                 "blank line (the source stored only the event JSON)",
    "anthropic": "rebuilt: each stored chunk line sent as `event: <type>` + `data: <line>` + "
                 "blank line (the source stored only the event JSON)",
    "google": "rebuilt: each stored chunk line sent as `data: <line>` + CRLF CRLF, as Gemini "
              "frames it (the source stored only the chunk JSON)",
}


def redact(text: str) -> str:
    for pattern in _SECRETS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "[redacted]", text)
        else:
            text = pattern.sub("[redacted]", text)
    return text


def frame(lines: list[str], framing: str) -> str:
    out: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        if framing == "completions":
            out.append(f"data: {line}\n\n")
        elif framing in ("responses", "anthropic"):
            kind = json.loads(line).get("type", "message")
            out.append(f"event: {kind}\ndata: {line}\n\n")
        elif framing == "google":
            out.append(f"data: {line}\r\n\r\n")
        else:
            raise SystemExit(f"unknown framing {framing!r}")
    if framing == "completions":
        out.append("data: [DONE]\n\n")
    return "".join(out)


def _header(headers: dict[str, Any], name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return value[0] if isinstance(value, list) else str(value)
    return None


def write(name: str, meta: dict[str, Any], body: str, request: dict[str, Any] | None) -> None:
    DATA.mkdir(exist_ok=True)
    body = redact(body)
    body_file = f"{name}.sse" if meta["status"] < 300 else f"{name}.body"
    (DATA / body_file).write_bytes(body.encode())
    meta = {**meta, "body": body_file}
    if request is not None:
        (DATA / f"{name}.request.json").write_text(
            redact(json.dumps(request, indent=1, ensure_ascii=False)) + "\n")
        meta["request"] = f"{name}.request.json"
    (DATA / f"{name}.meta.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")


def import_vcr(args: argparse.Namespace) -> None:
    import yaml  # only this tool needs it

    cassette = yaml.safe_load(Path(args.file).read_text())
    interaction = cassette["interactions"][args.index]
    req, resp = interaction["request"], interaction["response"]
    body = resp["body"]["string"] if "body" in resp else json.dumps(resp["parsed_body"])
    request = {"method": req.get("method"), "uri": re.sub(r"key=[^&]+", "key=[redacted]",
                                                          req.get("uri") or "")}
    if "parsed_body" in req:
        request["body"] = req["parsed_body"]
    elif isinstance(req.get("body"), str):
        try:
            request["body"] = json.loads(req["body"])
        except ValueError:
            request["body"] = req["body"]
    status = int((resp.get("status") or {}).get("code") or 200)
    meta = _meta(args, status, _header(resp.get("headers") or {}, "content-type"),
                 "raw: the response body exactly as the cassette stored it")
    meta["source"]["interaction"] = args.index
    write(args.name, meta, body, request)


def import_chunks(args: argparse.Namespace) -> None:
    lines = Path(args.file).read_text().splitlines()
    meta = _meta(args, 200, "text/event-stream", FRAMINGS[args.framing])
    write(args.name, meta, frame(lines, args.framing), None)


def import_body(args: argparse.Namespace) -> None:
    meta = _meta(args, args.status, "application/json",
                 "raw: the error body as stored; the status is given with the import")
    write(args.name, meta, Path(args.file).read_text(), None)


def _meta(args: argparse.Namespace, status: int, content_type: str | None,
          framing: str) -> dict[str, Any]:
    return {"api": args.api, "provider": args.provider, "server": args.server,
            "model": args.model or "recorded-model", "status": status,
            "content_type": content_type or "text/event-stream", "framing": framing,
            "what": args.what,
            "source": {"repo": args.repo, "path": args.path, "commit": args.commit,
                       "license": args.license}}


def write_sources() -> None:
    metas = sorted(DATA.glob("*.meta.json"))
    lines = ["# Sources of the recorded responses", "",
             "Every file in `data/` comes from a public repository's test suite. The bodies "
             "are unmodified except where `framing` says the SSE framing was rebuilt (the "
             "source stored one JSON chunk per line) and where a secret was redacted. "
             "Written by `import_recording.py sources` from the `*.meta.json` files.", ""]
    by_repo: dict[str, str] = {}
    for path in metas:
        meta = json.loads(path.read_text())
        by_repo[meta["source"]["repo"]] = meta["source"]["license"]
    lines += ["| repository | license |", "| --- | --- |"]
    lines += [f"| {repo} | {lic} |" for repo, lic in sorted(by_repo.items())]
    lines += ["", "| recording | API | server | contains | source (repo, path, commit) | "
              "framing |", "| --- | --- | --- | --- | --- | --- |"]
    for path in metas:
        meta = json.loads(path.read_text())
        src = meta["source"]
        where = f"{src['repo']} `{src['path']}`"
        if "interaction" in src:
            where += f" (interaction {src['interaction']})"
        where += f" @ `{src['commit'][:12]}`"
        framing = "raw" if meta["framing"].startswith("raw") else "rebuilt"
        name = path.name[: -len(".meta.json")]
        lines.append(f"| `{name}` | {meta['api']} | {meta['server']} | {meta['what']} | "
                     f"{where} | {framing} |")
    lines += ["", "Framing: *raw* = the body as recorded; *rebuilt* = "
              "see the `framing` field of the meta file (for chat completions the rebuilt "
              "stream ends with `data: [DONE]`, which the live API sends but the capture "
              "did not store).", ""]
    (HERE / "SOURCES.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("vcr", "chunks", "body"):
        p = sub.add_parser(command)
        p.add_argument("file")
        if command == "vcr":
            p.add_argument("index", type=int)
        p.add_argument("name")
        if command == "chunks":
            p.add_argument("--framing", required=True, choices=sorted(FRAMINGS))
        if command == "body":
            p.add_argument("--status", required=True, type=int)
        for option in ("api", "provider", "server", "repo", "path", "commit", "license",
                       "what"):
            p.add_argument(f"--{option}", required=True)
        p.add_argument("--model")
    sub.add_parser("sources")
    args = parser.parse_args()
    if args.command == "vcr":
        import_vcr(args)
    elif args.command == "chunks":
        import_chunks(args)
    elif args.command == "body":
        import_body(args)
    write_sources()


if __name__ == "__main__":
    main()
