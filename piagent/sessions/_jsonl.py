"""``JsonlStore``: one append-only ``<id>.jsonl`` per session, readable with ``cat``.

Each line is one record: ``{"seq": n, "message": {...pi-JSON...}}`` or ``{"seq": n,
"started": "<tool-call id>"}``. The lines of one multi-message ``append`` but its last carry
``"more": true``, so an append cut short by a crash is recognised and dropped whole. The file
is flushed and fsynced before ``append`` returns; ``replace`` writes a new file and renames it
over the old one. An append reads only the bytes other writers added since this store's
last one (it keeps the file's tail, checked against the file under the lock), so its cost
does not grow with the transcript.

Across processes, writers take an exclusive ``flock`` on the directory's ``.piagent.lock``
and readers a shared one (POSIX; elsewhere only the threads of one process are serialised).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import urllib.parse
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..messages import AgentMessage, message_to_dict, sanitize_surrogates
from ._protocol import (
    SessionCorruptError,
    check_messages,
    check_session_id,
    decode_message,
    marked_call_id,
    unanswered_call_ids,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

_HEADER_KEY = "piagentSession"
_SUFFIX = ".jsonl"
_MAX_NAME_BYTES = 150  # well under the 255 bytes most file systems allow


def _file_name(session_id: str) -> str:
    """A file name for the session: the id percent-encoded, hashed when it gets long."""
    name = urllib.parse.quote(session_id, safe="-_")
    if name.startswith("."):
        name = "%2E" + name[1:]
    if len(name) > _MAX_NAME_BYTES:
        digest = hashlib.sha256(session_id.encode()).hexdigest()[:24]
        name = f"{name[:_MAX_NAME_BYTES - 26]}~{digest}"
    return name + _SUFFIX


@dataclass
class _Parsed:
    header_end: int  # bytes of the header line
    records: list[dict[str, Any]]  # complete, committed records
    good_end: int  # bytes up to the end of the last committed record
    size: int


@dataclass
class _Tail:
    """What an append needs to know of a file, kept between appends so that one costs the
    bytes other writers added since, not the whole file (checked against the file each time)."""

    file: tuple[int, int]  # (st_dev, st_ino): a replace() renames a new file over it
    end: int  # bytes up to the end of the last committed record (or the header line)
    count: int  # committed records
    started: set[str]  # the tool-call ids marked started since the last assistant message
    last: bytes  # the last committed line with its newline, found again at ``end``


def _asks(record: dict[str, Any]) -> bool:
    """Whether a record is an assistant message: a new batch, after which the earlier
    batch's marks are over (tool-call ids repeat across batches)."""
    message = record.get("message")
    return isinstance(message, dict) and message.get("role") == "assistant"


def _batch_marks(marks: set[str], records: list[dict[str, Any]]) -> set[str]:
    """``marks`` (the current batch's marked ids) updated by ``records``, in order."""
    for record in records:
        if _asks(record):
            marks = set()
        elif isinstance(record.get("started"), str):
            marks.add(record["started"])
    return marks


def _open_marks(records: list[dict[str, Any]]) -> set[str]:
    """The ids marked started in the last batch that no later tool result answers."""
    marks: set[str] = set()
    answered: set[str] = set()
    for record in records:
        message = record.get("message")
        if _asks(record):
            marks, answered = set(), set()
        elif isinstance(record.get("started"), str):
            marks.add(record["started"])
        elif isinstance(message, dict) and message.get("role") == "toolResult":
            answered.add(message.get("toolCallId"))  # type: ignore[arg-type]
    return marks - answered


def _dumps(value: Any) -> str:
    # a lone surrogate cannot be written as UTF-8: removed, as pi-ai's sanitizeSurrogates
    return sanitize_surrogates(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


class JsonlStore:
    """Transcripts as JSON Lines files in ``directory`` (created if missing).

    The first line of each file names its session (``{"piagentSession": id, "version": 1}``);
    every further line is a record. A torn last line (the process died mid-write) is dropped
    on load with a warning; any other line that cannot be read raises ``SessionCorruptError``.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            msg = f"JsonlStore needs a directory path, got {type(directory).__name__}."
            raise TypeError(msg)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_path = self.directory / ".piagent.lock"
        # serialises this process's threads around every read and write; the flock on
        # _lock_path does the same across processes
        self._lock = threading.RLock()
        # per file path, the tail an append starts from (guarded by _lock; trusted only
        # after _tail() has checked it against the file under the exclusive flock)
        self._tails: dict[Path, _Tail] = {}

    def __repr__(self) -> str:
        return f"JsonlStore({str(self.directory)!r})"

    def path_of(self, session_id: str) -> Path:
        """The file that holds ``session_id``."""
        return self.directory / _file_name(check_session_id(session_id))

    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        with self._lock:
            if fcntl is None:
                yield
                return
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                yield
            finally:
                os.close(fd)  # releases the flock

    # --- reading -------------------------------------------------------------------------

    def _parse(self, session_id: str, path: Path, *, warn: bool = True) -> _Parsed:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return _Parsed(0, [], 0, 0)
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" when the file ends with a newline
        offset = 0
        records: list[dict[str, Any]] = []
        header_end = good_end = 0
        pending: list[dict[str, Any]] = []
        for index, raw in enumerate(lines):
            end = offset + len(raw) + 1
            try:
                value = json.loads(raw)
                if not isinstance(value, dict):
                    raise ValueError(f"expected a JSON object, got {type(value).__name__}")
            except ValueError as exc:
                seq = len(records) + len(pending)
                msg = (f"Session {session_id!r}: record {seq} ({path.name} line {index + 1}) "
                       f"cannot be decoded: {exc}")
                raise SessionCorruptError(msg, session_id=session_id, seq=seq) from exc
            if index == 0:
                if value.get(_HEADER_KEY) != session_id:
                    msg = (f"Session {session_id!r}: {path.name} starts with {raw[:80]!r}, "
                           "not this session's header line.")
                    raise SessionCorruptError(msg, session_id=session_id, seq=0)
                header_end = good_end = end
            else:
                pending.append(value)
                if not value.get("more"):
                    records.extend(pending)
                    pending = []
                    good_end = end
            offset = end
        if warn and (torn or pending):
            what = "a torn last line" if torn else "an append cut short"
            warnings.warn(f"Session {session_id!r}: {path.name} ends with {what} (the process "
                          f"stopped while writing); {len(torn) + sum(1 for _ in pending)} "
                          "partial record(s) dropped.", RuntimeWarning, stacklevel=3)
        return _Parsed(header_end, records, good_end, len(data))

    def _messages(self, session_id: str, records: list[dict[str, Any]]) -> list[AgentMessage]:
        out = []
        for position, record in enumerate(records):
            seq = record.get("seq", position)
            if "message" in record:
                out.append(decode_message(session_id, seq, record["message"]))
            elif "started" not in record:
                msg = f"Session {session_id!r}: record {seq} is neither a message nor a mark."
                raise SessionCorruptError(msg, session_id=session_id, seq=seq)
        return out

    def load(self, session_id: str) -> list[AgentMessage]:
        path = self.path_of(session_id)
        with self._locked(exclusive=False):
            parsed = self._parse(session_id, path)
        return self._messages(session_id, parsed.records)

    def started(self, session_id: str) -> set[str]:
        path = self.path_of(session_id)
        with self._locked(exclusive=False):
            parsed = self._parse(session_id, path)
        return _open_marks(parsed.records)

    def session_ids(self) -> list[str]:
        found = []
        with self._locked(exclusive=False):
            for path in self.directory.glob("*" + _SUFFIX):
                with path.open("rb") as f:
                    first = f.readline()
                try:
                    header = json.loads(first)
                except ValueError:
                    continue  # an unfinished first write; no record in it
                sid = header.get(_HEADER_KEY) if isinstance(header, dict) else None
                if isinstance(sid, str) and path.stat().st_size > len(first):
                    found.append(sid)
        return sorted(found)

    # --- writing -------------------------------------------------------------------------

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        if os.name != "posix":
            return
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _tail(self, session_id: str, path: Path) -> _Tail | None:
        """The file's tail, under the exclusive lock: the kept one, brought up to date with
        what other writers appended since; a full read when it cannot be trusted (a new or
        replaced file, or a first append). ``None`` when there is no file yet."""
        try:
            f = path.open("rb")
        except FileNotFoundError:
            self._tails.pop(path, None)
            return None
        with f:
            st = os.fstat(f.fileno())
            tail = self._tails.get(path)
            if tail is not None and tail.file == (st.st_dev, st.st_ino) \
                    and st.st_size >= tail.end >= len(tail.last):
                f.seek(tail.end - len(tail.last))
                data = f.read()
                if data.startswith(tail.last) and self._advance(tail, data[len(tail.last):]):
                    return tail
        parsed = self._parse(session_id, path, warn=False)
        if parsed.size == 0:
            self._tails.pop(path, None)
            return None
        with path.open("rb") as f:
            head = f.read(parsed.good_end)
        last = head[head.rstrip(b"\n").rfind(b"\n") + 1:]
        tail = _Tail((st.st_dev, st.st_ino), parsed.good_end, len(parsed.records),
                     _batch_marks(set(), parsed.records), last)
        self._tails[path] = tail
        return tail

    @staticmethod
    def _advance(tail: _Tail, data: bytes) -> bool:
        """Move ``tail`` over the committed records in ``data`` (the bytes after it); False,
        leaving it unchanged, if a line cannot be read (the full read then reports it)."""
        lines = data.split(b"\n")
        lines.pop()  # a torn last line, or b""
        end, count, started, last = tail.end, tail.count, set(tail.started), tail.last
        pending: list[dict[str, Any]] = []
        offset = end
        for raw in lines:
            try:
                value = json.loads(raw)
            except ValueError:
                return False
            if not isinstance(value, dict):
                return False
            offset += len(raw) + 1
            pending.append(value)
            if not value.get("more"):
                count += len(pending)
                started = _batch_marks(started, pending)
                pending = []
                end, last = offset, raw + b"\n"
        tail.end, tail.count, tail.started, tail.last = end, count, started, last
        return True

    def _append_records(self, session_id: str, values: list[dict[str, Any]]) -> None:
        """Write records after the last committed one, under the exclusive lock."""
        path = self.path_of(session_id)
        tail = self._tail(session_id, path)
        start = tail.count if tail is not None else 0
        lines = []
        for i, value in enumerate(values):
            record = {"seq": start + i, **value}
            if i < len(values) - 1:
                record["more"] = True
            lines.append(_dumps(record))
        body = ("\n".join(lines) + "\n").encode()
        created = tail is None
        if created:
            body = (_dumps({_HEADER_KEY: session_id, "version": 1}) + "\n").encode() + body
        with path.open("r+b" if not created else "wb") as f:
            if tail is not None:
                f.truncate(tail.end)  # drop what a crashed writer left half-done
            f.seek(0, os.SEEK_END)
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
            st = os.fstat(f.fileno())
        if created:
            self._fsync_dir(self.directory)
        base = tail or _Tail((st.st_dev, st.st_ino), 0, 0, set(), b"")
        self._tails[path] = _Tail(
            (st.st_dev, st.st_ino), base.end + len(body), start + len(values),
            _batch_marks(set(base.started), values),
            lines[-1].encode() + b"\n")

    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        values = [{"message": message_to_dict(m)} for m in check_messages(messages)]
        if not values:
            return
        json.dumps(values)  # fails before anything is written if a value cannot be encoded
        with self._locked(exclusive=True):
            self._append_records(session_id, values)

    def mark_started(self, session_id: str, tool_call_id: str) -> None:
        check_session_id(session_id)
        if not isinstance(tool_call_id, str):
            msg = f"tool_call_id must be a str, got {type(tool_call_id).__name__}."
            raise TypeError(msg)
        with self._locked(exclusive=True):
            tail = self._tail(session_id, self.path_of(session_id))
            if tail is not None and tool_call_id in tail.started:
                return
            self._append_records(session_id, [{"started": tool_call_id}])

    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        items = check_messages(messages)
        values: list[dict[str, Any]] = [{"message": message_to_dict(m)} for m in items]
        keep = unanswered_call_ids(items)
        path = self.path_of(session_id)
        with self._locked(exclusive=True):
            self._tails.pop(path, None)  # the file is rewritten: the next append reads it
            parsed = self._parse(session_id, path, warn=False)
            marks = _open_marks(parsed.records)
            values += [{"started": r["started"]} for r in parsed.records
                       if r.get("started") in marks and marked_call_id(r["started"]) in keep]
            if not values:
                self._remove(path)
                return
            lines = [_dumps({_HEADER_KEY: session_id, "version": 1})]
            lines += [_dumps({"seq": i, **v}) for i, v in enumerate(values)]
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                with tmp.open("wb") as f:
                    f.write(("\n".join(lines) + "\n").encode())
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            finally:
                if tmp.exists():
                    tmp.unlink()
            self._fsync_dir(self.directory)

    def _remove(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            return
        self._fsync_dir(self.directory)

    def delete(self, session_id: str) -> None:
        path = self.path_of(session_id)
        with self._locked(exclusive=True):
            self._tails.pop(path, None)
            self._remove(path)


