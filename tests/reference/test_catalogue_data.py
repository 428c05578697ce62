"""The catalogue is pi-ai's (issue 51): piagent's ``models.json`` against the models pi-ai
1.6.1's provider modules build (``pi_catalogue_driver.mjs catalogue``, run on pi16).

Same providers and models on the APIs piagent speaks, every field equal (the raw entry,
and the ``Model`` that ``get_model`` builds from it), every other chat model listed as
unsupported with its API, the key variables pi-ai reads, and ``scripts/gen_catalogue.py``
rebuilding the committed file byte for byte from an ``npm pack`` of the installed pi-ai.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from piagent.models import CostTier, Model, ModelCost
from piagent.providers import (
    catalogue_source,
    get_api,
    get_model,
    get_providers,
    unsupported_models,
)
from piagent.providers.kit import key_env_vars

from .conftest import DRIVER_TIMEOUT_S, HERE, PI16, node_command

ROOT = HERE.parent.parent
SPOKEN = tuple(json.loads((ROOT / "piagent" / "providers" / "models.json").read_text(
    encoding="utf-8"))["apis"])  # the APIs piagent speaks: each has a stream function (below)
KEYS_KEPT = {
    # piagent's own key variables (ENV_VARS) win over pi-ai's (docs/reference.md row
    # `catalogue-key-variables`)
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}


def _node(*args: str) -> Any:
    done = subprocess.run([*node_command(PI16, "pi_catalogue_driver.mjs"), *args], cwd=HERE,
                          capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    assert done.returncode == 0, f"pi_catalogue_driver.mjs failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def pi_models(pi16_installed: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """provider -> id -> pi-ai's chat model, keyed by the model's own ``provider``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for models in _node("catalogue").values():
        for model_id, entry in models.items():
            out.setdefault(entry["provider"], {})[model_id] = entry
    return out


def _data() -> dict[str, Any]:
    text = (ROOT / "piagent" / "providers" / "models.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def test_the_pinned_version_is_the_installed_one(pi16_installed: Path) -> None:
    package = pi16_installed / "@earendil-works" / "pi-ai" / "package.json"
    pinned = json.loads(package.read_text())
    source = catalogue_source()
    assert (source["package"], source["version"]) == (pinned["name"], pinned["version"])
    assert source["license"] == "MIT" and "Permission is hereby granted" in source["notice"]


def test_every_spoken_api_has_a_stream_function() -> None:
    assert {"openai-completions", "openai-responses", "anthropic-messages",
            "google-generative-ai", "azure-openai-responses", "mistral-conversations"
            } <= set(SPOKEN)
    for api in SPOKEN:
        assert get_api(api) is not None, api


def test_same_providers_and_models(pi_models: dict[str, dict[str, dict[str, Any]]]) -> None:
    spoken = {p: {i for i, e in models.items() if e["api"] in SPOKEN}
              for p, models in pi_models.items()}
    other = {p: {i: e["api"] for i, e in models.items() if e["api"] not in SPOKEN}
             for p, models in pi_models.items()}
    data = _data()
    assert sorted(get_providers()) == sorted(p for p, ids in spoken.items() if ids)
    assert {p: set(m) for p, m in data["providers"].items()} == {p: i for p, i in spoken.items()
                                                                  if i}
    assert unsupported_models() == {p: m for p, m in other.items() if m}
    assert sum(len(m) for m in data["providers"].values()) >= 1300


def test_every_field_equal(pi_models: dict[str, dict[str, dict[str, Any]]]) -> None:
    data = _data()["providers"]
    for provider, models in data.items():
        for model_id, entry in models.items():
            pi = pi_models[provider][model_id]
            assert {**entry, "id": model_id, "provider": provider, "type": "chat"} == pi, \
                f"{provider}/{model_id}"
            assert get_model(provider, model_id) == _expected_model(pi), f"{provider}/{model_id}"


def _expected_model(pi: dict[str, Any]) -> Model:
    """The ``Model`` pi-ai's entry stands for, field by field."""
    cost = pi["cost"]
    return Model(
        id=pi["id"], api=pi["api"], provider=pi["provider"], base_url=pi["baseUrl"],
        name=pi["name"], reasoning=pi["reasoning"], input=tuple(pi["input"]),
        cost=ModelCost(cost["input"], cost["output"], cost["cacheRead"], cost["cacheWrite"],
                       tuple(CostTier(t["inputTokensAbove"], t["input"], t["output"],
                                      t["cacheRead"], t["cacheWrite"])
                             for t in cost.get("tiers", ()))),
        context_window=pi["contextWindow"], max_tokens=pi["maxTokens"],
        headers=pi.get("headers"), compat=pi.get("compat"),
        thinking_level_map=pi.get("thinkingLevelMap"))


def test_key_variables_are_pi_ai_s(pi_models: dict[str, dict[str, dict[str, Any]]]) -> None:
    providers = sorted({*pi_models, *get_providers()})
    pi = _node("keys", *providers)
    for provider in providers:
        expected = KEYS_KEPT.get(provider, tuple(pi[provider] or ()))
        assert key_env_vars(provider) == expected, provider


def test_provider_names_are_pi_ai_s(pi16_installed: Path) -> None:
    """The display names in messages ("No API key for Hugging Face"), from pi-ai's
    provider modules."""
    from piagent.providers.kit import provider_label

    names = _data()["names"]
    assert {"huggingface": "Hugging Face", "xai": "xAI", "together": "Together"}.items() \
        <= names.items()
    assert set(get_providers()) <= set(names)
    assert provider_label("huggingface") == "Hugging Face"
    assert provider_label("my-server") == "my-server"


def test_the_script_rebuilds_the_file_from_an_npm_pack(pi16_installed: Path,
                                                        tmp_path: Path) -> None:
    """Offline: ``npm pack`` of the installed package (no registry), then the script."""
    package = pi16_installed / "@earendil-works" / "pi-ai"
    done = subprocess.run(["npm", "pack", "--ignore-scripts", "--offline", "--pack-destination",
                           str(tmp_path), str(package)], capture_output=True, text=True,
                          timeout=DRIVER_TIMEOUT_S, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    tarball = tmp_path / done.stdout.split()[-1]
    spec = importlib.util.spec_from_file_location("gen_catalogue",
                                                  ROOT / "scripts" / "gen_catalogue.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "models.json"
    assert script.main([str(tarball), "--out", str(out)]) == 0
    committed = ROOT / "piagent" / "providers" / "models.json"
    assert out.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8"), \
        "models.json is not what scripts/gen_catalogue.py makes of the pinned pi-ai: rerun it"
