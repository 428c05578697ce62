"""``piagent models``: the catalogue's models as ``PROVIDER/MODEL``, filtered by provider,
API and capability; ``--all`` adds the models pi-ai serves on APIs piagent does not speak."""

from __future__ import annotations

import argparse
from typing import TextIO

__all__ = ["add_models_arguments", "cmd_models"]

_EXIT_USAGE = 2
_APIS = ("openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai")


def add_models_arguments(models: argparse.ArgumentParser) -> None:
    """The ``models`` subcommand's arguments."""
    models.add_argument("provider", nargs="?", help="only this provider (default: all)")
    models.add_argument("--api", choices=_APIS, help="only models on this wire API")
    models.add_argument("--reasoning", action="store_true", help="only models that think")
    models.add_argument("--images", action="store_true", help="only models that take images")
    models.add_argument("--all", action="store_true", dest="all_models",
                        help="also the models on APIs piagent does not speak, and why")


def cmd_models(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Print the table; exit 2 for a provider the catalogue does not know."""
    from ..providers import get_models, get_providers, unsupported_models

    providers = get_providers()
    other = unsupported_models()
    known = sorted({*providers, *other}) if args.all_models else providers
    if args.provider is not None and args.provider not in known:
        hint = ""
        if args.provider in other:
            hint = (f" ({args.provider} serves its models on APIs piagent does not speak: "
                    f"'piagent models --all {args.provider}')")
        err.write(f"piagent models: no provider {args.provider!r} in the catalogue{hint}; it "
                  f"has {', '.join(providers)}. Any OpenAI-compatible server works with "
                  f"'piagent chat -m NAME/MODEL --base-url URL'.\n")
        return _EXIT_USAGE
    rows: list[tuple[str, ...]] = []
    for provider in [args.provider] if args.provider else known:
        for model in get_models(provider):
            if (args.api and model.api != args.api) or (args.reasoning and not model.reasoning) \
                    or (args.images and "image" not in model.input):
                continue
            rows.append((f"{provider}/{model.id}", model.api, f"{model.context_window:,}",
                         _price(model.cost.input, model.cost.output, 0),
                         _price(model.cost.input, model.cost.output, 1), ""))
        if args.all_models and not (args.api or args.reasoning or args.images):
            rows.extend((f"{provider}/{model_id}", api, "-", "-", "-",
                         "not spoken by piagent")
                        for model_id, api in other.get(provider, {}).items())
    if not rows:
        err.write("piagent models: no model matches.\n")
        return 1
    header = ("MODEL", "API", "CONTEXT", "$ IN/1M", "$ OUT/1M", "NOTE" if args.all_models else "")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [f"{row[0]:<{widths[0]}}", f"{row[1]:<{widths[1]}}"]
        cells += [f"{cell:>{width}}" for cell, width in zip(row[2:5], widths[2:5], strict=True)]
        if args.all_models:
            cells.append(f"{row[5]:<{widths[5]}}")
        out.write("  ".join(cells) + "\n")
    return 0


def _price(price_in: float, price_out: float, which: int) -> str:
    """A dollar price per million tokens; "?" when the catalogue knows neither."""
    if not (price_in or price_out):
        return "?"
    return f"{(price_in, price_out)[which]:.2f}"
