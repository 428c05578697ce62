"""The ``piagent`` command: ``demo`` (offline), ``chat`` (a real provider), ``sessions``,
``models`` and ``proxy``.

Output is plain text that reads well in a dumb terminal, a log file and a notebook; colour
is added only on a TTY, and never with ``NO_COLOR`` set or ``TERM=dumb``. ``EventPrinter``
is the listener that turns agent events into that text; the demo and the chat share it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from .._version import __version__
from ._chat import DEFAULT_SYSTEM_PROMPT, cmd_chat
from ._models import add_models_arguments, cmd_models
from ._output import Style
from ._sessions import cmd_sessions

__all__ = ["main"]

_EXIT_USAGE = 2


# --- proxy -------------------------------------------------------------------------------


def _cmd_proxy(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    token = args.token or os.environ.get("PIAGENT_PROXY_TOKEN")
    if not token:
        err.write("piagent proxy: pass --token T (or set PIAGENT_PROXY_TOKEN); clients send it "
                  "as 'Authorization: Bearer T'.\n")
        return _EXIT_USAGE
    from ..proxy import ProxyApp, serve_proxy

    def ready(url: str) -> None:
        out.write(f"piagent proxy on {url}/api/stream (clients send 'Authorization: Bearer "
                  "<token>'; provider keys come from this process's environment and go only "
                  "to the catalogue's base URLs and those of --allow-base-url; Ctrl-C "
                  "stops it)\n")
        out.flush()

    allowed: dict[str, list[str]] = {}
    for provider, url in args.allow_base_url:
        allowed.setdefault(provider, []).append(url)
    app = ProxyApp(auth_tokens=[token], allowed_base_urls=allowed)
    try:
        serve_proxy(app, args.host, args.port, ready=ready,
                    max_connections=args.max_connections, header_timeout=args.header_timeout,
                    body_timeout=args.body_timeout)
    except ValueError as exc:  # a limit out of range: ProxyServer says which
        err.write(f"piagent proxy: {exc}\n")
        return _EXIT_USAGE
    except KeyboardInterrupt:
        out.write("\nproxy stopped\n")
    except OSError as exc:
        err.write(f"piagent proxy: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}\n")
        return 1
    return 0


# --- demo --------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ._demo import run_demo

    delay = 0.0 if args.fast else args.delay
    pause = 0.0 if args.fast else 0.08
    return run_demo(out, delay=delay, pause=pause, color=Style.for_stream(out).enabled)


_THINKING = ("off", "minimal", "low", "medium", "high", "xhigh", "max")


def _flag_value(convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str
                ) -> Callable[[str], Any]:
    """An argparse ``type=``: ``convert(text)`` if it works and ``ok`` accepts it, else the
    error "expected <expected>, got <text>"."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value

    return parse


_temperature = _flag_value(float, lambda v: 0.0 <= v <= 2.0, "a number from 0 to 2")
_positive_int = _flag_value(int, lambda v: v >= 1, "a whole number above 0")
_positive_usd = _flag_value(float, lambda v: 0 < v < float("inf"), "an amount of USD above 0")


def _provider_url(text: str) -> tuple[str, str]:
    """``--allow-base-url``'s ``PROVIDER=URL``, checked as ``ProxyApp`` will check it."""
    from ..proxy import ProxyApp

    provider, sep, url = text.partition("=")
    expected = "PROVIDER=URL, e.g. openai=https://gateway.example/v1"
    if not sep or not provider or provider != "".join(provider.split()) or not url:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    try:
        ProxyApp(auth_tokens="-", allowed_base_urls={provider: url})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {expected} (an http:// or https:// URL with a host), got {text!r}"
        ) from None
    return provider, url


# --- entry point ---------------------------------------------------------------------------

_SESSIONS_DB_HELP = ("the SQLite file that keeps the sessions (default: $PIAGENT_SESSIONS_DB, "
                     "else sessions.db in the user data folder, e.g. "
                     "~/.local/share/piagent on Linux)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="piagent", description="A synchronous, thread-based agent loop for LLMs.")
    parser.add_argument("--version", action="version", version=f"piagent {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="run an agent offline on a scripted model, with real tools",
        description="Run a real Agent with real tools on a scripted model: no network, no key.")
    demo.add_argument("--delay", type=float, default=0.02, metavar="SECONDS",
                      help="pause between streamed chunks (default 0.02)")
    demo.add_argument("--fast", action="store_true", help="no pauses at all")

    chat = commands.add_parser(
        "chat", help="chat with a real model (key from the environment)",
        description="A REPL against a real provider. Text typed while the agent works "
                    "becomes a steering message; Ctrl-C aborts the current run.")
    chat.add_argument("question", nargs="*", metavar="QUESTION",
                      help="ask once, print the answer and exit (non-zero if the run fails); "
                           "'-' reads the question from stdin")
    chat.add_argument("-m", "--model", required=True, metavar="PROVIDER/MODEL",
                      help="for example openai/gpt-4o-mini, anthropic/claude-sonnet-4-5 or "
                           "ollama/llama3.2 (Ollama at http://localhost:11434/v1)")
    chat.add_argument("--temperature", type=_temperature, metavar="T",
                      help="sampling temperature, 0 to 2 (default: the provider's)")
    chat.add_argument("--max-tokens", type=_positive_int, metavar="N",
                      help="the most tokens each reply may have (default: the model's)")
    chat.add_argument("--no-compaction", action="store_true",
                      help="never summarise the older part of a long conversation "
                           "(by default it is, before the model's context window fills)")
    chat.add_argument("--thinking", default="off", choices=_THINKING,
                      help="reasoning effort for models that think (default off)")
    chat.add_argument("--base-url", metavar="URL",
                      help="an OpenAI-compatible server (Ollama, vLLM, llama.cpp, ...)")
    chat.add_argument("--api", default="openai-completions",
                      help="the wire API for --base-url (default openai-completions)")
    chat.add_argument("--api-key-env", metavar="NAME",
                      help="read the API key from this environment variable")
    chat.add_argument("--tools", action="store_true",
                      help="give the model read_file, list_folder, write_file (asks you "
                           "first; current folder), calculator and current_time")
    chat.add_argument("--mcp", action="append", default=[], metavar="COMMAND|URL",
                      help="give the model an MCP server's tools: a command line run as a "
                           "stdio server, or an http(s):// URL (repeatable)")
    chat.add_argument("--system", metavar="TEXT",
                      help=f"the system prompt (default {DEFAULT_SYSTEM_PROMPT!r}; a resumed "
                           "session keeps its own)")
    chat.add_argument("--session", metavar="NAME",
                      help="keep the conversation as NAME and resume it the next time "
                           "(see 'piagent sessions')")
    chat.add_argument("--sessions-db", metavar="PATH", help=_SESSIONS_DB_HELP)
    chat.add_argument("--max-requests", type=_positive_int, metavar="N",
                      help="end a run after N model requests (docs/limits.md)")
    chat.add_argument("--max-cost", type=_positive_usd, metavar="USD",
                      help="end a run once it has spent USD (catalogue prices)")

    sessions = commands.add_parser(
        "sessions", help="list the conversations kept with 'piagent chat --session NAME'",
        description="List the stored chat sessions (name, messages, last activity, first "
                    "question), or delete one.")
    sessions.add_argument("--delete", metavar="NAME", help="delete the session NAME")
    sessions.add_argument("--sessions-db", metavar="PATH", help=_SESSIONS_DB_HELP)

    add_models_arguments(commands.add_parser(
        "models", help="list the models in the bundled catalogue, with prices",
        description="List the catalogue's models (pi-ai's data) as PROVIDER/MODEL, for "
                    "--model: wire API, context window, prices in dollars per million tokens."))

    proxy = commands.add_parser(
        "proxy", help="serve the provider proxy (keys stay on this machine)",
        description="Serve piagent.proxy.ProxyApp with the standard library's WSGI server.")
    proxy.add_argument("--port", type=int, default=8787, help="default 8787; 0 picks a free port")
    proxy.add_argument("--host", default="127.0.0.1")
    proxy.add_argument("--token", help="the bearer token clients must send "
                                       "(default: $PIAGENT_PROXY_TOKEN)")
    proxy.add_argument("--allow-base-url", type=_provider_url, action="append", default=[],
                       metavar="PROVIDER=URL",
                       help="also send PROVIDER's requests to URL (repeatable); by default "
                            "only the catalogue's base URL of each provider is served, and "
                            "providers it does not list (ollama, vllm, ...) are refused")
    proxy.add_argument("--max-connections", type=int, default=64, metavar="N",
                       help="requests served at once; more get 503 (default 64)")
    proxy.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                       help="seconds for a client to send its headers, else 408 (default 10)")
    proxy.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                       help="seconds for a client to send its body, else 408 (default 30)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``piagent`` command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    handlers = {"demo": _cmd_demo, "chat": cmd_chat, "proxy": _cmd_proxy,
                "models": cmd_models, "sessions": cmd_sessions}
    if args.command is None:
        parser.print_help(out)
        return 0
    try:
        return handlers[args.command](args, out, err)
    except KeyboardInterrupt:
        err.write("\ninterrupted\n")
        return 130
    except BrokenPipeError:  # e.g. `piagent demo | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1

