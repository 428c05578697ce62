"""``EventStream``: one thread-safe stream of events with a final result.

Two ways to feed it, one set of end-of-stream rules:

- pushed: a producer thread calls ``push``/``end``/``fail`` (the low-level ``agent_loop``);
- pulled: ``pull_from(steps)`` hands it a generator that the consumer's own thread advances
  whenever it needs the next event (provider adapters, the scripted test model). A step may
  yield an event, or push events itself and yield ``None``. No thread is started, no event
  crosses threads, yet ``push`` from another thread (an abort) still ends the stream at once.
  A yielded event goes straight to the consumer unless something is queued before it. While
  iteration runs a step, ``step_events`` is a list its producer may append non-completing
  events to (cheaper than ``push``: no lock, no queue); they reach the consumer in order,
  before anything pushed or yielded during that step. Otherwise (outside a step, or a step
  run by ``result()``) it is ``None``, and the producer pushes.

The stream is done when an event satisfies ``is_complete`` (its result is
``extract_result(event)``), or at ``end()``/``fail()``. Events pushed after that are dropped.
``on_finish`` runs on the consumer's thread once the end has been read (the loop joins its
worker thread there): before the completing event is yielded, before iteration stops, and
before ``result()`` returns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ..abort import AbortSignal

__all__ = ["EventStream"]

T = TypeVar("T")
R = TypeVar("R")

_END: Any = object()  # closes a stream's queue


class EventStream(Generic[T, R]):
    """A stream of events with a final result, safe across threads.

    Thread safety: ``push``, ``end`` and ``fail`` may be called from any thread; one
    consumer iterates and/or calls ``result()`` at a time; ``step_events`` is used only by
    the pulled producer, on the consumer's thread, during the step it is set for.
    """

    def __init__(self, is_complete: Callable[[T], bool], extract_result: Callable[[T], R], *,
                 on_finish: Callable[[], None] | None = None) -> None:
        self._is_complete = is_complete
        # event types that never complete the stream (exact types; a subclass sets them):
        # push() and the direct hand-over skip the is_complete call for them
        self._ongoing: frozenset[type] = frozenset()
        self._extract_result = extract_result
        self._on_finish = on_finish
        # carries events, then _END, to the consumer
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # guards _done, _result and _error: the transition to done happens once
        self._lock = threading.Lock()
        self._done = False
        self._result: R | None = None
        self._error: BaseException | None = None
        self._has_result = threading.Event()
        self._final: Any = _END  # the completing event, once pushed
        # the pulled producer, advanced by the consumer; guarded by _steps_lock (iteration
        # and result() may race to advance it)
        self._steps: Iterator[T | None] | None = None
        self._steps_signal: AbortSignal | None = None
        self._steps_lock = threading.Lock()
        # while the consumer's thread runs a pulled step: the list that step's producer may
        # append its non-completing events to, handed over when the step returns (only that
        # thread touches it); None otherwise
        self.step_events: list[T] | None = None

    # --- producing ------------------------------------------------------------------------

    def pull_from(self, steps: Iterator[T | None], signal: AbortSignal | None = None) -> None:
        """Let the consumer's thread drive ``steps``; once ``signal`` is aborted the rest of
        the producer is closed (its ``finally`` blocks run) instead of run to its end."""
        self._steps = steps
        self._steps_signal = signal

    @property
    def done(self) -> bool:
        """True once the stream has ended (its result may still be unread)."""
        return self._done

    def push(self, event: T) -> None:
        """Deliver an event; a completing event also sets the result and ends the stream."""
        with self._lock:
            if self._done:
                return
            if type(event) in self._ongoing or not self._is_complete(event):
                self._queue.put(event)
                return
            # the result first: a consumer on another thread sees the event only after
            # extract_result has run (it may finish the message: pi-ai's timing)
            self._result = self._extract_result(event)
            self._queue.put(event)
            self._final = event
            self._done = True
            self._has_result.set()
            self._queue.put(_END)

    def end(self, result: R | None = None) -> None:
        """End the stream; ``result`` becomes the result unless one was already set."""
        with self._lock:
            if not self._has_result.is_set() and result is not None:
                self._result = result
                self._has_result.set()
            if self._done:
                return
            self._done = True
            self._queue.put(_END)

    def fail(self, error: BaseException) -> None:
        """End the stream with an error: iteration raises it after the queued events."""
        with self._lock:
            if self._has_result.is_set():
                return
            self._error = error
            self._has_result.set()
            if not self._done:
                self._done = True
                self._queue.put(_END)

    # --- consuming ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[T]:
        events = self._queue
        while True:
            if self._steps is not None and events.empty():
                yield from self._pull()  # the step's events, handed over without the queue
                if self._steps is not None:
                    continue
                if not self._done:  # the producer stopped without ending the stream
                    self.end()
            item = events.get()
            if item is _END:
                events.put(_END)  # later iterations end at once too
                self._finish()
                if self._error is not None:
                    raise self._error
                return
            if item is self._final:  # finish before handing over the end: the consumer
                self._finish()       # may stop reading here
            yield item

    def result(self, timeout: float | None = None) -> R:
        """The final value; waits up to ``timeout`` seconds, then raises ``TimeoutError``."""
        while self._steps is not None and not self._has_result.is_set() and self._advance():
            pass
        if not self._has_result.wait(timeout):
            msg = f"The stream produced no result within {timeout} seconds."
            raise TimeoutError(msg)
        self._finish()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # set with _has_result

    def has_result(self) -> bool:
        """True once ``result()`` would return (or raise) without waiting."""
        return self._has_result.is_set()

    def _pull(self, handing: bool = True) -> list[T]:
        """Run the pulled producer one step on this thread (none once it has finished: then
        ``_steps`` is ``None``). Returns the step's events that go straight to the consumer,
        in order: what it put in ``step_events``, then the event it yielded if that does not
        complete the stream and nothing was pushed from another thread (an abort) meanwhile.
        Any other yielded event is pushed: behind what is queued, dropped once done.
        ``handing=False`` (``result()``, which hands nothing over): no ``step_events``, so
        the step pushes its events."""
        with self._steps_lock:
            steps = self._steps
            handed: list[T] = []
            if steps is None:
                return handed
            self.step_events = handed if handing else None
            try:
                event = next(steps)
            except StopIteration:
                self._steps = None
                return handed
            except BaseException as exc:  # the producer broke: the stream ends with it
                self._steps = None
                self.fail(exc)
                return handed
            finally:
                self.step_events = None
            if event is None:
                return handed
            if self._queue.empty() and (type(event) in self._ongoing
                                        or not self._is_complete(event)):
                handed.append(event)
            else:
                self.push(event)
        return handed

    def _advance(self) -> bool:
        """Run the pulled producer one step, queueing its events; False once it has finished."""
        for event in self._pull(handing=False):
            self.push(event)  # result() hands nothing over: queued for a later iteration
        return self._steps is not None

    def _finish(self) -> None:
        """After the end was read: finish the producer, then ``on_finish`` (once each)."""
        with self._steps_lock:
            steps, self._steps = self._steps, None
        if steps is not None:
            signal = self._steps_signal
            if signal is not None and signal.aborted:
                close = getattr(steps, "close", None)
                if close is not None:
                    close()  # unwinds the producer: responses closed, callbacks removed
            else:
                for _ in steps:  # lets the producer release what it holds (a connection)
                    pass
        on_finish, self._on_finish = self._on_finish, None
        if on_finish is not None:
            on_finish()
