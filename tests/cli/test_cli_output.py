"""What ``piagent chat`` prints around a reply, and how it picks a model from the flags."""

from __future__ import annotations

import io

from piagent import Agent, Cost, Usage, tool
from piagent.cli import EventPrinter
from piagent.cli._chat import OLLAMA_BASE_URL, _resolve_model
from piagent.providers import get_model
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls


@tool
def look(what: str) -> str:
    """Look at something."""
    return f"saw {what}"


def test_usage_line_comes_after_the_replys_tool_lines_and_totals_add_up() -> None:
    first = assistant_tool_calls(("look", {"what": "sky"}))
    first.usage = Usage(input=10, output=2, cost=Cost(total=0.001))
    second = assistant_text("Blue.")
    second.usage = Usage(input=20, output=1, cost=Cost(total=0.002))
    scripted = ScriptedStreamFn([first, second])
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[look])
    out = io.StringIO()
    printer = EventPrinter(out, show_usage=True)
    agent.subscribe(printer)
    agent.prompt("what colour is the sky?")
    lines = out.getvalue().splitlines()
    done = next(i for i, line in enumerate(lines) if "[1] look done" in line)
    usage = lines.index("(10 tokens in, 2 out, $0.0010)")
    assert usage == done + 1  # the tool lines first, then that reply's usage
    assert lines[-1] == "(20 tokens in, 1 out, $0.0020)"
    assert printer.session_summary() == "session: 30 tokens in, 3 out, $0.0030"


def test_waiting_line_is_erased_by_the_first_token() -> None:
    scripted = ScriptedStreamFn([assistant_text("Hi.")])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    out = io.StringIO()
    agent.subscribe(EventPrinter(out, show_waiting=True))
    agent.prompt("hello")
    text = out.getvalue()
    waiting = "(waiting for the model...)"
    assert text.startswith(waiting + "\r" + " " * len(waiting) + "\r")
    assert text.endswith("assistant> Hi.\n")


def test_ollama_needs_no_base_url_and_catalogued_models_keep_prices() -> None:
    model = _resolve_model("ollama/llama3.2", None, "openai-completions")
    assert (model.provider, model.id, model.api, model.base_url) == (
        "ollama", "llama3.2", "openai-completions", OLLAMA_BASE_URL)
    assert OLLAMA_BASE_URL == "http://localhost:11434/v1"
    known = get_model("openai", "gpt-4o-mini")
    moved = _resolve_model("openai/gpt-4o-mini", "http://127.0.0.1:9/v1", "openai-completions")
    assert moved.base_url == "http://127.0.0.1:9/v1"
    assert moved.api == "openai-completions"  # --api, not the catalogue's wire API
    assert moved.cost == known.cost and known.cost.input > 0


def test_the_clis_model_names_work_in_python_with_the_same_defaults_and_errors() -> None:
    """Issue 49 item 2: ``Agent(model="ollama/llama3.2")`` is the CLI's ``-m ollama/llama3.2``
    (Ollama's default address); a ``vllm/...`` name without a base URL fails in both, saying
    to give one."""
    import pytest

    from piagent.cli._chat import CliError
    from piagent.providers import resolve_model

    # an id no catalogue lists: Python says once what it assumed (issue 51), the CLI does not
    with pytest.warns(UserWarning, match="ollama/llama3.2 is not in the catalogue"):
        in_python = Agent(model="ollama/llama3.2").state.model
    assert in_python == _resolve_model("ollama/llama3.2", None, "openai-completions")
    with pytest.warns(UserWarning, match="assumes a 128,000-token context window"):
        assert in_python == resolve_model("ollama/llama3.2")
    assert in_python is not None and in_python.base_url == OLLAMA_BASE_URL
    with pytest.warns(UserWarning):
        elsewhere = resolve_model("ollama/llama3.2", base_url="http://127.0.0.1:9/v1")
    assert elsewhere.base_url == "http://127.0.0.1:9/v1"
    said = ("'vllm/Qwen/Qwen3-8B': a vllm server has no default address; give its base URL "
            "(base_url='http://HOST:PORT/v1' in Python, --base-url on the command line).")
    with pytest.raises(ValueError) as python_error:
        Agent(model="vllm/Qwen/Qwen3-8B")
    assert str(python_error.value) == f"model: {said}"
    with pytest.raises(CliError) as cli_error:
        _resolve_model("vllm/Qwen/Qwen3-8B", None, "openai-completions")
    assert str(cli_error.value) == said
    served = _resolve_model("vllm/Qwen/Qwen3-8B", "http://127.0.0.1:8000/v1", "openai-completions")
    with pytest.warns(UserWarning):
        assert served == resolve_model("vllm/Qwen/Qwen3-8B", base_url="http://127.0.0.1:8000/v1")
    with pytest.raises(CliError, match="a lmstudio server has no default address; give "):
        _resolve_model("lmstudio/qwen", None, "openai-completions")


def test_unknown_model_is_said_once_in_the_clis_words() -> None:
    import pytest

    from piagent.cli._chat import CliError

    with pytest.raises(CliError) as info:
        _resolve_model("openai/gpt-nope", None, "openai-completions")
    text = str(info.value)
    assert text.startswith("--model openai/gpt-nope: openai has no model 'gpt-nope' in the "
                           "catalogue (it has chat-latest, gpt-4.1")
    assert "see 'piagent models openai'" in text and "--base-url URL" in text
    assert text.lower().count("unknown") == 0 and "Model(" not in text
    with pytest.raises(CliError, match=r"the catalogue has no provider 'nosuch' \(it has "):
        _resolve_model("nosuch/x", None, "openai-completions")


def test_chat_prints_the_notice_about_a_tool_still_running_after_abort() -> None:
    import logging

    from piagent.cli._chat import show_notices

    out = io.StringIO()
    hide = show_notices(EventPrinter(out))
    try:
        logging.getLogger("piagent.loop").warning("tool 'stubborn' has not returned yet")
    finally:
        hide()
    logging.getLogger("piagent.loop").warning("not shown once hidden")
    assert out.getvalue() == "(tool 'stubborn' has not returned yet)\n"
