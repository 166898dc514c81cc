"""The message log: an mmap-backed, crash-safe store of
conversation nodes with indexed headers. ``docs/log-format.md`` specifies
the files; the Rust core writes, recovers and checks them, this module
decodes payloads and views the headers with numpy."""

from __future__ import annotations

import functools
import json
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from context_core._core import METADATA_KEYS, SEGMENT_PREFIX, SUMMARY_PREFIX, _MessageLog
from context_core.errors import InvalidTypeError, LogCorruptError

__all__ = ["HEADER_DTYPE", "MessageLog", "RepairReport"]

#: One index record (docs/log-format.md, "Node header"); 64 bytes.
HEADER_DTYPE = np.dtype(
    [
        ("seq", "<u8"),
        ("parent", "<u8"),
        ("timestamp", "<f8"),
        ("offset", "<u8"),
        ("stored_len", "<u4"),
        ("raw_len", "<u4"),
        ("tokens", "<u4"),
        ("weight", "<f4"),
        ("priority", "<f4"),
        ("hash", "<u4"),
        ("role", "u1"),
        ("kind", "u1"),
        ("tags", "u1"),
        ("flags", "u1"),
        ("check", "<u4"),
    ]
)
_FILE_HEADER = 64
#: Decoded payloads kept per open log: a turn re-reads mostly what the last one kept.
DECODED_CACHE = 16_384
_PREFIX = {"global": SUMMARY_PREFIX, "segment": SEGMENT_PREFIX}
_METADATA = frozenset(METADATA_KEYS)


@dataclass(frozen=True)
class RepairReport:
    """What :meth:`MessageLog.repair` kept and what it could not."""

    kept: int
    #: Records lost, each left as a placeholder node so later seqs keep their numbers.
    lost: int
    dropped_bytes: int
    #: Each problem found, naming the file and byte offset.
    problems: list[str]


class MessageLog(_MessageLog):
    """A directory holding one conversation tree. Open with :meth:`open`.

    The Rust log is the base class: ``append``, ``rewind``, ``flush``,
    ``path``, ``node_id``, ``verify``, ``len()`` and the properties are its own
    methods, called with no Python frame in between."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        readonly: bool = False,
        encoding: str | None = None,
        new_encoding: str | None = None,
        durability: str = "batch",
        lock_timeout: float = 0.0,
    ) -> None:
        # The Rust base class opened the log in __new__, from these same
        # arguments (the keywords of :meth:`open`, with the same defaults)
        # and checked them there; they are named here for the signature.
        self._path = os.fspath(path)
        self._map: mmap.mmap | None = None
        self._decoded: OrderedDict[int, Any] = OrderedDict()
        # Messages derived from decoded payloads (a summary as a system
        # message, a message marked pinned), by seq, with the payload each
        # was made from: the same object turn after turn while that payload
        # is, so selection recalls them as it does the messages.
        self._derived: dict[int, tuple[Any, dict[str, Any]]] = {}
        # Guards the decoded cache: threads of one server share a log (the
        # Rust log has its own lock). A child of a fork makes its own, as the
        # parent's may have been held by a thread the child does not have.
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        readonly: bool = False,
        encoding: str | None = None,
        new_encoding: str | None = None,
        durability: str = "batch",
        lock_timeout: float = 0.0,
    ) -> MessageLog:
        """Open (``create=True``: make) the log at directory ``path``.

        A writer takes the log's lock (waiting up to ``lock_timeout`` seconds,
        else :class:`~context_core.LogLockedError`) and repairs a torn tail;
        ``readonly=True`` reads alongside a writer in another process.
        ``durability``: ``"always"`` (fsync per append), ``"batch"`` (synced
        within 20 ms) or ``"never"`` (on flush and close).

        The encoding the counts are in: ``encoding`` is one the log must
        count in (another is refused with :class:`~context_core.InvalidInputError`);
        ``new_encoding`` is the one a log this open makes counts in, where an
        existing log keeps its own (read :attr:`encoding` to see which). Give
        one or neither (a new log then counts in ``o200k_base``)."""
        return cls(
            path,
            create=create,
            readonly=readonly,
            encoding=encoding,
            new_encoding=new_encoding,
            durability=durability,
            lock_timeout=lock_timeout,
        )

    # -- writing -------------------------------------------------------------

    def append_many(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """Append ``messages`` in order (one write for all); their seqs."""
        first, end = self._append_many(list(messages))
        return list(range(first, end))

    def add_summary(self, text: str, covers: tuple[int, int], level: int = 2) -> int:
        """A summary node (level 2: a segment, 3: the whole conversation)
        covering seqs ``covers[0]..covers[1]``; raw history resumes after it."""
        try:
            first, last = covers
        except (TypeError, ValueError):
            raise InvalidTypeError("covers must be a pair (first, last) of seqs") from None
        return self._add_summary(text, first, last, level)

    def close(self) -> None:
        """Flush, write the checkpoint, release the lock and close the files;
        idempotent. Arrays from :meth:`headers` stay readable (they hold their
        own map of the index)."""
        self._close()
        self._map = None
        self._decoded = OrderedDict()
        self._derived = {}

    def __enter__(self) -> MessageLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reading -------------------------------------------------------------

    def __getitem__(self, seq: int) -> Any:
        return self.read([seq])[0]

    def read(self, seqs: Iterable[int]) -> list[Any]:
        """The nodes' payloads: a message's dict as appended, a summary's
        ``{"summary", "covers", "level"}``, ``None`` for a branch marker."""
        payloads = self._read(list(seqs))
        present = [p for p in payloads if p]
        if len(present) > 1:
            # One parse of them all as an array: a fifth of the time of a
            # json.loads per payload (a cold window reads thousands). Kept
            # only if it gives one value per payload; anything else (only a
            # crafted file) is read one by one below, which says what is wrong.
            try:
                values = json.loads(b"[" + b",".join(present) + b"]")
            except (ValueError, RecursionError):
                values = None
            if isinstance(values, list) and len(values) == len(present):
                each = iter(values)
                return [next(each) if p else None for p in payloads]
        try:
            return [json.loads(p) if p else None for p in payloads]
        except (ValueError, RecursionError) as error:  # only a crafted file: the checksums held
            raise LogCorruptError(f"data: a payload is not the JSON of a message ({error})") from None

    def __iter__(self) -> Iterator[Any]:
        end = len(self)
        for start in range(0, end, 256):
            yield from self.read(range(start, min(start + 256, end)))

    def headers(self) -> np.ndarray:
        """Every node's header: a read-only structured array (:data:`HEADER_DTYPE`)
        viewing the mapped index, no copy.

        The view reads the file in place, so it holds the log's one promise
        about its files: only its writer changes them, and it never shrinks
        one (repair writes new files and renames them in; this view keeps
        reading the old one). A file truncated from outside while the array
        lives may fault the process (SIGBUS) when it is read, as with any
        memory-mapped file; copy it (``headers().copy()``) to keep it past
        such changes."""
        count = len(self)
        needed = _FILE_HEADER + count * HEADER_DTYPE.itemsize
        if self._map is None or len(self._map) < needed:
            # The file the log opened (no link followed), not the path again.
            fd = self._index_fd()
            try:
                size = os.fstat(fd).st_size
                self._map = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
            finally:
                os.close(fd)
        if self._map is None:
            return np.zeros(0, dtype=HEADER_DTYPE)
        return np.frombuffer(self._map, dtype=HEADER_DTYPE, count=count, offset=_FILE_HEADER)

    def context_view(self) -> list[dict[str, Any]]:
        """What the model should see of the active path: system and pinned
        messages the summaries cover, the newest global (level 3) summary, the
        newest three segment (level 2) summaries after it, then the messages
        after the summaries' pointer. Summaries read as system messages. The
        dicts are the log's own, the same objects from one call to the next:
        treat them as read-only."""
        return self._render(self._view(), strip=False)

    def _render(self, nodes: list[tuple[int, str]], *, strip: bool) -> list[dict[str, Any]]:
        """Nodes of the view as messages: summaries as system messages; with
        ``strip``, the selection metadata keys taken off (as sent)."""
        payloads = self._cached([seq for seq, _ in nodes])
        if not strip and _PREFIX.keys().isdisjoint([part for _, part in nodes]):
            return payloads  # messages only, as appended (the cache's own dicts, read-only)
        out = []
        for (seq, part), payload in zip(nodes, payloads, strict=True):
            summary = _SUMMARY_MESSAGE.get(part)
            if summary is not None:
                out.append(self._derive(seq, payload, summary))
            elif not strip or _METADATA.isdisjoint(payload):
                out.append(payload)
            else:
                out.append({k: v for k, v in payload.items() if k not in _METADATA})
        return out

    def _derive(self, seq: int, payload: Any, make: Callable[[int, Any], dict[str, Any]]) -> dict[str, Any]:
        """``make(seq, payload)``, the message node ``seq`` reads as, made
        once per payload object (read-only, as the cache's own dicts are)."""
        held = self._derived.get(seq)
        if held is not None and held[0] is payload:
            return held[1]
        message = make(seq, payload)
        if len(self._derived) >= DECODED_CACHE:
            self._derived.clear()  # a few summaries and pinned messages a view; many only after long use
        self._derived[seq] = (payload, message)
        return message

    def _cached(self, seqs: list[int]) -> list[Any]:
        """Decoded payloads, from the cache where a turn before read them.
        The answer is built before anything is evicted, so a view larger
        than the cache still comes back whole. (A view holds messages and
        summaries only, never a ``None`` payload: ``None`` means a miss.)"""
        with self._decoded_lock():
            found = list(map(self._decoded.get, seqs))
        if None not in found:
            return found
        missing = [seq for seq, payload in zip(seqs, found, strict=True) if payload is None]
        decoded = dict(zip(missing, self.read(missing), strict=True))
        found = [
            decoded[seq] if payload is None else payload for seq, payload in zip(seqs, found, strict=True)
        ]
        self._keep_decoded(decoded)
        return found

    def _keep_appended(self, seq: int, message: Any) -> None:
        """Keep ``message``, just appended as ``seq``, in the decoded cache
        as reading it back would give it: a copy of its containers sharing
        its strings and numbers, which is what its JSON decodes to when it
        holds plain values only. The next window then takes it without
        decoding it (a long tool output's JSON costs tens of microseconds).
        Anything else (a subclass, a key that is not a str) is left to be
        read back."""
        if type(message) is not dict:
            return  # an SDK object the log turned into a dict: read back
        try:
            payload = _plain_copy(message)
        except Exception:  # not plain, too deep, or changed by another thread while copied
            return
        self._keep_decoded({seq: payload})

    def _keep_decoded(self, decoded: dict[int, Any]) -> None:
        """Adds ``decoded`` payloads to the cache, the oldest evicted past its size."""
        with self._decoded_lock():
            cache = self._decoded
            cache.update(decoded)
            while len(cache) > DECODED_CACHE:
                cache.popitem(last=False)

    def _decoded_lock(self) -> threading.Lock:
        """The decoded cache's lock. A child of a fork makes its own, as the
        parent's may have been held by a thread the child does not have."""
        if self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        return self._lock

    @staticmethod
    def repair(path: str | os.PathLike[str], *, lock_timeout: float = 0.0) -> RepairReport:
        """Rebuild a damaged log from its intact frames (new files, renamed in)."""
        kept, lost, dropped, problems = _MessageLog._repair(path, lock_timeout)
        return RepairReport(kept, lost, dropped, problems)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self)} nodes"
        return f"MessageLog({self._path!r}, {state})"


def _summary_message(prefix: str, seq: int, payload: Any) -> dict[str, Any]:
    """Summary node ``seq``'s payload as the system message a view reads."""
    try:
        return {"role": "system", "content": prefix + payload["summary"]}
    except (KeyError, TypeError):  # only a crafted file: the checksums held
        raise LogCorruptError(f"data: node {seq} is no summary payload") from None


_SUMMARY_MESSAGE = {part: functools.partial(_summary_message, prefix) for part, prefix in _PREFIX.items()}


class _NotPlain(Exception):
    """A value whose JSON does not decode to a copy of it."""


def _plain_copy(value: Any) -> Any:
    """``value`` as decoding its JSON gives it back: new dicts and lists,
    the same strings, numbers, booleans and ``None``. Exact types only: a
    subclass may write itself otherwise."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        copy = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            copy[key] = _plain_copy(item)
        return copy
    if kind is list:
        return [_plain_copy(item) for item in value]
    raise _NotPlain
