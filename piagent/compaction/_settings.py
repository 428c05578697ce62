"""``Compaction``: when and how an ``Agent`` summarises the older part of its conversation."""

from __future__ import annotations

from dataclasses import dataclass

from ..models import Model
from ..stream import StreamFn

__all__ = ["Compaction"]


@dataclass(frozen=True)
class Compaction:
    """Compaction settings for ``Agent(compaction=Compaction(...))`` (docs/compaction.md).

    ``reserve_tokens``: room kept free for the response; the agent compacts before a request
    whose estimated context exceeds ``model.context_window - reserve_tokens``.
    ``keep_recent_tokens``: about how many tokens of the newest messages stay verbatim.
    ``instructions``: an extra focus for the summary (pi's "Additional focus").
    ``model``: the model that writes the summary (``None``: the agent's own), through
    ``stream_fn`` (``None``: the agent's). ``auto``: compact by itself (threshold and
    context overflow); ``False`` leaves only ``Agent.compact()``. pi's defaults.
    """

    reserve_tokens: int = 16_384
    keep_recent_tokens: int = 20_000
    instructions: str | None = None
    model: Model | None = None
    stream_fn: StreamFn | None = None
    auto: bool = True

    def __post_init__(self) -> None:
        for name in ("reserve_tokens", "keep_recent_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"Compaction({name}=...) must be an int >= 0, not {value!r}."
                raise ValueError(msg)
        if self.instructions is not None and not isinstance(self.instructions, str):
            msg = (f"Compaction(instructions=...) must be a str or None, not "
                   f"{type(self.instructions).__name__}.")
            raise TypeError(msg)
        if self.model is not None and not isinstance(self.model, Model):
            msg = (f"Compaction(model=...) must be a piagent.Model or None (the agent's own), "
                   f"not {type(self.model).__name__}.")
            raise TypeError(msg)
        if self.stream_fn is not None and not callable(self.stream_fn):
            msg = "Compaction(stream_fn=...) must be a stream function or None (the agent's)."
            raise TypeError(msg)
        if not isinstance(self.auto, bool):
            msg = f"Compaction(auto=...) must be a bool, not {type(self.auto).__name__}."
            raise TypeError(msg)
