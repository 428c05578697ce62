"""What the model sees, per catalogued model (issue 51): for a sample of up to five models of
every provider (spread over its APIs and its list), one tool-call conversation (a reasoning
model twice: thinking at ``medium`` and ``off``) runs through
pi-agent-core 1.6.0 with pi-ai 1.6.1's ``streamSimple`` (``pi_catalogue_driver.mjs requests``,
the model taken from pi-ai's provider modules) and through piagent's ``Agent`` with its real
adapters (``request_driver.run``: ``get_model`` of the same id), both at one
``CaptureServer``; the recorded requests (path, kept headers, body) must be identical, or
differ as a row of ``CATALOGUE_ROWS`` says (docs/reference.md).

The thinking runs put each model's thinking format, thinking levels and compat flags in the
body.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from piagent.providers import get_models, get_providers

from .conftest import DRIVER_TIMEOUT_S, HERE, PI16, node_command
from .ref_normalise import _first_path
from .request_capture import API_PATH, CaptureServer
from .request_differences import REQUEST_ROWS
from .request_driver import run
from .test_requests_side_by_side import normalise, request_difference

PER_PROVIDER = 5
W = {"calls": [["weather", {"city": "Paris"}]]}
CATALOGUE = json.loads((HERE.parent.parent / "piagent" / "providers" / "models.json")
                       .read_text(encoding="utf-8"))["providers"]


@dataclass(frozen=True)
class CatalogueRow:
    """A declared difference (a row of docs/reference.md): pi-ai 1.6.1 acts on a catalogue
    field whose request behaviour piagent's builders do not have yet; the data keeps it."""

    reason: str
    api: str | None  # the API it applies to (None: any)
    paths: str  # a regex the first differing path of the bodies matches
    fields: tuple[str, ...]  # the catalogue fields that cause it (the model has one of them)

    def covers(self, entry: dict[str, Any], path: str) -> bool:
        has = {*entry, *(entry.get("compat") or {})}
        return (self.api in (None, entry["api"]) and re.fullmatch(self.paths, path) is not None
                and (not self.fields or bool(has & set(self.fields))))


# empty since pi-ai 1.6.1's per-model request features were adopted (Anthropic's managed
# effort, native tool changes and fallbacks; Responses' additional_tools, configuration_update
# and reasoning with thinking off; Gemini's thinking levels and budgets): a future row names
# what piagent's builders do not have yet
CATALOGUE_ROWS: dict[str, CatalogueRow] = {}


def sample(provider: str) -> list[str]:
    """Up to ``PER_PROVIDER`` model ids: round robin over the provider's APIs, each API's
    models taken evenly spread over its list (deterministic). Only the APIs the capture
    server speaks: the cloud APIs of issue 52 have their own differential (test_wire_*.py)."""
    by_api: dict[str, list[str]] = {}
    for model in get_models(provider):
        if model.api in API_PATH:
            by_api.setdefault(model.api, []).append(model.id)
    spread = {api: [ids[(i * len(ids)) // min(len(ids), PER_PROVIDER)]
                    for i in range(min(len(ids), PER_PROVIDER))]
              for api, ids in sorted(by_api.items())}
    out: list[str] = []
    while len(out) < PER_PROVIDER and any(spread.values()):
        for ids in spread.values():
            if ids and len(out) < PER_PROVIDER:
                out.append(ids.pop(0))
    return out


def _reasoning(provider: str, model_id: str) -> bool:
    return next(m.reasoning for m in get_models(provider) if m.id == model_id)


CASES = [(provider, model_id, thinking) for provider in get_providers()
         for model_id in sample(provider)
         for thinking in (("medium", "off") if _reasoning(provider, model_id) else ("off",))]


def _conversation(provider: str, model_id: str, thinking: str) -> dict[str, Any]:
    return {"name": f"{provider}/{model_id}", "system": "Be brief.", "tools": ["weather"],
            "thinking": thinking, "steps": [{"prompt": "Weather?"}],
            "script": [W, {"text": "Done."}]}


def _key(provider: str, model_id: str, thinking: str) -> str:
    return f"{provider}--{model_id}--{thinking}".replace("/", "~")


def _spec(server: CaptureServer, case: tuple[str, str, str], side: str) -> dict[str, str]:
    provider, model_id, thinking = case
    api = next(m.api for m in get_models(provider) if m.id == model_id)
    conv = _conversation(*case)
    base = server.add_run(f"{_key(*case)}--{side}", api, conv["script"])
    return {"provider": provider, "id": model_id, "api": api, "baseUrl": base}


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureServer]:
    with contextlib.closing(CaptureServer()) as server:
        yield server


@pytest.fixture(scope="module")
def pi_runs(pi16_installed: Path, capture: CaptureServer,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    jobs = [{"key": _key(*case), "model": _spec(capture, case, "pi"),
             "conversation": _conversation(*case)} for case in CASES]
    path = tmp_path_factory.mktemp("catalogue") / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}))
    done = subprocess.run([*node_command(PI16, "pi_catalogue_driver.mjs"), "requests",
                           str(path)], cwd=HERE, capture_output=True, text=True,
                          timeout=DRIVER_TIMEOUT_S,
                          # the AWS SDK speaks HTTP/2 unless told (the server: HTTP/1.1)
                          env={**os.environ, "AWS_BEDROCK_FORCE_HTTP1": "1"})
    assert done.returncode == 0, f"pi_catalogue_driver.mjs failed:\n{done.stderr[-4000:]}"
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_rows_are_documented() -> None:
    """Every row is a row of docs/reference.md's deliberate differences."""
    text = (HERE.parent.parent / "docs" / "reference.md").read_text()
    for name in CATALOGUE_ROWS:
        assert any(ln.startswith(f"| `{name}`") for ln in text.splitlines()), \
            f"docs/reference.md has no row `{name}`"


def test_enough_models_per_provider() -> None:
    for provider in get_providers():
        spoken = [m for m in get_models(provider) if m.api in API_PATH]
        assert len(sample(provider)) == min(PER_PROVIDER, len(spoken)), provider
    assert len({(p, m) for p, m, _ in CASES}) >= 150


@pytest.mark.parametrize(("provider", "model_id", "thinking"), CASES,
                         ids=[f"{p}/{m}@{t}" for p, m, t in CASES])
def test_requests_are_pi_s(provider: str, model_id: str, thinking: str,
                           capture: CaptureServer, pi_runs: dict[str, Any]) -> None:
    case = (provider, model_id, thinking)
    key = _key(*case)
    assert pi_runs[key] == {"ok": True}, pi_runs[key]
    run(_conversation(*case), _spec(capture, case, "py"))
    pi = normalise(capture.requests(f"{key}--pi"))
    ours = normalise(capture.requests(f"{key}--py"))
    entry = CATALOGUE[provider][model_id]
    if entry["api"] == "anthropic-messages":
        pi = REQUEST_ROWS["request-anthropic-path"].transform(pi, {}, entry["api"])
    dump = os.environ.get("PIAGENT_REQUEST_DUMP")  # a folder: both sides' requests, by hand
    if dump:
        Path(dump, f"{key}.json").write_text(json.dumps({"pi": pi, "piagent": ours}, indent=1))
    difference = request_difference(pi, ours)
    path = next((_first_path(a, b) for a, b in zip(pi, ours, strict=False) if a != b), None)
    for name, row in CATALOGUE_ROWS.items():
        if difference and path and row.covers(entry, path):
            pytest.xfail(f"[{name}] {row.reason}: {difference}")
    assert difference is None, f"{provider}/{model_id}: piagent's requests differ from " \
                               f"pi's:\n{difference}"
