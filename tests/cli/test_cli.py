"""The command line: the offline demo (in-process and as ``python -m piagent``), the chat
REPL driven by a scripted model (prompt, steering, follow-up, Ctrl-C, reset), the chat's
one-line errors, the proxy's argument checks, colour rules, and the demo's tools."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest

from piagent import Agent, tool
from piagent.abort import AbortController
from piagent.cli import EventPrinter, Style, main
from piagent.cli._demo import evaluate, make_demo_tools
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT

from .conftest import Tty, after, chat, wait_forever_tool, when_idle

# --- demo ----------------------------------------------------------------------------------


def test_demo_shows_streaming_tools_progress_and_steering(capsys):
    assert main(["demo", "--fast"]) == 0
    out = capsys.readouterr().out
    for text in ['[1] list_folder(path=".")', '[2] read_file(path="notes.txt")',
                 '[3] read_file(path="todo.txt")', "read_file: read ", " bytes", " done in ",
                 "you (typing while tools run)> Also tell me what time it is, please.",
                 "you (queued, delivered now)> Also tell me what time it is, please.",
                 '[4] calculator(expression="3 + 1.5 + 2 + 0.75")', "[5] current_time()",
                 "add up to 7.25 hours of work", "It is now ",
                 "4 model calls, 5 tool calls, 1 steering message"]:
        assert text in out, f"{text!r} not in demo output:\n{out}"
    # The steering message is delivered after the whole read batch, before the next call.
    delivered = out.index("you (queued, delivered now)>")
    assert out.rindex("read_file done") < delivered < out.index("[4] calculator")
    assert "\x1b[" not in out  # not a TTY: no colour


def test_python_m_piagent_demo_exits_zero_offline():
    env = dict(os.environ, NO_COLOR="1")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "piagent", "demo"], capture_output=True,
                          text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "7.25 hours" in proc.stdout
    # the two ~300 ms reads ran together, and the demo says what that saved
    assert "(2 tools in " in proc.stdout and "one after another they would take" in proc.stdout
    assert proc.stderr == ""


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "demo" in capsys.readouterr().out


# --- colour ----------------------------------------------------------------------------------


def test_colour_only_on_a_tty_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert Style.for_stream(Tty()).enabled
    assert not Style.for_stream(io.StringIO()).enabled
    monkeypatch.setenv("NO_COLOR", "1")
    assert not Style.for_stream(Tty()).enabled
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not Style.for_stream(Tty()).enabled
    assert Style(False).error("x") == "x"
    assert Style(True).error("x").startswith("\x1b[")


# --- chat ------------------------------------------------------------------------------------


def test_chat_prompts_and_quits():
    scripted = ScriptedStreamFn([assistant_text("Hello there!")])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    code, out = chat(agent, ["hi", when_idle(agent, "/quit")])
    assert code == 0
    assert "assistant> Hello there!" in out
    assert [m.role for m in agent.state.messages] == ["user", "assistant"]


def test_chat_text_typed_during_a_run_becomes_a_steering_message():
    started, release = threading.Event(), threading.Event()

    @tool
    def slow() -> str:
        """Take a while."""
        started.set()
        release.wait(WAIT)
        return "slow done"

    scripted = ScriptedStreamFn([
        assistant_tool_calls(("slow", {})),
        lambda context, options: assistant_text(
            "Steer seen: " + context.messages[-1].content[0].text),
    ])
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[slow])

    def steer_then_release():
        assert started.wait(WAIT)
        return "only the short version"

    def release_then_wait():
        release.set()
        assert agent.wait_for_idle(WAIT)
        return "/quit"

    code, out = chat(agent, ["do it", steer_then_release, release_then_wait])
    assert code == 0
    assert "steering message queued" in out
    assert "you (queued, delivered now)> only the short version" in out
    assert "Steer seen: only the short version" in out
    roles = [m.role for m in agent.state.messages]
    assert roles == ["system", "user", "assistant", "toolResult", "user", "assistant"]


def test_chat_ctrl_c_aborts_the_run_not_the_program():
    started = threading.Event()
    wait_forever = wait_forever_tool(started)
    scripted = ScriptedStreamFn([assistant_tool_calls(("wait_forever", {})),
                                 assistant_text("still here")])
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[wait_forever])
    code, out = chat(agent, ["go", after(started, KeyboardInterrupt()),
                              when_idle(agent, "are you there?"), when_idle(agent, "/quit")])
    assert code == 0
    assert "aborted: Aborted by the user (Ctrl-C)" in out
    assert "assistant> still here" in out  # the aborted run made no further request


def test_chat_follow_up_reset_and_unknown_command():
    scripted = ScriptedStreamFn([assistant_text("one"), assistant_text("two")])
    agent = Agent(system_prompt="Be kind.", model=scripted.model, stream_fn=scripted)
    code, out = chat(agent, ["/follow-up first", when_idle(agent, "/bogus"), "/reset",
                              "/help", "/quit"])
    assert code == 0
    assert "assistant> one" in out
    assert "unknown command /bogus" in out
    assert "(conversation cleared)" in out
    assert "/follow-up TEXT" in out
    assert agent.state.system_prompt == "Be kind."
    assert [m.role for m in agent.state.messages] == ["system"]


def test_chat_error_message_is_printed_not_raised():
    scripted = ScriptedStreamFn([])  # no response left: the run ends with an error message
    agent = Agent(model=scripted.model, stream_fn=scripted)
    code, out = chat(agent, ["hi", when_idle(agent, "/quit")])
    assert code == 0
    assert "error: ScriptedStreamFn has no scripted response left" in out


def test_chat_rejects_a_malformed_model(capsys):
    assert main(["chat", "--model", "gpt-4o"]) == 2
    assert "--model must be PROVIDER/MODEL" in capsys.readouterr().err


def test_chat_unknown_model_is_one_line(capsys):
    assert main(["chat", "--model", "openai/no-such-model-xyz"]) == 2
    err = capsys.readouterr().err
    assert "--model openai/no-such-model-xyz: openai has no model 'no-such-model-xyz'" in err
    assert "Traceback" not in err


def test_chat_missing_key_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    from piagent.providers import get_models

    model_id = get_models("openai")[0].id
    assert main(["chat", "--model", f"openai/{model_id}"]) == 2
    err = capsys.readouterr().err
    assert "no API key for openai" in err and "OPENAI_API_KEY" in err


def test_chat_unreachable_server_prints_the_error(monkeypatch, capsys):
    with socket_closed_port() as port:
        monkeypatch.setattr("sys.stdin", io.StringIO("hello\n/quit\n"))
        code = main(["chat", "--model", "local/llama", "--base-url",
                     f"http://127.0.0.1:{port}/v1"])
    out = capsys.readouterr().out
    assert code == 1  # piped input whose last run failed
    assert "error: " in out


class socket_closed_port:  # noqa: N801 - used like a function
    """A localhost port with nothing listening."""

    def __enter__(self):
        import socket

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        return self.port

    def __exit__(self, *exc):
        return False


# --- proxy -----------------------------------------------------------------------------------


def test_proxy_needs_a_token(capsys, monkeypatch):
    monkeypatch.delenv("PIAGENT_PROXY_TOKEN", raising=False)
    assert main(["proxy", "--port", "0"]) == 2
    assert "--token" in capsys.readouterr().err


# --- demo tools ------------------------------------------------------------------------------


@pytest.mark.parametrize(("expression", "value"), [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("2 ** 10", 1024), ("7 // 2", 3), ("7 % 4", 3),
    ("-3 + +1", -2), ("sqrt(16)", 4.0), ("max(1, 5, 3)", 5), ("round(pi, 2)", 3.14),
])
def test_calculator_evaluates(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(("expression", "message"), [
    ("__import__('os')", "Unknown function '__import__'"),
    ("open('x')", "Unknown function 'open'"),
    ("(1).real", "Attribute is not allowed"),
    ("x + 1", "Unknown name 'x'"),
    ("2 ** 100000", "too large"),
    ("1 / 0", "Division by zero"),
    ("'a' * 3", "Constant is not allowed"),
    ("1 +", "Not an arithmetic expression"),
    ("[1, 2]", "List is not allowed"),
])
def test_calculator_refuses(expression, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(expression)


def test_file_tools_stay_inside_their_folder(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "sub").mkdir()
    read_file, list_folder, calculator, current_time = make_demo_tools(tmp_path)
    signal = AbortController().signal
    updates = []
    result = read_file.execute("c1", {"path": "a.txt"}, signal, updates.append)
    assert result.content[0].text == "alpha\n"
    assert updates and updates[-1].details == {"bytes": 6, "total": 6}
    listing = list_folder.execute("c2", {"path": "."}, signal, updates.append)
    assert listing.content[0].text == "sub/\na.txt (6 bytes)"
    with pytest.raises(ValueError, match="outside the folder"):
        read_file.execute("c3", {"path": "../x"}, signal, updates.append)
    with pytest.raises(FileNotFoundError, match="list the folder"):
        read_file.execute("c4", {"path": "missing.txt"}, signal, updates.append)
    assert calculator.execute("c5", {"expression": "0.1 * 3"}, signal, updates.append) \
        .content[0].text == "0.3"
    assert "(UTC)" in current_time.execute("c6", {}, signal, updates.append).content[0].text


@pytest.mark.usefixtures("sigint_raises")  # also from a shell ignoring SIGINT
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_proxy_serves_until_interrupted():
    """``piagent proxy`` binds, prints its URL, refuses a request without the token, and
    stops cleanly on SIGINT."""
    import json
    import signal
    import urllib.error
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "piagent", "proxy", "--port", "0",
                             "--token", "s3cret"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()
        assert line.startswith("piagent proxy on http://127.0.0.1:"), line
        url = line.split()[3]
        request = urllib.request.Request(url, data=json.dumps({}).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=WAIT)
        assert info.value.code == 401
        info.value.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)
        proc.stdout.close()
        proc.stderr.close()


def test_printer_shows_usage_thinking_and_tool_changes():
    from piagent import Cost, TextContent, ThinkingContent, Usage, UserMessage

    answer = assistant_text("Four.")
    answer.content.insert(0, ThinkingContent("2 + 2 is 4"))
    answer.usage = Usage(input=12, output=3, total_tokens=15, cost=Cost(total=0.0021))
    scripted = ScriptedStreamFn([answer, assistant_text("ok")])

    @tool
    def calc(expression: str) -> str:
        """Compute.

        Args:
            expression: What to compute.
        """
        return "4"

    agent = Agent(model=scripted.model, stream_fn=scripted)
    out = io.StringIO()
    agent.subscribe(EventPrinter(out, show_usage=True, echo_prompt=True))
    agent.prompt("2 + 2?")
    agent.state.tools = [calc]
    agent.prompt([UserMessage([TextContent("again")])])
    text = out.getvalue()
    assert "you> 2 + 2?" in text
    assert "(thinking) 2 + 2 is 4\nassistant> Four.\n" in text
    assert "(12 tokens in, 3 out, $0.0021)" in text
    assert "[system] tools added: calc" in text
