"""``MemoryFiles``: an agent's long-term memory as Markdown files in one root.

A root holds ``MEMORY.md`` (at most ``max_lines`` lines, 150 by default,
its pointer lines included), fragments ``auto-YYYY-MM-DD-xxxx.md`` (at most
``max_lines`` lines each) for what does not fit, and its
bookkeeping: ``.memory.lock`` (the lock), ``.memory_gc`` (touched by each
consolidation), ``.memory.generation`` (a token each consolidation changes),
``.memory.pending`` (the append in progress). See
:mod:`context_core.memory.facts` for the line format, :mod:`.store` for how
appends and consolidations survive a crash, :mod:`.extract` and
:mod:`.consolidate` for what the offline defaults do.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import filelock

from context_core.errors import (
    InvalidInputError,
    InvalidTypeError,
    MemoryFormatError,
    MemoryLimitError,
    MemoryLockError,
    MemoryPathError,
    MemoryStorageError,
    memory_storage_error,
)
from context_core.memory.consolidate import consolidate_items
from context_core.memory.extract import conversation_text, extract_facts
from context_core.memory.facts import (
    FRAGMENT_NAME,
    Fact,
    Item,
    Pointer,
    RawLine,
    parse_line,
    parse_reply,
    to_facts,
)
from context_core.memory.layout import plan
from context_core.memory.prompts import consolidate_prompt, extract_prompt
from context_core.memory.safety import LOCK_NAME, MEMORY_NAME, ensure_root, open_file, open_root
from context_core.memory.store import Cached, Store, encode, read_lockless

__all__ = ["AppendResult", "ConsolidateResult", "MemoryFiles"]

_T = TypeVar("_T")

DEFAULT_MAX_LINES = 150
DEFAULT_MAX_LINE_BYTES = 4096
DEFAULT_MAX_BATCH_BYTES = 1 << 20
DEFAULT_MIN_FRAGMENTS = 12
DEFAULT_GC_INTERVAL = 7 * 24 * 3600.0


@dataclass(frozen=True)
class AppendResult:
    """What an append (or ``persist_learnings``) did."""

    appended: tuple[Fact, ...]
    """The facts written, in order."""
    duplicates: tuple[Fact, ...]
    """The facts not written: already in memory (or earlier in the batch); for
    a fact with a key, already its key's newest value."""
    file: str | None
    """Where they went: ``"MEMORY.md"``, a fragment's name (the first, if the
    batch needed several), or ``None`` (nothing written)."""
    files: tuple[str, ...] = ()
    """Every file they went to, in order: several fragments when the batch
    holds more than ``max_lines`` facts."""


@dataclass(frozen=True)
class ConsolidateResult:
    """What a ``consolidate`` call did."""

    ran: bool
    """Whether a new MEMORY.md was written."""
    reason: str
    """Why it ran or did not (``"forced"``, ``"due"``, ``"not due: ..."``,
    ``"superseded: ..."``)."""
    facts_before: int = 0
    """Facts read (MEMORY.md and the merged fragments, and what was appended
    while the model ran)."""
    facts_after: int = 0
    """Facts written."""
    merged: tuple[str, ...] = ()
    """The fragments merged (and removed)."""
    created: tuple[str, ...] = ()
    """New fragments for facts that did not fit in MEMORY.md."""
    kept: tuple[str, ...] = ()
    """Fragments left as they were (created while the model ran)."""


@dataclass
class _Snapshot:
    generation: str  # .memory.generation when read
    memory_items: int  # MEMORY.md's items: the first ones of ``items``
    fragments: list[tuple[str, int, int]]  # (name, where its items start in ``items``, how many)
    items: list[Item]


class MemoryFiles:
    """The memory files of one agent (or tenant) in the directory ``root``.

    ``root`` is created (``0700``) if missing, unless ``create=False``. Nothing
    outside it is ever read or written: one root per tenant or agent.

    Options: ``max_lines`` (MEMORY.md's size, pointer lines included, and a
    fragment's; see :mod:`~context_core.memory.layout`), ``max_line_bytes``
    and ``max_batch_bytes`` (input limits), ``min_fragments`` and
    ``gc_interval`` (seconds; when consolidation is due), ``lock_timeout``
    (seconds to wait for the lock, then :class:`~context_core.MemoryLockError`)
    and ``poll_interval`` (seconds between tries), ``durability``
    (``"always"``: fsync every append and rename; ``"never"``: leave it to the
    OS, still atomic against a killed process).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_lines: int = DEFAULT_MAX_LINES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        min_fragments: int = DEFAULT_MIN_FRAGMENTS,
        gc_interval: float = DEFAULT_GC_INTERVAL,
        lock_timeout: float = 10.0,
        poll_interval: float = 0.002,
        durability: Literal["always", "never"] = "always",
        create: bool = True,
    ) -> None:
        if not isinstance(root, (str, os.PathLike)):
            raise InvalidTypeError(f"root must be a path, got {type(root).__name__}")
        for name, value, least in (
            ("max_lines", max_lines, 1),
            ("max_line_bytes", max_line_bytes, 16),
            ("max_batch_bytes", max_batch_bytes, 16),
            ("min_fragments", min_fragments, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < least:
                raise InvalidInputError(f"{name} must be at least {least}, got {value}")
        for name, number in (
            ("gc_interval", gc_interval),
            ("lock_timeout", lock_timeout),
            ("poll_interval", poll_interval),
        ):
            # `not number >= 0`: NaN is refused too (it compares false with anything).
            if not isinstance(number, (int, float)) or isinstance(number, bool) or not number >= 0:
                raise InvalidInputError(f"{name} must be a number >= 0, got {number!r}")
        if durability not in ("always", "never"):
            raise InvalidInputError(f"durability must be 'always' or 'never', got {durability!r}")
        self.root = ensure_root(os.fspath(root), create=create)
        self.max_lines = max_lines
        self.max_line_bytes = max_line_bytes
        self.max_batch_bytes = max_batch_bytes
        self.min_fragments = min_fragments
        self.gc_interval = float(gc_interval)
        self.lock_timeout = float(lock_timeout)
        self.poll_interval = max(float(poll_interval), 1e-4)
        self.durability = durability
        self._lock = filelock.FileLock(os.path.join(self.root, LOCK_NAME), mode=0o600)
        self._lock_pid = os.getpid()
        self._cache: dict[str, Cached] = {}

    def __repr__(self) -> str:
        return f"MemoryFiles({self.root!r})"

    @property
    def memory_path(self) -> str:
        """The path of MEMORY.md."""
        return os.path.join(self.root, MEMORY_NAME)

    # -- the lock -------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[Store]:
        """The root's lock held, and a :class:`Store` of the root.

        ``.memory.lock`` is first created or checked through the root's
        descriptor without following a symlink; ``filelock`` then opens it by
        path (with ``O_NOFOLLOW`` since 3.20.1), so a symlink swapped in
        between is refused (``ELOOP``: :class:`~context_core.MemoryPathError`)
        and never followed. Any other OS error from the lock is a
        :class:`~context_core.MemoryStorageError`."""
        path = os.path.join(self.root, LOCK_NAME)
        with open_root(self.root) as dir_fd:
            fd = open_file(self.root, dir_fd, LOCK_NAME, os.O_RDWR, create=True)  # refuses a symlink
            assert fd is not None
            os.close(fd)
            if self._lock_pid != os.getpid():
                # A forked child (a server's worker): filelock refuses a lock
                # made in the parent; the child's own takes the same file's
                # lock, so the two processes still take turns.
                self._lock = filelock.FileLock(path, mode=0o600)
                self._lock_pid = os.getpid()
            try:
                self._lock.acquire(timeout=self.lock_timeout, poll_interval=self.poll_interval)
            except filelock.Timeout:
                raise MemoryLockError(
                    f"{path} stayed locked for {self.lock_timeout:g} s (lock_timeout)"
                ) from None
            except OSError as error:
                raise _lock_error(path, error) from error
            done = False
            try:
                if os.path.islink(path):  # swapped in meanwhile
                    raise MemoryPathError(f"{path} is a symlink; refused")
                yield Store(
                    self.root,
                    dir_fd,
                    self._cache,
                    durable=self.durability == "always",
                    max_lines=self.max_lines,
                )
                done = True
            finally:
                try:
                    self._lock.release()
                except OSError as error:
                    if done:  # else the error that is already propagating says more
                        raise _lock_error(path, error) from error

    # -- reading --------------------------------------------------------------------

    def read(self, *, expand: bool = False) -> str:
        """MEMORY.md's text ("" if there is none yet), every line ending in a
        newline. ``expand=True``: each pointer line replaced by its fragment's
        lines, read under the lock after recovery.

        Without ``expand`` no lock is taken (a read never waits, and works in
        a root it cannot write to), so what it returns is the file as one
        ``read`` saw it: whole lines only. A batch that another process is
        appending at that moment may show only its first lines; a batch a
        killed writer left half written shows its whole lines until the next
        locked call cuts it back; and while an append is under way (or was cut
        short) a last line without its newline is left out, else it is
        included (a hand edit). A consolidation replaces the file in one
        rename, so a read sees the old file or the new one, never a mix."""
        if not expand:
            with open_root(self.root) as dir_fd:
                # An editor's byte order mark is no part of the text (nor of the prompt).
                return read_lockless(self.root, dir_fd).decode("utf-8", "replace").removeprefix("\ufeff")
        with self._locked() as store:
            memory, fragments = store.recover()
            by_name = {cached.name: cached for cached in fragments}
            lines = []
            for item in memory.items:
                fragment = by_name.get(item.name) if isinstance(item, Pointer) else None
                if fragment is None:
                    lines.append(item.line())
                else:
                    lines.extend(i.line() for i in fragment.items)
            return "".join(f"{line}\n" for line in lines)

    def fragments(self) -> list[str]:
        """The fragments MEMORY.md points to, oldest first."""
        items = (parse_line(line) for line in self.read().splitlines())
        return list(dict.fromkeys(item.name for item in items if isinstance(item, Pointer)))

    def read_fragment(self, name: str) -> str:
        """One fragment's text, loaded on demand ("" if it no longer exists:
        a consolidation merged it). A name that is not a fragment's raises
        :class:`~context_core.MemoryPathError`."""
        if not isinstance(name, str) or not FRAGMENT_NAME.fullmatch(name):
            raise MemoryPathError(f"{name!r} is not a fragment name (auto-YYYY-MM-DD-xxxx.md)")
        with self._locked() as store:
            store.recover()
            cached = store.load(name)
            return "" if cached is None else "".join(f"{item.line()}\n" for item in cached.items)

    def facts(self) -> list[Fact]:
        """Every fact, oldest first: MEMORY.md's, then each fragment's."""
        with self._locked() as store:
            memory, fragments = store.recover()
            return memory.facts() + [fact for cached in fragments for fact in cached.facts()]

    # -- appending ------------------------------------------------------------------

    def _check_batch(self, facts: Iterable[Fact | str]) -> list[Fact]:
        batch = to_facts(facts)
        total = 0
        for index, fact in enumerate(batch):
            size = fact.line_bytes
            if size > self.max_line_bytes:
                raise MemoryLimitError(
                    f"fact {index} is {size} bytes as a line, over max_line_bytes={self.max_line_bytes}"
                    " (nothing written)"
                )
            total += size
        if total > self.max_batch_bytes:
            raise MemoryLimitError(
                f"the batch is {total} bytes, over max_batch_bytes={self.max_batch_bytes} (nothing written)"
            )
        return batch

    def append(self, facts: Iterable[Fact | str]) -> AppendResult:
        """BoundedAppend: write ``facts`` (:class:`Fact` objects or lines such as
        ``"- [decision: db] Use Postgres 16"``), under the lock, atomically.

        Facts already in memory are skipped: a fact without a key when a near
        duplicate of it is anywhere (MEMORY.md or any fragment), a fact with a
        key when it is a near duplicate of its key's newest value (so a value
        that comes back after another, ``5433`` then ``5434`` then ``5433``, is
        written and wins).

        Where the batch goes: MEMORY.md while it fits there and no fragment
        exists yet; else today's newest fragment while the whole batch fits
        in it; else new fragments ``auto-YYYY-MM-DD-xxxx.md`` of at most
        ``max_lines`` facts each, with their pointer lines in MEMORY.md. A new
        pointer never takes MEMORY.md past ``max_lines`` lines: when it would,
        MEMORY.md's newest lines move to a new fragment pointed to where they
        were (the order of the facts is unchanged), leaving
        ``max(1, max_lines // 10)`` lines free (this replaces MEMORY.md, like a
        consolidation: a model consolidation under way is superseded). Only
        when MEMORY.md holds nothing but pointers does the newest fragment grow
        past ``max_lines`` instead (some ``max_lines ** 2 / 2`` facts or more
        without a consolidation).

        The batch is written whole or not at all, even across fragments. The
        whole batch is refused, nothing written, if a line is
        over ``max_line_bytes`` or the batch over ``max_batch_bytes``
        (:class:`~context_core.MemoryLimitError`) or a line is not a fact
        (:class:`~context_core.MemoryFormatError`)."""
        batch = self._check_batch(facts)
        if not batch:
            return AppendResult((), (), None)
        with self._locked() as store:
            return self._append_locked(store, batch)

    def _append_locked(self, store: Store, batch: Sequence[Fact]) -> AppendResult:
        memory, fragments = store.recover()
        files = [memory, *fragments]  # oldest first
        new, duplicates = [], []
        seen: set[str] = set()  # keyless facts of the batch
        current: dict[str, str] = {}  # a key's newest value so far in the batch
        for fact in batch:
            signature, identity = fact.signature, fact.identity
            if identity is None:  # a duplicate anywhere
                duplicate = signature in seen or any(signature in c.signatures for c in files)
                seen.add(signature)
            else:  # a duplicate only of its key's newest value (an older value may come back)
                newest = current.get(identity)
                if newest is None:
                    newest = next((c.newest[identity] for c in reversed(files) if identity in c.newest), None)
                duplicate = newest == signature
                current[identity] = signature
            if duplicate:
                duplicates.append(fact)
            else:
                new.append(fact)
        if not new:
            return AppendResult((), tuple(duplicates), None)
        last = fragments[-1] if fragments else None
        today = time.strftime("%Y-%m-%d", time.gmtime())
        if not memory.pointers() and len(memory.items) + len(new) <= self.max_lines:
            targets = [MEMORY_NAME]
            store.append_bytes(MEMORY_NAME, encode(fact.line() for fact in new))
        elif (
            last is not None
            and last.name == memory.pointers()[-1]
            and last.name[5:15] == today
            and len(last.items) + len(new) <= self.max_lines
        ):
            targets = [last.name]
            store.append_bytes(last.name, encode(fact.line() for fact in new))
        else:
            targets = store.place(memory, new)
        return AppendResult(tuple(new), tuple(duplicates), targets[0], tuple(targets))

    def _transcript(self, messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
        transcript = conversation_text(messages)
        size = sum(len(text.encode("utf-8", "surrogatepass")) for _, text in transcript)
        if size > self.max_batch_bytes:
            raise MemoryLimitError(
                f"the conversation's text is {size} bytes, over max_batch_bytes={self.max_batch_bytes}"
                " (nothing sent, nothing written)"
            )
        return transcript

    def _reply_facts(self, reply: str) -> list[Fact]:
        if isinstance(reply, str) and len(reply.encode("utf-8", "surrogatepass")) > self.max_batch_bytes:
            raise MemoryLimitError(
                f"the model's reply is over max_batch_bytes={self.max_batch_bytes} (nothing written)"
            )
        return self._check_batch(parse_reply(reply))

    def persist_learnings(
        self,
        messages: Iterable[Mapping[str, Any]],
        llm: Any = None,
        *,
        max_tokens: int = 1024,
        temperature: float = 0.0,
    ) -> AppendResult:
        """PersistLearnings: extract the facts worth keeping from a conversation
        and append them (see :meth:`append`; facts already present are skipped).

        Only user and assistant text is read; system, developer and tool
        messages are never sent to the model nor extracted from. With ``llm``
        (an :class:`~context_core.llm.LLM` such as ``OpenAIChat(client,
        model=...)``, or a plain ``f(messages) -> str``; a bare SDK client
        needs its model, so wrap it with :func:`~context_core.llm.as_llm`
        first) the model is asked for
        fact lines (:mod:`~context_core.memory.prompts`); a reply in any other
        format raises :class:`~context_core.MemoryFormatError` and writes
        nothing. Without it, the deterministic extractor
        (:func:`~context_core.memory.extract.extract_facts`) runs."""
        messages = _message_list(messages)
        transcript = self._transcript(messages)
        if not transcript:
            return AppendResult((), (), None)
        if llm is None:
            facts = self._check_batch(extract_facts(messages))
        else:
            model = _as_llm(llm)
            reply = model.complete(extract_prompt(transcript), max_tokens=max_tokens, temperature=temperature)
            facts = self._reply_facts(reply)
        return self.append(facts)

    async def apersist_learnings(
        self,
        messages: Iterable[Mapping[str, Any]],
        llm: Any = None,
        *,
        max_tokens: int = 1024,
        temperature: float = 0.0,
    ) -> AppendResult:
        """:meth:`persist_learnings` without blocking the event loop: the model
        through ``acomplete``, extraction, file I/O and lock waits in a worker
        thread."""
        messages = _message_list(messages)
        transcript = await asyncio.to_thread(self._transcript, messages)
        if not transcript:
            return AppendResult((), (), None)
        if llm is None:
            return await asyncio.to_thread(self.persist_learnings, messages)
        model = _as_llm(llm)
        reply = await model.acomplete(
            extract_prompt(transcript), max_tokens=max_tokens, temperature=temperature
        )
        facts = self._reply_facts(reply)
        return await asyncio.to_thread(self.append, facts)

    async def aappend(self, facts: Iterable[Fact | str]) -> AppendResult:
        """:meth:`append` in a worker thread (never blocks the event loop)."""
        return await asyncio.to_thread(self.append, list(facts))

    # -- consolidation --------------------------------------------------------------

    def due(self) -> bool:
        """Whether :meth:`consolidate` would run without ``force``."""
        with self._locked() as store:
            _, fragments = store.recover()
            return self._due(store, fragments) is None

    def _due(self, store: Store, fragments: list[Cached]) -> str | None:
        """``None`` if consolidation is due, else why not."""
        if len(fragments) < self.min_fragments:
            return f"not due: {len(fragments)} fragments, fewer than min_fragments={self.min_fragments}"
        age = store.gc_age()
        if age is not None and age < self.gc_interval:
            return f"not due: last consolidation {age:.0f} s ago, gc_interval is {self.gc_interval:g} s"
        return None

    def _begin(self, store: Store, force: bool) -> _Snapshot | ConsolidateResult:
        memory, fragments = store.recover()
        if not force:
            why = self._due(store, fragments)
            if why is not None:
                return ConsolidateResult(False, why)
        items = list(memory.items)
        spans = []
        for cached in fragments:
            spans.append((cached.name, len(items), len(cached.items)))
            items.extend(cached.items)
        return _Snapshot(store.generation(), len(memory.items), spans, items)

    def _finish(self, store: Store, snap: _Snapshot, reply: list[Fact] | None, why: str) -> ConsolidateResult:
        memory, fragments = store.recover()
        n = snap.memory_items
        if store.generation() != snap.generation:
            return ConsolidateResult(
                False,
                "superseded: MEMORY.md was rewritten meanwhile (another consolidation, or lines moved"
                " out of a full MEMORY.md); nothing written",
            )
        if memory.items[:n] != snap.items[:n]:
            return ConsolidateResult(False, "superseded: MEMORY.md was edited meanwhile; nothing written")
        by_name = {cached.name: cached for cached in fragments}
        merged, later = [], list(memory.items[n:])
        for name, start, count in snap.fragments:
            cached = by_name.get(name)
            if cached is None or cached.items[:count] != snap.items[start : start + count]:
                continue  # gone, or edited: left as it is
            merged.append(name)
            later.extend(cached.items[count:])  # appended while the model ran
        kept = [c.name for c in fragments if c.name not in set(merged)]
        if reply is None:
            items = consolidate_items(snap.items + later)
        else:
            raw = [item for item in snap.items[: snap.memory_items] if isinstance(item, RawLine)]
            items = consolidate_items([*raw, *reply, *later])
        items = [item for item in items if not isinstance(item, Pointer)]
        before = sum(isinstance(item, Fact) for item in snap.items + later)
        lines, new = self._layout(store, items, kept)
        store.commit(lines, new, merged)
        return ConsolidateResult(
            True,
            why,
            before,
            sum(isinstance(item, Fact) for item in items),
            tuple(merged),
            tuple(new),
            tuple(kept),
        )

    def _layout(self, store: Store, items: list[Item], kept: list[str]) -> tuple[list[str], dict[str, bytes]]:
        """MEMORY.md's lines (the oldest items, then pointers, all within
        ``max_lines``: :mod:`~context_core.memory.layout`) and the new
        fragments holding what does not fit."""
        layout = plan(len(items), 0, len(kept), 0, self.max_lines)
        head, size = layout if layout is not None else (0, max(1, len(items)))  # only past max_lines pointers
        names: list[str] = []
        new: dict[str, bytes] = {}
        for start in range(head, len(items), size):
            name = store.new_fragment_name(names)
            names.append(name)
            new[name] = encode(item.line() for item in items[start : start + size])
        lines = [item.line() for item in items[:head]]
        lines += [Pointer(n).line() for n in names] + [Pointer(n).line() for n in kept]
        return lines, new

    def consolidate(
        self, llm: Any = None, *, force: bool = False, max_tokens: int = 4096
    ) -> ConsolidateResult:
        """Cold consolidation: when there are ``min_fragments`` fragments or more
        and ``.memory_gc`` is older than ``gc_interval`` (or ``force``), merge
        MEMORY.md and its fragments into a new MEMORY.md (duplicates removed,
        outdated facts retired), written atomically; the merged fragments are
        removed and ``.memory_gc`` touched.

        Without ``llm`` the deterministic consolidator runs, under the lock.
        With one, the facts are read under the lock, the lock is released while
        the model works, and taken again to write: facts appended meanwhile are
        added after the model's (never lost), fragments created meanwhile are
        kept. A malformed reply raises :class:`~context_core.MemoryFormatError`
        and writes nothing; so does a reply with no facts for a memory that has
        some."""
        if llm is None:
            with self._locked() as store:
                begun = self._begin(store, force)
                if isinstance(begun, ConsolidateResult):
                    return begun
                return self._finish(store, begun, None, "forced" if force else "due")
        model = _as_llm(llm)
        with self._locked() as store:
            begun = self._begin(store, force)
        if isinstance(begun, ConsolidateResult):
            return begun
        facts = [item for item in begun.items if isinstance(item, Fact)]
        if not facts:  # nothing for the model to do
            return self._locked_call(self._finish, begun, None, "forced" if force else "due")
        reply = self._consolidation_reply(
            facts, model.complete(consolidate_prompt(facts), max_tokens=max_tokens, temperature=0.0)
        )
        with self._locked() as store:
            return self._finish(store, begun, reply, "forced" if force else "due")

    def _consolidation_reply(self, facts: list[Fact], reply: str) -> list[Fact]:
        parsed = self._reply_facts(reply)
        if facts and not parsed:
            raise MemoryFormatError(
                f"the model returned no facts for a memory of {len(facts)}; nothing written", text=reply
            )
        return parsed

    async def aconsolidate(
        self, llm: Any = None, *, force: bool = False, max_tokens: int = 4096
    ) -> ConsolidateResult:
        """:meth:`consolidate` without blocking the event loop: file I/O and
        lock waits in a worker thread, the model through ``acomplete``."""
        if llm is None:
            return await asyncio.to_thread(self.consolidate, None, force=force)
        model = _as_llm(llm)
        begun = await asyncio.to_thread(self._locked_call, self._begin, force)
        if isinstance(begun, ConsolidateResult):
            return begun
        facts = [item for item in begun.items if isinstance(item, Fact)]
        if not facts:
            return await asyncio.to_thread(
                self._locked_call, self._finish, begun, None, "forced" if force else "due"
            )
        text = await model.acomplete(consolidate_prompt(facts), max_tokens=max_tokens, temperature=0.0)
        reply = self._consolidation_reply(facts, text)
        return await asyncio.to_thread(
            self._locked_call, self._finish, begun, reply, "forced" if force else "due"
        )

    def _locked_call(self, fn: Callable[..., _T], *args: Any) -> _T:
        with self._locked() as store:
            return fn(store, *args)


def _lock_error(path: str, error: OSError) -> MemoryPathError | MemoryStorageError:
    if error.errno in (errno.ELOOP, errno.EISDIR):
        what = "a symlink" if error.errno == errno.ELOOP else "a directory"
        return MemoryPathError(f"{path} is {what}; refused")
    return memory_storage_error(f"{path}: cannot lock: {error.strerror or error}", error, path)


def _message_list(messages: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidTypeError(f"messages must be a list of message dicts, got {type(messages).__name__}")
    return list(messages)


def _as_llm(llm: Any) -> Any:
    from context_core.llm import as_llm  # the client layer loads only when a model is used

    return as_llm(llm)
