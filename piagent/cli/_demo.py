"""The offline demo: real tools, a scripted model, and the script that drives them.

``make_demo_tools(root)`` builds four tools (read a file, list a folder, a calculator, the
current time) confined to ``root``; ``piagent chat --tools`` uses them too. ``run_demo``
runs a real ``Agent`` on ``ScriptedStreamFn``: the scripted responses are callables that
read the tool results from the request, so the final answer is computed, not canned.
Nothing here touches the network.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from ..abort import AbortSignal
from ..messages import AssistantMessage, TextContent, ToolResultMessage, UserMessage
from ..stream import Context, StreamOptions
from ..testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from ..tools import AgentTool, AgentToolResult, tool

__all__ = ["DEMO_FILES", "evaluate", "make_demo_tools", "run_demo"]

# --- a safe calculator -------------------------------------------------------------------

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt,
    "log": math.log, "exp": math.exp, "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "floor": math.floor, "ceil": math.ceil,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_MAX_EXPRESSION = 500
_MAX_EXPONENT = 1000


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression without ``eval``.

    Numbers, ``+ - * / // % **``, parentheses, the constants ``pi``, ``e``, ``tau`` and the
    functions ``abs round min max sqrt log exp sin cos tan floor ceil``; anything else is a
    ``ValueError`` naming what is not allowed.
    """
    if len(expression) > _MAX_EXPRESSION:
        msg = f"Expression too long ({len(expression)} characters; the limit is {_MAX_EXPRESSION})."
        raise ValueError(msg)
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        msg = f"Not an arithmetic expression: {expression!r} ({exc.msg})."
        raise ValueError(msg) from None
    value = _eval_node(tree.body)
    if not isinstance(value, (int, float)):  # unreachable with the nodes allowed above
        msg = f"{expression!r} is not a number."
        raise ValueError(msg)
    return value


def _eval_node(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > _MAX_EXPONENT:
                msg = f"Exponent {right!r} is too large (the limit is {_MAX_EXPONENT})."
                raise ValueError(msg)
            return left ** right
        op = _BINARY.get(type(node.op))
        if op is None:
            msg = f"Operator {type(node.op).__name__} is not allowed."
            raise ValueError(msg)
        try:
            return op(left, right)
        except ZeroDivisionError:
            msg = "Division by zero."
            raise ValueError(msg) from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval_node(node.operand))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        msg = f"Unknown name {node.id!r}; allowed constants are {', '.join(sorted(_CONSTANTS))}."
        raise ValueError(msg)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            msg = (f"Unknown function {node.func.id!r}; allowed functions are "
                   f"{', '.join(sorted(_FUNCTIONS))}.")
            raise ValueError(msg)
        return function(*(_eval_node(arg) for arg in node.args))
    msg = f"{type(node).__name__} is not allowed in an arithmetic expression."
    raise ValueError(msg)


def _format_number(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


# --- tools -------------------------------------------------------------------------------

_MAX_READ = 64_000


def _inside(root: Path, path: str) -> Path:
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        msg = f"Path {path!r} is outside the folder this tool may read ({root})."
        raise ValueError(msg)
    return target


def make_demo_tools(root: str | Path, *, pause: float = 0.0) -> list[AgentTool]:
    """The demo's tools, confined to ``root``.

    ``pause`` (seconds) makes ``read_file`` wait between chunks, so its progress updates
    are visible and two reads visibly overlap. The wait is on the run's abort signal.
    """
    base = Path(root).resolve()

    @tool
    def read_file(path: str, signal: AbortSignal,
                  on_update: Callable[[AgentToolResult], None]) -> AgentToolResult:
        """Read a UTF-8 text file.

        Args:
            path: The file's path, relative to the working folder.
        """
        target = _inside(base, path)
        if not target.is_file():
            msg = f"No file {path!r} in {base}; list the folder to see what is there."
            raise FileNotFoundError(msg)
        data = target.read_bytes()[:_MAX_READ]
        total = len(data)
        step = max(1, -(-total // 4))
        for done in range(step, total + step, step):
            if pause and signal.wait(pause):
                break
            done = min(done, total)
            on_update(AgentToolResult(content=[TextContent(f"read {done}/{total} bytes")],
                                      details={"bytes": done, "total": total}))
        text = data.decode("utf-8", errors="replace")
        return AgentToolResult(content=[TextContent(text)],
                               details={"path": str(target), "bytes": total,
                                        "lines": text.count("\n")})

    @tool
    def list_folder(path: str = ".") -> str:
        """List the entries of a folder: sub-folders end with '/', files show their size.

        Args:
            path: The folder, relative to the working folder.
        """
        target = _inside(base, path)
        if not target.is_dir():
            msg = f"No folder {path!r} in {base}."
            raise FileNotFoundError(msg)
        lines = []
        for entry in sorted(target.iterdir(), key=lambda p: (not p.is_dir(), p.name)):
            if entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                lines.append(f"{entry.name} ({entry.stat().st_size} bytes)")
        return "\n".join(lines) if lines else "(empty folder)"

    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression such as '2 * (3 + 4.5)' or 'sqrt(2)'.

        Args:
            expression: Numbers, + - * / // % **, parentheses, pi, e, and abs, round, min,
                max, sqrt, log, exp, sin, cos, tan, floor, ceil.
        """
        return _format_number(evaluate(expression))

    @tool
    def current_time() -> str:
        """The current local date and time (ISO 8601), and the same instant in UTC."""
        now = datetime.now().astimezone()
        utc = now.astimezone(timezone.utc)
        return (f"{now.isoformat(timespec='seconds')} (local), "
                f"{utc.isoformat(timespec='seconds')} (UTC)")

    return [read_file, list_folder, calculator, current_time]


# --- the scripted conversation -----------------------------------------------------------

DEMO_FILES: dict[str, str] = {
    "notes.txt": (
        "Project Falcon\n"
        "Goal: ship the offline demo by Friday.\n"
        "Owner: Linh. Reviewer: Sam.\n"
        "Open question: do we record a screencast?\n"
    ),
    "todo.txt": (
        "write the docs: 3 h\n"
        "record the screencast: 1.5 h\n"
        "review the examples: 2 h\n"
        "fix the flaky test: 0.75 h\n"
    ),
}
PROMPT = ("What is in my project folder? Read the notes and the todo list, and tell me "
          "how many hours of work are left.")
STEER = "Also tell me what time it is, please."


def _result(context: Context, name: str, **args: Any) -> ToolResultMessage | None:
    """The latest result of tool ``name`` (whose call had ``args``, when given)."""
    found = None
    calls: dict[str, dict[str, Any]] = {}  # ids are unique only within one assistant message
    for message in context.messages:
        if isinstance(message, AssistantMessage):
            calls = {call.id: call.arguments for call in message.tool_calls}
        elif isinstance(message, ToolResultMessage) and message.tool_name == name:
            arguments = calls.get(message.tool_call_id, {})
            if all(arguments.get(k) == v for k, v in args.items()):
                found = message
    return found


def _reply_list(context: Context, options: StreamOptions) -> AssistantMessage:
    listing = _result(context, "list_folder")
    names = re.findall(r"^(\S+\.txt)\b", listing.text if listing else "", re.MULTILINE)
    if not names:
        return assistant_text("I could not list the folder, so I cannot read the files.")
    return assistant_tool_calls(*[("read_file", {"path": n}) for n in names],
                                text=f"I see {' and '.join(names)}; reading them at once.")


def _hours(todo: str) -> list[str]:
    return re.findall(r":\s*([0-9]+(?:\.[0-9]+)?)\s*h\b", todo)


def _reply_read(context: Context, options: StreamOptions) -> AssistantMessage:
    todo = _result(context, "read_file", path="todo.txt")
    hours = _hours(todo.text) if todo and not todo.is_error else []
    steered = any(isinstance(m, UserMessage) and _user_text(m) == STEER
                  for m in context.messages)
    calls: list[tuple[str, dict[str, Any]]] = []
    if hours:
        calls.append(("calculator", {"expression": " + ".join(hours)}))
    if steered:
        calls.append(("current_time", {}))
    if not calls:
        return assistant_text("I could not read the todo list.")
    text = f"The todo list has {len(hours)} items; adding up their hours"
    text += ", and checking the clock as you asked." if steered else "."
    return assistant_tool_calls(*calls, text=text)


def _user_text(message: UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(getattr(block, "text", "") for block in message.content)


def _reply_final(context: Context, options: StreamOptions) -> AssistantMessage:
    notes = _result(context, "read_file", path="notes.txt")
    total = _result(context, "calculator")
    clock = _result(context, "current_time")
    todo = _result(context, "read_file", path="todo.txt")
    parts = []
    if notes and not notes.is_error:
        lines = notes.text.splitlines()
        parts.append(f"Your folder holds {len(DEMO_FILES)} text files. The notes are about "
                     f"{lines[0]}: {lines[1].removeprefix('Goal: ').rstrip('.')}.")
    if total and not total.is_error and todo:
        parts.append(f"The todo list has {len(_hours(todo.text))} items, which add up to "
                     f"{total.text} hours of work.")
    elif total:
        parts.append(f"I could not add up the hours: {total.text}")
    if clock and not clock.is_error:
        now = datetime.fromisoformat(clock.text.split(" (local)")[0])
        parts.append(f"It is now {now:%H:%M} on {now:%A, %d %B %Y}.")
    return assistant_text(" ".join(parts) or "I could not read the files.")


def demo_script() -> list[Any]:
    """The four scripted responses: list, read two files in parallel, compute, answer."""
    return [
        assistant_tool_calls(("list_folder", {"path": "."}),
                             text="Let me look at the folder first."),
        _reply_list,
        _reply_read,
        _reply_final,
    ]


def run_demo(out: TextIO, *, delay: float = 0.02, pause: float = 0.08,
             color: bool = False) -> int:
    """Run the offline demo, writing its transcript to ``out``; returns the exit code."""
    from ..agent import Agent
    from ._output import EventPrinter, Style

    style = Style(color)
    with tempfile.TemporaryDirectory(prefix="piagent-demo-") as folder:
        for name, text in DEMO_FILES.items():
            Path(folder, name).write_text(text, encoding="utf-8")
        scripted = ScriptedStreamFn(demo_script(), chunk_delay=delay)
        agent = Agent(
            system_prompt="You are a concise assistant with file and calculator tools.",
            model=scripted.model,
            tools=make_demo_tools(folder, pause=pause),
            stream_fn=scripted,
        )
        printer = EventPrinter(out, style=style, echo_prompt=True)
        agent.subscribe(printer)

        # The "user" types a steering message on another thread while the second tool
        # batch runs. The listener holds the loop (listeners are barriers) until the
        # message is queued, so the demo is deterministic.
        tools_running = threading.Event()
        steered = threading.Event()
        batches = {"n": 0}

        def on_event(event: Any, signal: AbortSignal) -> None:
            if event.type == "turn_start":
                batches["n"] += 1
            elif (event.type == "tool_execution_update" and batches["n"] == 2
                    and not tools_running.is_set()):
                tools_running.set()
                steered.wait(5)

        def user() -> None:
            try:
                if tools_running.wait(30):
                    agent.steer(STEER)
                    out.write(style.user(f"you (typing while tools run)> {STEER}") + "\n")
            except OSError:  # the output went away (a closed pipe); the run notices too
                pass
            finally:
                steered.set()

        agent.subscribe(on_event)
        typist = threading.Thread(target=user, name="piagent-demo-user", daemon=True)
        typist.start()

        out.write(style.dim("piagent demo: a real Agent and real tools on a scripted model "
                            "(offline, no API key).") + "\n")
        out.write(style.dim(f"Working folder: {folder}") + "\n\n")
        started = time.monotonic()
        run = agent.prompt(PROMPT)
        tools_running.set()  # release the typist if the script never got there
        typist.join(5)
        elapsed = time.monotonic() - started

        tool_calls = sum(1 for m in run.messages if isinstance(m, ToolResultMessage))
        steers = sum(1 for m in run.messages if isinstance(m, UserMessage) and _user_text(m) == STEER)
        final = run.messages[-1] if run.messages else None
        ok = isinstance(final, AssistantMessage) and final.stop_reason == "stop"
        out.write("\n" + style.dim(
            f"{scripted.call_count} model calls, {tool_calls} tool calls, "
            f"{steers} steering message{'s' if steers != 1 else ''}; {elapsed:.1f} s.") + "\n")
        out.flush()
        return 0 if ok else 1
