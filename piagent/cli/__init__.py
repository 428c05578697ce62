"""The ``piagent`` command: ``demo`` (offline), ``chat`` (a real provider) and ``proxy``.

Output is plain text that reads well in a dumb terminal, a log file and a notebook; colour
is added only on a TTY, and never with ``NO_COLOR`` set or ``TERM=dumb``. ``EventPrinter``
is the listener that turns agent events into that text; the demo and the chat share it.
"""

from __future__ import annotations

from ._chat import chat_loop
from ._main import main
from ._output import EventPrinter, Style

__all__ = ["EventPrinter", "Style", "chat_loop", "main"]
