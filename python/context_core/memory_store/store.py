"""The memory store: typed memories in SQLite (WAL, FTS5), found again by
entity, vector and keyword, and forgotten when stale.

Every write is one ``BEGIN IMMEDIATE`` transaction: the memory, its
entities, its search terms and a ``changes`` row commit together or not at
all, so a writer killed at any point leaves the store as it was before the
call or after it. Several processes share one file safely (SQLite's own
locking; a process waits up to ``busy_timeout`` for another's write).
Vectors live in the database as float32 and, for search, in one matrix per
namespace held in Rust and moved forward from ``changes``, beside a BM25
index of the same memories' search terms
(:mod:`~context_core.memory_store.vectors`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import hashlib
import json
import math
import os
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple, TypeAlias, TypeGuard, TypeVar

import numpy as np

from context_core._core import Tokenizer, _entities, _entities_many, _rank_candidates
from context_core._logging import library_logger
from context_core.errors import (
    ContextCoreError,
    EmbeddingError,
    InvalidInputError,
    InvalidTypeError,
    StoreBusyError,
    StoreClosedError,
    StoreStorageError,
)
from context_core.memory_store import ranking
from context_core.memory_store.checks import check_str as _check_str
from context_core.memory_store.checks import check_unit as _check_unit
from context_core.memory_store.embedders import (
    UNNAMED_CALLABLE,
    CallableEmbedder,
    Embedder,
    HashingEmbedder,
    aembed,
    checked,
    default_embedder,
    embedder_name,
    embedder_named,
)
from context_core.memory_store.extract import KINDS, aextract_memories, extract_memories
from context_core.memory_store.keywords import (
    RANK,
    count_terms,
    indexed_words,
    match_query,
    plain_words,
    search_terms,
)
from context_core.memory_store.namespaces import (
    NamespaceLike,
    namespace_key,
    namespace_keys,
    namespace_of,
    scope,
)
from context_core.memory_store.schema import entity_key, migrate
from context_core.memory_store.vectors import ACCESS_FLUSHES, NamespaceVectors, corpus

__all__ = ["KINDS", "ForgetReport", "Hit", "Memory", "MemoryStore", "search_terms"]


#: Rows from which a search scans the int8 copy of the vectors (then
#: rescores its candidates exactly) rather than every float32 row.
QUANTISE_FROM = 20_000

#: The most hits one search returns.
MAX_K = 100_000

#: An entity named by at most this many memories brings every one of them
#: into the search, whatever their vector scores: a rare id or path is
#: never lost. One named by more (a common name, ``AWS``) counts only for
#: the memories the vector and keyword searches found, so a search never
#: reads thousands of rows for it.
ENTITY_MATCHES = 256

#: Searches count accesses in memory and write them together, in the next
#: write or once this many memories are pending or this many seconds (by
#: the store's clock) have passed, and at close: a search then costs no
#: write transaction of its own. A killed process loses at most those
#: counts (never a memory); reads by the same store include them. The
#: write a search makes due runs on the store's own thread (see
#: :func:`_write_counts_when_asked`): a server whose turns are seconds apart
#: would otherwise pay it in every turn's search (0.3-0.4 ms at the median
#: at 100,000 memories, and 10-19 ms at the 99th percentile when SQLite
#: checkpoints its log).
ACCESS_FLUSH_MEMORIES = 256
ACCESS_FLUSH_SECONDS = 1.0

_log = library_logger()

_COLUMNS = (
    "rowid, id, namespace, kind, text, importance, pinned, source, tags, created, last_access, access_count"
)
_TEXT = 4  # where the text is in a row of _COLUMNS


def _text_key(text: str) -> bytes:
    """What duplicates are found by: a 16-byte digest of the text lowered,
    runs of space as one (a digest keeps the unique index small)."""
    return hashlib.blake2b(" ".join(text.lower().split()).encode(), digest_size=16).digest()


@dataclass(frozen=True)
class Memory:
    """One memory. ``namespace`` reads back as it was written (a plain
    string, or a :class:`~context_core.memory_store.Namespace` of more than
    a tenant); ``entities`` are ``(kind, value)`` in normal form, by value;
    ``created`` and ``last_access`` are Unix times from the store's clock."""

    id: str
    namespace: NamespaceLike
    kind: str
    text: str
    importance: float
    entities: tuple[tuple[str, str], ...] = ()
    source: str | None = None
    tags: tuple[str, ...] = ()
    pinned: bool = False
    created: float = 0.0
    last_access: float = 0.0
    access_count: int = 0


@dataclass(frozen=True)
class Hit:
    """A search result: the memory, its final ``score``, and why it matched:
    the query's ``entities`` it shares, its ``cosine`` with the query and
    its ``keyword`` score (BM25 over the query's best, 0 to 1). ``reasons``
    names them (``"entity"``, ``"vector"``, ``"keyword"``)."""

    memory: Memory
    score: float
    reasons: tuple[str, ...]
    entities: tuple[str, ...] = ()
    cosine: float = 0.0
    keyword: float = 0.0

    @property
    def text(self) -> str:
        return self.memory.text


@dataclass(frozen=True)
class ForgetReport:
    """What :meth:`MemoryStore.forget` found: ``(id, retention)`` of each
    memory below the threshold (lowest first), and whether they were purged."""

    candidates: tuple[tuple[str, float], ...]
    purged: bool


@dataclass(frozen=True)
class _Entry:
    text: str
    kind: str
    importance: float
    source: str | None
    tags: tuple[str, ...]
    pinned: bool


@dataclass(frozen=True)
class _Prepared:
    """An entry with what its write needs, computed before the transaction."""

    entry: _Entry
    vector: np.ndarray
    entities: tuple[tuple[str, str], ...]
    words: str
    key: bytes
    entity_key: bytes | None


class _Ranked(NamedTuple):
    """A search candidate, scored before its row is read. Candidates sort
    best first as they are: most shared entities, then score, then the
    oldest row (a rowid is one candidate's, so no later field decides). A
    tuple, not a frozen dataclass: making and sorting a hundred took 57
    against 162 us. Candidates are ranked as plain tuples of these fields
    (:data:`_Candidate`), and only the chosen few made into this."""

    unshared: int  # minus how many of the query's entities it names
    unscore: float  # minus its score
    rowid: int
    matched: tuple[str, ...]
    cosine: float
    keyword: float
    near: bool  # found by the vector scan

    @property
    def score(self) -> float:
        return -self.unscore


#: A candidate as ranked: the fields of :class:`_Ranked`, in its order (a
#: plain tuple is made in a tenth of the time, for each of about fifty).
_Candidate: TypeAlias = tuple[int, float, int, tuple[str, ...], float, float, bool]
_ROWID: Final = 2  # where the rowid is in a _Candidate


def _texts(db: sqlite3.Connection, chosen: list[tuple[_Ranked, tuple[Any, ...]]], now: float) -> list[str]:
    """The chosen candidates' texts (a ``_search`` finish)."""
    return [row[_TEXT] for _, row in chosen]


_T = TypeVar("_T")
#: What a search makes of its chosen candidates and their rows, at ``now``.
_Finish: TypeAlias = Callable[[sqlite3.Connection, list[tuple[_Ranked, tuple[Any, ...]]], float], list[_T]]
#: How a search reads its chosen candidates' rows, by rowid (rows of
#: ``_COLUMNS``, or of its columns up to the text).
_RowReader: TypeAlias = Callable[[list[int]], dict[int, tuple[Any, ...]]]


def _file_rows(db: sqlite3.Connection, rowids: list[int]) -> dict[int, tuple[Any, ...]]:
    """The rows of ``rowids`` (a search's chosen few), read from ``db``."""
    marks = ",".join("?" * len(rowids))
    found = db.execute(f"SELECT {_COLUMNS} FROM memories WHERE rowid IN ({marks})", rowids)
    return {row[0]: row for row in found}


def _held_rows(held: list[NamespaceVectors], rowids: list[int]) -> dict[int, tuple[Any, ...]]:
    """The rows of ``rowids`` (candidates, each held by one of the
    namespaces ``held``) up to the text (``_TEXT``), from the held index:
    what :func:`_texts` reads, and the ids whose accesses are counted."""
    return {rowid: index.held_row(rowid) for rowid in rowids for index in held if rowid in index.position}


def _chunks(rowids: list[int], size: int = 900) -> Iterator[list[int]]:
    for start in range(0, len(rowids), size):
        yield rowids[start : start + size]


@dataclass
class _Rows:
    """Search terms and change records of a batch, written together at its
    end (terms by rowid: a memory updated twice in one batch is indexed once)."""

    terms: dict[int, str]
    changes: list[int]
    unindexed: list[str]  # the old terms of memories indexed before the batch


def _values(text: str) -> frozenset[str]:
    """The words of ``text`` that hold a digit (lower case, the punctuation
    around them and a possessive left out; Chinese punctuation parts words
    as space does): the ids, numbers and versions it names. Two memories
    that name other values are never merged, whether or not the entity
    extractor reads them: near duplicates by cosine, ``PR #4521 fixed the
    race`` and ``PR #4522 fixed the race`` were, and the first was lost.
    A set: the same values in another order, or one named twice, merge."""
    found = set()
    for word in _WORD_BREAKS.split(text.lower()):
        word = word.strip(_AROUND)
        word = word.removesuffix("'s").removesuffix("\u2019s")
        if any(c.isdigit() for c in word):
            found.add(word)
    return frozenset(found)


#: What parts words: space, and the punctuation of Chinese text (which has no spaces).
_WORD_BREAKS = re.compile(r"[\s\u3000-\u303f\uff01\uff08\uff09\uff0c\uff1a\uff1b\uff1f]+")
#: Punctuation around a word.
_AROUND = "\"'`()[]{}<>,;:!?.*\u201c\u201d\u2018\u2019\u300c\u300d"


@contextlib.contextmanager
def _embedder_errors() -> Iterator[None]:
    """Any error of the embedder's own as an :class:`EmbeddingError`."""
    try:
        yield
    except EmbeddingError:
        raise
    except Exception as error:
        raise EmbeddingError(f"the embedder raised {type(error).__name__}: {error}") from error


def _pool(k: int) -> int:
    """How many of each kind of candidate a search for ``k`` memories ranks."""
    return max(4 * k, 32)


#: A search's query, namespaces, k, kinds and max_tokens, checked.
_SearchArguments: TypeAlias = tuple[str, tuple[str, ...], int, tuple[str, ...] | None, int | None]


def _search_arguments(query: Any, namespace: Any, k: Any, kinds: Any, max_tokens: Any) -> _SearchArguments:
    """:meth:`MemoryStore.search`'s arguments, checked (``namespace`` as its keys)."""
    query = _check_str(query, "query")
    namespace = namespace_keys(namespace)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInputError(f"k must be an int from 1 to {MAX_K:,}, not {k!r}")
    if kinds is not None:
        if isinstance(kinds, str):
            kinds = (kinds,)
        elif not isinstance(kinds, Iterable):
            raise InvalidTypeError(f"kinds must be kind names, not {type(kinds).__name__}")
        kinds = tuple(kinds)
        odd = next((x for x in kinds if not isinstance(x, str)), None)
        if odd is not None:
            raise InvalidTypeError(f"kinds must be kind names, not {type(odd).__name__}")
        kinds = tuple(dict.fromkeys(kinds))
        if not kinds:
            raise InvalidInputError("kinds must name at least one kind (None: every kind)")
        bad = [x for x in kinds if x not in KINDS]
        if bad:
            raise InvalidInputError(f"kinds must be among {', '.join(KINDS)}, not {bad[0]!r}")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0
    ):
        raise InvalidInputError(f"max_tokens must be a non-negative int, not {max_tokens!r}")
    return query, namespace, k, kinds, max_tokens


def _entries(items: Iterable[str | Mapping[str, Any]]) -> list[_Entry]:
    """:meth:`MemoryStore.remember_many`'s items, checked: each a text or a
    mapping of :meth:`MemoryStore.remember`'s arguments."""
    if isinstance(items, (str, bytes, Mapping)):
        # Iterated, a text would be stored a character at a time, a mapping as its keys.
        raise InvalidTypeError(
            f"items must be a list of texts or mappings, got a {type(items).__name__};"
            " remember() stores one memory"
        )
    entries = []
    for i, item in enumerate(items):
        where = f"items[{i}]."
        if isinstance(item, str):
            entries.append(_entry(item, "semantic", 0.5, None, (), False, where))
        elif isinstance(item, Mapping):
            unknown = set(item) - {"text", "kind", "importance", "source", "tags", "pinned"}
            if unknown:
                raise InvalidInputError(f"{where[:-1]} has unknown keys: {', '.join(sorted(unknown))}")
            entries.append(
                _entry(
                    item.get("text"),
                    item.get("kind", "semantic"),
                    item.get("importance", 0.5),
                    item.get("source"),
                    item.get("tags", ()),
                    item.get("pinned", False),
                    where,
                )
            )
        else:
            raise InvalidTypeError(f"items[{i}] must be str or a mapping, not {type(item).__name__}")
    return entries


def _entry(text: Any, kind: Any, importance: Any, source: Any, tags: Any, pinned: Any, where: str) -> _Entry:
    text = _check_str(text, f"{where}text")
    if kind not in KINDS:
        raise InvalidInputError(f"{where}kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if source is not None:
        source = _check_str(source, f"{where}source", empty=True)
    if isinstance(tags, str) or not isinstance(tags, Iterable):
        raise InvalidTypeError(f"{where}tags must be a sequence of str, not {type(tags).__name__}")
    tags = tuple(_check_str(t, f"{where}tags[{i}]") for i, t in enumerate(tags))
    if not isinstance(pinned, bool):
        raise InvalidTypeError(f"{where}pinned must be bool, not {type(pinned).__name__}")
    return _Entry(text, kind, _check_unit(importance, f"{where}importance"), source, tags, pinned)


def _write_counts_when_asked(store: weakref.ReferenceType[MemoryStore], asked: threading.Event) -> None:
    """A store's writer of access counts: each time ``asked``, and once a
    second while any are pending (a store left idle after a search would
    otherwise keep them, and another process's ``forget`` would judge the
    memories it just used by their old counts), writes what is pending, if
    the database is free (else they wait for the next time). It holds the
    store only while writing, and ends with it, or at close."""
    while True:
        woken = asked.wait(timeout=ACCESS_FLUSH_SECONDS)
        asked.clear()
        alive = store()
        if alive is None or alive._closed or alive._closing:
            return  # close() writes what is left
        if woken or alive._accesses:
            alive._write_counts_now()
        del alive


# Every store made in this process. A fork waits for each one's lock
# (under which every thread uses its connection: the counts' thread, a
# session's memory writes, the caller's), so no child starts while a
# thread it does not have holds SQLite's own process-wide mutexes (a child
# that then opened a store of its own would wait on them for ever).
_FORK_GUARDED: weakref.WeakSet[MemoryStore] = weakref.WeakSet()
_HELD_FOR_FORK: list[MemoryStore] = []


def _before_fork() -> None:
    while True:
        try:  # another thread may make a store meanwhile
            stores = list(_FORK_GUARDED)
            break
        except RuntimeError:
            continue
    for store in stores:
        store._lock.acquire()
        _HELD_FOR_FORK.append(store)


def _after_fork() -> None:
    while _HELD_FOR_FORK:
        _HELD_FOR_FORK.pop()._lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def _flush_at_exit(store: weakref.ReferenceType[MemoryStore]) -> None:
    alive = store()
    if alive is not None and not alive._closed and alive._pid == os.getpid():
        with contextlib.suppress(Exception):  # exiting: a busy or broken database keeps its counts
            alive.flush()


def _held_keys(
    db: sqlite3.Connection, namespace: str, items: list[_Prepared]
) -> tuple[set[bytes], set[bytes]]:
    """The text keys and entity digests of ``items`` that ``namespace``
    already holds (two indexed lookups per 500 items)."""
    texts: set[bytes] = set()
    digests: set[bytes] = set()
    for at in range(0, len(items), 500):
        chunk = items[at : at + 500]
        keys = [i.key for i in chunk]
        texts.update(
            k
            for (k,) in db.execute(
                "SELECT text_key FROM memories WHERE namespace = ?"
                f" AND text_key IN ({','.join('?' * len(keys))})",
                (namespace, *keys),
            )
        )
        ekeys = [i.entity_key for i in chunk if i.entity_key is not None]
        if ekeys:
            digests.update(
                k
                for (k,) in db.execute(
                    "SELECT DISTINCT entity_key FROM memories WHERE namespace = ?"
                    f" AND entity_key IN ({','.join('?' * len(ekeys))})",
                    (namespace, *ekeys),
                )
            )
    return texts, digests


def _raw_sqlite(error: BaseException) -> TypeGuard[sqlite3.Error]:
    """An error SQLite raised itself (not one of ours that subclasses it)."""
    return isinstance(error, sqlite3.Error) and not isinstance(error, ContextCoreError)


def _is_busy(error: BaseException) -> bool:
    """Whether SQLite refused for another connection's lock."""
    return isinstance(error, sqlite3.OperationalError) and ("locked" in str(error) or "busy" in str(error))


def _into_wal(db: sqlite3.Connection, timeout: float) -> None:
    """Puts the database in WAL mode. Switching a new file's mode, SQLite
    answers "locked" at once, not after its busy handler, while another
    connection holds the file (waiting could deadlock): two server workers
    creating one store at boot do. Tried again until ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if not _is_busy(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


class MemoryStore:
    """Typed memories in one SQLite file, shared by any number of processes.

    ``embedder`` defaults to :func:`~context_core.memory_store.embedders.default_embedder`;
    ``clock`` gives the time (Unix seconds) for ``created``, access and
    forgetting; ``durability="full"`` syncs every commit to disk,
    ``"normal"`` only at WAL checkpoints (a killed process still loses
    nothing; a power cut may lose the last commits). ``near_duplicate`` is
    the cosine from which a new memory that shares an entity or search
    terms with an old one of the same kind updates it instead.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
        durability: str = "full",
        busy_timeout: float = 10.0,
        near_duplicate: float = 0.92,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        if durability not in ("full", "normal"):
            raise InvalidInputError(f"durability must be 'full' or 'normal', not {durability!r}")
        if embedder is not None and not callable(getattr(embedder, "embed", None)):
            raise InvalidTypeError(
                f"embedder must have an embed(texts) method, not {type(embedder).__name__}"
            )
        if (
            isinstance(busy_timeout, bool)
            or not isinstance(busy_timeout, int | float)
            or not 0 <= busy_timeout < math.inf
        ):
            raise InvalidInputError(f"busy_timeout must be a finite number of seconds, not {busy_timeout!r}")
        if not callable(clock):
            raise InvalidTypeError(f"clock must be callable, not {type(clock).__name__}")
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            raise InvalidTypeError(f"tokenizer must be a Tokenizer, not {type(tokenizer).__name__}")
        self.path = Path(path)
        self.clock = clock
        self.busy_timeout = float(busy_timeout)
        self.near_duplicate = _check_unit(near_duplicate, "near_duplicate")
        self.tokenizer = tokenizer or Tokenizer("o200k_base")
        self._lock = threading.RLock()
        # Any thread may be inside SQLite under this lock (the counts'
        # thread, a session's memory writes, the caller's own): a fork
        # waits for it from the start, not only once this store searched.
        _FORK_GUARDED.add(self)
        self._vectors: dict[str, NamespaceVectors] = {}
        # The query `prefetch` embedded last, and its vector.
        self._prefetched: tuple[str, np.ndarray] | None = None
        # Writes this store made (each counted once it ends, committed or
        # not): with SQLite's data_version (which counts other
        # connections' commits), what a held index last synced to.
        self._writes = 0
        self._accesses: dict[str, tuple[int, float]] = {}  # id -> (searches, the last one's time)
        self._accesses_since = 0.0
        # The namespaces whose searches made the pending counts: those the
        # counts' thread reads back after writing them, not every one held.
        self._counted_in: set[str] = set()
        self._closed = False
        self._pid = os.getpid()  # a forked child's copy writes nothing (its parent does)
        self._closing = False  # close() has asked the counts' thread to end
        self._counts_asked = threading.Event()
        self._counts_writer: threading.Thread | None = None
        # A store the program never closes still writes its pending counts at exit.
        self._at_exit = functools.partial(_flush_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)
        try:
            self._db = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise self._busy(error) from error
        try:
            _into_wal(self._db, self.busy_timeout)
            self._db.execute(f"PRAGMA synchronous = {durability.upper()}")
            # 64 MB of page cache (SQLite's default is 2 MB): the indexes a
            # write touches stay in memory past a few thousand memories.
            self._db.execute("PRAGMA cache_size = -65536")
            migrate(self._db)
            self.embedder: Embedder = self._embedder_for(embedder)
        except BaseException as error:
            self._db.close()
            if _raw_sqlite(error):
                raise self._busy(error) from error
            raise
        self._dim: int | None = self._read_dim()

    # -- plumbing ---------------------------------------------------------

    def _busy(self, error: sqlite3.Error) -> Exception:
        """The library's error for what SQLite raised: busy, or storage."""
        if _is_busy(error):
            return StoreBusyError(f"{self.path}: {error}", path=str(self.path))
        return StoreStorageError(f"{self.path}: {error}", path=str(self.path))

    def _read_dim(self) -> int | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        return int(row[0]) if row else None

    def _width(self) -> int | None:
        """The stored vectors' width, read again while none is known (another
        process may have written the first since); ``None``: none stored yet."""
        self._check_open()
        if self._dim is None:
            self._dim = self._read_dim()
        return self._dim

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.path}: the memory store is closed", path=str(self.path))

    def _embedder_for(self, given: Embedder | None) -> Embedder:
        """The embedder to use: the one given, which must be the kind that
        made the stored vectors (their cosines mean nothing across two), or
        with none given the built-in one that made them (else the default).
        A store written before it recorded its embedder takes either."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
        recorded = str(row[0]) if row else None
        if given is not None:
            # A store from before callables were named took any of them.
            legacy = recorded == UNNAMED_CALLABLE and isinstance(given, CallableEmbedder)
            if recorded is not None and embedder_name(given) != recorded and not legacy:
                hint = (
                    f"; a CallableEmbedder making the same vectors opens it with name={recorded!r}"
                    if recorded.startswith("callable:")
                    else ""
                )
                raise InvalidInputError(
                    f"{self.path}: its vectors were made by {recorded}, not {embedder_name(given)};"
                    f" open it with that embedder (or copy its memories into a new store){hint}"
                )
            return given
        if recorded is None:
            return default_embedder()
        try:
            made = embedder_named(recorded)
        except ImportError:
            made = None
        if made is None:
            raise InvalidInputError(
                f"{self.path}: its vectors were made by {recorded}; pass that embedder as embedder="
                + (" (pip install 'context-core[embed]')" if recorded.startswith("wordllama-") else "")
            )
        return made

    def _write(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """``work`` in one immediate transaction: all of it or none."""
        with self._lock:
            self._check_open()
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise self._busy(error) from error
            try:
                pending = self._write_accesses(self._db)
                result = work(self._db)
                self._db.execute("COMMIT")
            except BaseException as error:
                if self._db.in_transaction:  # SQLite may have rolled back itself (a full disk)
                    self._db.execute("ROLLBACK")
                if _raw_sqlite(error):
                    raise self._busy(error) from error
                raise
            finally:
                self._writes += 1
            for mid in pending:  # written: what came in since stays pending
                if self._accesses.get(mid) == pending[mid]:
                    del self._accesses[mid]
            if pending and not self._accesses:
                self._counted_in.clear()
            return result

    def _write_accesses(self, db: sqlite3.Connection) -> dict[str, tuple[int, float]]:
        pending = dict(self._accesses)
        if pending:
            db.executemany(
                "UPDATE memories SET access_count = access_count + ?, last_access = max(last_access, ?)"
                " WHERE id = ?",
                [(count, last, mid) for mid, (count, last) in pending.items()],
            )
            # So every process holding the namespace ranks by the new counts:
            # each memory's row takes this flush's number (a memory found
            # again keeps one row). The number is a counter of its own, not
            # the rows' largest: deleting a memory must not hand its number
            # to the next flush, which a reader that saw it would pass over.
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?, '1')"
                " ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
                (ACCESS_FLUSHES,),
            )
            flush = int(db.execute("SELECT value FROM meta WHERE key = ?", (ACCESS_FLUSHES,)).fetchone()[0])
            db.executemany(
                "INSERT INTO accessed (memory, namespace, seq) SELECT rowid, namespace, ? FROM memories"
                " WHERE id = ? ON CONFLICT (memory) DO UPDATE SET namespace = excluded.namespace,"
                " seq = excluded.seq",
                [(flush, mid) for mid in pending],
            )
        return pending

    def _count_accesses(self, ids: Iterable[str], now: float) -> None:
        if self._pid != os.getpid():
            # Searched in a forked child (a store is not fork-safe, but the
            # counts at least stay right): those it inherited are its parent's.
            self._accesses.clear()
            self._pid = os.getpid()
        if not self._accesses:
            self._accesses_since = now
        for mid in ids:
            count, _ = self._accesses.get(mid, (0, now))
            self._accesses[mid] = (count + 1, now)
        if len(self._accesses) >= ACCESS_FLUSH_MEMORIES or now - self._accesses_since >= ACCESS_FLUSH_SECONDS:
            self._ask_for_counts()
        elif self._counts_writer is None or not self._counts_writer.is_alive():
            self._ask_for_counts(now=False)  # started: it writes them within a second or two

    def _ask_for_counts(self, *, now: bool = True) -> None:
        """Has the store's thread write the pending counts (``now``: at
        once, else on its own within a second or two; started on first use,
        and again in a forked child, where its parent's is not alive)."""
        writer = self._counts_writer
        if writer is None or not writer.is_alive():
            self._counts_asked = threading.Event()
            writer = self._counts_writer = threading.Thread(
                target=_write_counts_when_asked,
                args=(weakref.ref(self), self._counts_asked),
                name="context_core-memory-counts",
                daemon=True,
            )
            writer.start()
        if now:
            self._counts_asked.set()

    def _write_counts_now(self) -> None:
        """The pending counts written, if the database is free now: the
        write never waits out another writer's busy_timeout, and an error
        keeps them pending (logged; the next flush, or close, tries again)."""
        with self._lock:
            if self._closed or not self._accesses:
                return
            counted = set(self._counted_in)
            try:
                with self._not_waiting():
                    self.flush()
            except StoreBusyError:
                return
            except Exception as error:  # on the store's own thread: nobody to raise it to
                _log.warning("context_core: writing the memory store's access counts failed: %s", error)
                return
            # The counts read back here, not by the next search: only the
            # namespaces they are of (a server may hold thousands).
            for namespace in counted:
                self._catch_up(namespace)

    @contextlib.contextmanager
    def _not_waiting(self) -> Iterator[None]:
        """SQLite's busy timeout off for the block (restored after)."""
        self._db.execute("PRAGMA busy_timeout = 0")
        try:
            yield
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")

    def flush(self) -> None:
        """Writes the access counts searches keep in memory (see
        :data:`ACCESS_FLUSH_MEMORIES`); :meth:`close` does too."""
        with self._lock:
            if self._accesses:
                self._write(lambda db: None)

    def _read(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """``work`` in one read transaction (one snapshot)."""
        with self._lock:
            self._check_open()
            try:
                self._db.execute("BEGIN")
                try:
                    return work(self._db)
                finally:
                    self._db.execute("COMMIT")
            except sqlite3.Error as error:
                if _raw_sqlite(error):
                    raise self._busy(error) from error
                raise

    def _embed(self, texts: list[str]) -> np.ndarray:
        with _embedder_errors():
            vectors = self.embedder.embed(texts)
        return self._unit_rows(vectors, len(texts))

    async def _aembed(self, texts: list[str]) -> np.ndarray:
        """:meth:`_embed` through the embedder's async form (or its ``embed``
        in a worker thread): an async client never blocks the loop."""
        with _embedder_errors():
            vectors = await aembed(self.embedder, texts)
        return self._unit_rows(vectors, len(texts))

    @property
    def _builtin_embedder(self) -> bool:
        """Whether the store embeds with its own :class:`HashingEmbedder`
        (not a subclass): its rows need no checking, and its long queries
        were measured to keep their best when cut."""
        return type(self.embedder) is HashingEmbedder

    def _unit_rows(self, vectors: Any, count: int) -> np.ndarray:
        """``vectors`` checked (``count`` finite rows of the store's width)
        and scaled to unit length."""
        if (
            self._builtin_embedder
            and type(vectors) is np.ndarray
            and vectors.shape == (count, vectors.shape[1] if self._dim is None else self._dim)
        ):
            # The built-in embedder's rows are C-ordered float32, finite and
            # already of unit length (or zero): checking them again cost a
            # turn's search 20-40 us of numpy calls.
            return vectors
        array = checked(vectors, count, self._dim)
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        norms[norms == 0] = 1  # a zero vector stays zero
        return np.ascontiguousarray(array / norms, dtype=np.float32)

    def _accessed(self, mid: str, count: int, last: float) -> tuple[int, float]:
        """A memory's access count and last access, with the searches not yet written."""
        pending = self._accesses.get(mid)
        return (count, last) if pending is None else (count + pending[0], max(last, pending[1]))

    def _memory(
        self, row: Sequence[Any], entities: tuple[tuple[str, str], ...] = (), accessed: float | None = None
    ) -> Memory:
        """A memory from its row, with the accesses not yet written (and one
        more, at ``accessed``, for a search returning it)."""
        _, mid, namespace, kind, text, importance, pinned, source, tags, created, last, count = row
        count, last = self._accessed(mid, count, last)
        if accessed is not None:
            count, last = count + 1, accessed
        return Memory(
            mid,
            namespace_of(namespace),
            kind,
            text,
            importance,
            entities,
            source,
            tuple(json.loads(tags)),
            bool(pinned),
            created,
            last,
            count,
        )

    # -- writing ----------------------------------------------------------

    def remember(
        self,
        text: str,
        *,
        namespace: NamespaceLike = "default",
        kind: str = "semantic",
        importance: float = 0.5,
        source: str | None = None,
        tags: Sequence[str] = (),
        pinned: bool = False,
    ) -> Memory:
        """Stores one memory and returns it; a near duplicate of an existing
        one updates that one instead (newer text, the higher importance,
        one more access). A near duplicate has the same text up to case and
        spacing, or is of the same kind, names exactly the same entities
        (``order A-8812`` is never merged into ``order A-8813``) and has a
        cosine of at least ``near_duplicate`` with it; it is looked for
        among memories that share an entity or search terms."""
        entry = _entry(text, kind, importance, source, tags, pinned, "")
        return self._remember([entry], namespace_key(namespace), near=True)[0]

    async def aremember(
        self,
        text: str,
        *,
        namespace: NamespaceLike = "default",
        kind: str = "semantic",
        importance: float = 0.5,
        source: str | None = None,
        tags: Sequence[str] = (),
        pinned: bool = False,
    ) -> Memory:
        """:meth:`remember` for asyncio: the embedder's async form is awaited
        (an ``AsyncOpenAI`` client works), the write runs in a worker thread."""
        entry = _entry(text, kind, importance, source, tags, pinned, "")
        namespace = namespace_key(namespace)
        vectors = await self._aembed([entry.text])
        memories = await asyncio.to_thread(self._remember, [entry], namespace, near=True, vectors=vectors)
        return memories[0]

    def remember_many(
        self, items: Iterable[str | Mapping[str, Any]], *, namespace: NamespaceLike = "default"
    ) -> list[Memory]:
        """Stores many memories in one transaction (all or none): each item
        a text, or a mapping of :meth:`remember`'s arguments. Duplicates are
        found by text (up to case and spacing) and by shared entities; the
        search-term probe of :meth:`remember` is left out for speed."""
        namespace = namespace_key(namespace)
        return self._remember(_entries(items), namespace, near=False)

    async def aremember_many(
        self, items: Iterable[str | Mapping[str, Any]], *, namespace: NamespaceLike = "default"
    ) -> list[Memory]:
        """:meth:`remember_many` for asyncio (as :meth:`aremember`)."""
        namespace = namespace_key(namespace)
        entries = _entries(items)
        if not entries:
            return []
        vectors = await self._aembed([e.text for e in entries])
        return await asyncio.to_thread(self._remember, entries, namespace, near=False, vectors=vectors)

    def _remember(
        self, entries: list[_Entry], namespace: str, *, near: bool, vectors: np.ndarray | None = None
    ) -> list[Memory]:
        if not entries:
            return []
        if vectors is None:
            vectors = self._embed([e.text for e in entries])
        else:  # embedded before the lock: the width may have become known since
            checked(vectors, len(entries), self._dim)
        found = _entities_many([e.text for e in entries])
        items = []
        for e, v, names in zip(entries, vectors, found, strict=True):
            ents = tuple(names)
            key = entity_key(value for _, value in ents)
            items.append(_Prepared(e, v, ents, search_terms(e.text), _text_key(e.text), key))
        now = float(self.clock())

        def work(db: sqlite3.Connection) -> list[Memory]:
            if self._dim is None:
                stored = self._read_dim()
                if stored is None:
                    db.execute("INSERT INTO meta (key, value) VALUES ('dim', ?)", (str(vectors.shape[1]),))
                    db.execute(
                        "INSERT OR IGNORE INTO meta (key, value) VALUES ('embedder', ?)",
                        (embedder_name(self.embedder),),
                    )
                elif stored != vectors.shape[1]:
                    raise EmbeddingError(
                        f"the embedder returned vectors of {vectors.shape[1]} values; "
                        f"this store holds {stored}",
                        expected=stored,
                        got=tuple(vectors.shape),
                    )
            rows = _Rows({}, [], [])
            out = self._put_all(db, namespace, items, now, near, rows)
            db.executemany(
                "INSERT INTO terms (rowid, words, namespace) VALUES (?, ?, ?)",
                [(rowid, indexed_words(namespace, words), namespace) for rowid, words in rows.terms.items()],
            )
            db.executemany(
                "INSERT INTO changes (namespace, memory) VALUES (?, ?)",
                [(namespace, r) for r in rows.changes],
            )
            count_terms(db, namespace, rows.terms.values(), rows.unindexed)
            return out

        memories: list[Memory] = self._write(work)
        self._dim = int(vectors.shape[1])
        self._catch_up(namespace)
        return memories

    def _catch_up(self, namespace: str) -> None:
        """Moves the held index of ``namespace`` (if one is held) past a
        write this store just made: a session's memory writes run between
        its turns, so the turn's search then has nothing of them to read.
        A failure here is the next search's to meet (it reads the same)."""
        if namespace not in self._vectors:
            return
        try:
            self._read(lambda db: self._sync(db, namespace))
        except ContextCoreError:
            pass
        except Exception:  # a crafted row: the write stands; the next search loads afresh and meets it
            self._vectors.pop(namespace, None)

    def _put_all(
        self,
        db: sqlite3.Connection,
        namespace: str,
        items: list[_Prepared],
        now: float,
        near: bool,
        rows: _Rows,
    ) -> list[Memory]:
        """:meth:`_put` of each item, in order. An item whose text key and
        entity digest neither the namespace nor an earlier item holds cannot
        be a duplicate (in a batch, which has no search-term probe): those
        are inserted together, with rowids given here, and the rest one at a
        time, after the new rows before them."""
        if near:
            return [self._put(db, namespace, item, now, near, rows) for item in items]
        texts, digests = _held_keys(db, namespace, items)
        (next_rowid,) = db.execute("SELECT coalesce(max(rowid), 0) + 1 FROM memories").fetchone()
        new: list[tuple[int, str, _Prepared]] = []
        out = []
        for item in items:
            if item.key in texts or (item.entity_key is not None and item.entity_key in digests):
                self._insert(db, namespace, new, now)
                memory = self._put(db, namespace, item, now, near, rows)
                (next_rowid,) = db.execute("SELECT coalesce(max(rowid), 0) + 1 FROM memories").fetchone()
            else:
                mid = uuid.uuid4().hex
                new.append((next_rowid, mid, item))
                rows.terms[next_rowid] = item.words
                rows.changes.append(next_rowid)
                memory = self._new_memory(mid, namespace, item, now)
                next_rowid += 1
            out.append(memory)
            texts.add(item.key)
            if item.entity_key is not None:
                digests.add(item.entity_key)
        self._insert(db, namespace, new, now)
        return out

    @staticmethod
    def _new_memory(mid: str, namespace: str, item: _Prepared, now: float) -> Memory:
        e = item.entry
        ents = tuple(sorted(item.entities, key=lambda pair: pair[1]))
        return Memory(
            mid,
            namespace_of(namespace),
            e.kind,
            e.text,
            e.importance,
            ents,
            e.source,
            e.tags,
            e.pinned,
            now,
            now,
            0,
        )

    @staticmethod
    def _insert(
        db: sqlite3.Connection, namespace: str, new: list[tuple[int, str, _Prepared]], now: float
    ) -> None:
        """Inserts ``(rowid, id, item)`` rows and their entities, and empties ``new``."""
        if not new:
            return
        db.executemany(
            "INSERT INTO memories (rowid, id, namespace, kind, text, text_key, entity_key, importance,"
            " pinned, source, tags, created, last_access, access_count, embedding)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
            [
                (
                    rowid,
                    mid,
                    namespace,
                    i.entry.kind,
                    i.entry.text,
                    i.key,
                    i.entity_key,
                    i.entry.importance,
                    int(i.entry.pinned),
                    i.entry.source,
                    json.dumps(i.entry.tags),
                    now,
                    now,
                    i.vector.tobytes(),
                )
                for rowid, mid, i in new
            ],
        )
        db.executemany(
            "INSERT OR IGNORE INTO entities (namespace, value, memory, kind) VALUES (?, ?, ?, ?)",
            [(namespace, value, rowid, kind) for rowid, _, i in new for kind, value in i.entities],
        )
        new.clear()

    def _duplicate(
        self, db: sqlite3.Connection, namespace: str, item: _Prepared, near: bool
    ) -> tuple[Any, ...] | None:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE namespace = ? AND text_key = ?",
            (namespace, item.key),
        ).fetchone()
        if row is not None:
            return tuple(row)
        # Same entities (the digest), or (without entities, for one memory)
        # the memories its rarest search terms find.
        key = item.entity_key
        if key is not None:
            rows = db.execute(
                f"SELECT {_COLUMNS}, embedding FROM memories"
                " WHERE namespace = ? AND entity_key = ? AND kind = ? LIMIT 32",
                (namespace, key, item.entry.kind),
            ).fetchall()
        else:
            query = match_query(db, namespace, item.words) if near else None
            if query is None:
                return None
            found = [
                r[0]
                for r in db.execute(
                    f"SELECT rowid FROM terms WHERE terms MATCH ? AND namespace = ? ORDER BY {RANK} LIMIT 8",
                    (query, namespace),
                )
            ]
            marks = ",".join("?" * len(found))
            rows = db.execute(
                f"SELECT {_COLUMNS}, embedding FROM memories"
                f" WHERE rowid IN ({marks}) AND kind = ? AND entity_key IS NULL",
                (*found, item.entry.kind),
            ).fetchall()
        best, best_cos = None, self.near_duplicate
        values = _values(item.entry.text)
        for row in rows:
            cos = float(np.frombuffer(row[-1], dtype=np.float32) @ item.vector)
            if cos >= best_cos and _values(row[_TEXT]) == values:
                best, best_cos = tuple(row[:-1]), cos
        return best

    def _put(
        self, db: sqlite3.Connection, namespace: str, item: _Prepared, now: float, near: bool, rows: _Rows
    ) -> Memory:
        entry, ents = item.entry, item.entities
        old = self._duplicate(db, namespace, item, near)
        blob = item.vector.tobytes()
        if old is not None:
            rowid, mid = old[0], old[1]
            importance = max(entry.importance, old[5])
            tags = tuple(dict.fromkeys((*json.loads(old[8]), *entry.tags)))
            pinned = bool(old[6]) or entry.pinned
            db.execute(
                "UPDATE memories SET text = ?, text_key = ?, entity_key = ?, importance = ?, pinned = ?,"
                " source = coalesce(?, source), tags = ?, last_access = ?,"
                " access_count = access_count + 1, embedding = ? WHERE rowid = ?",
                (
                    entry.text,
                    item.key,
                    item.entity_key,
                    importance,
                    int(pinned),
                    entry.source,
                    json.dumps(tags),
                    now,
                    blob,
                    rowid,
                ),
            )
            db.execute("DELETE FROM entities WHERE memory = ?", (rowid,))
            if rowid not in rows.terms:  # indexed before this batch
                rows.unindexed += [
                    plain_words(w) for (w,) in db.execute("SELECT words FROM terms WHERE rowid = ?", (rowid,))
                ]
                db.execute("DELETE FROM terms WHERE rowid = ?", (rowid,))
            created, count = old[9], old[11] + 1
        else:
            mid = uuid.uuid4().hex
            cursor = db.execute(
                "INSERT INTO memories (id, namespace, kind, text, text_key, entity_key, importance, pinned,"
                " source, tags,"
                " created, last_access, access_count, embedding)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                (
                    mid,
                    namespace,
                    entry.kind,
                    entry.text,
                    item.key,
                    item.entity_key,
                    entry.importance,
                    int(entry.pinned),
                    entry.source,
                    json.dumps(entry.tags),
                    now,
                    now,
                    blob,
                ),
            )
            rowid = cursor.lastrowid
            importance, tags, pinned, created, count = entry.importance, entry.tags, entry.pinned, now, 0
        # Entities at once: a later item of the batch may be this one's duplicate.
        db.executemany(
            "INSERT OR IGNORE INTO entities (namespace, value, memory, kind) VALUES (?, ?, ?, ?)",
            [(namespace, value, rowid, kind) for kind, value in ents],
        )
        rows.terms[rowid] = item.words
        rows.changes.append(rowid)
        # As stored: an update keeps the old kind, and the old source unless given one.
        kind = old[3] if old is not None else entry.kind
        source = entry.source if entry.source is not None or old is None else old[7]
        return Memory(
            mid,
            namespace_of(namespace),
            kind,
            entry.text,
            importance,
            tuple(sorted(ents, key=lambda e: e[1])),
            source,
            tags,
            pinned,
            created,
            now,
            count,
        )

    # -- event helpers ----------------------------------------------------

    def preference(self, text: str, **options: Any) -> Memory:
        """A stated preference: semantic, importance 0.8 unless given."""
        options.setdefault("importance", 0.8)
        return self.remember(text, kind="semantic", **options)

    def task_done(self, text: str, **options: Any) -> Memory:
        """A finished task's record: episodic, importance 0.5 unless given."""
        return self.remember(text, kind="episodic", **options)

    def tool_failed(self, tool: str, error: str, lesson: str | None = None, **options: Any) -> Memory:
        """A failed tool call and what to do next time: procedural,
        importance 0.7 unless given."""
        options.setdefault("importance", 0.7)
        text = f"{_check_str(tool, 'tool')} failed: {_check_str(error, 'error')}"
        if lesson is not None:
            text += f". Lesson: {_check_str(lesson, 'lesson')}"
        return self.remember(text, kind="procedural", **options)

    def conversation_ended(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        namespace: NamespaceLike = "default",
        llm: Any = None,
        source: str | None = None,
    ) -> list[Memory]:
        """The end of a conversation: what it leaves worth keeping
        (:func:`~context_core.memory_store.extract_memories`, offline unless
        ``llm`` is given) stored in one transaction, near duplicates of
        older memories updating them. ``source`` (a session id, say) is
        recorded on each. A model's malformed reply stores nothing."""
        return self._remember_extracted(extract_memories(messages, llm), namespace, source)

    async def aconversation_ended(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        namespace: NamespaceLike = "default",
        llm: Any = None,
        source: str | None = None,
    ) -> list[Memory]:
        """:meth:`conversation_ended` without blocking the event loop."""
        found = await aextract_memories(messages, llm)
        return await asyncio.to_thread(self._remember_extracted, found, namespace, source)

    def _remember_extracted(
        self, found: list[Any], namespace: NamespaceLike, source: str | None
    ) -> list[Memory]:
        # A conversation leaves a few memories: each gets remember()'s full
        # near-duplicate search, search terms included.
        namespace = namespace_key(namespace)
        entries = [
            _entry(item.text, item.kind, item.importance, source, (), False, f"memories[{i}].")
            for i, item in enumerate(found)
        ]
        return self._remember(entries, namespace, near=True)

    # -- reading ----------------------------------------------------------

    def get(self, memory_id: str) -> Memory | None:
        """The memory with this id, or ``None``."""
        _check_str(memory_id, "memory_id")

        def work(db: sqlite3.Connection) -> Memory | None:
            row = db.execute(f"SELECT {_COLUMNS} FROM memories WHERE id = ?", (memory_id,)).fetchone()
            if row is None:
                return None
            ents = tuple(
                (k, v) for v, k in db.execute("SELECT value, kind FROM entities WHERE memory = ?", (row[0],))
            )
            return self._memory(row, ents)

        result: Memory | None = self._read(work)
        return result

    def embedding(self, memory_id: str) -> np.ndarray | None:
        """The memory's stored vector (float32, unit length), or ``None``
        for an id the store does not hold."""
        _check_str(memory_id, "memory_id")
        row = self._read(
            lambda db: db.execute("SELECT embedding FROM memories WHERE id = ?", (memory_id,)).fetchone()
        )
        return None if row is None else np.frombuffer(row[0], dtype=np.float32).copy()

    def count(self, namespace: NamespaceLike | None = None) -> int:
        """Memories in ``namespace`` and the namespaces under it (or in all)."""
        if namespace is None:
            found = self._read(lambda db: db.execute("SELECT count(*) FROM memories").fetchone())
        else:
            where, args = scope(namespace_key(namespace))
            found = self._read(
                lambda db: db.execute(f"SELECT count(*) FROM memories WHERE {where}", args).fetchone()
            )
        return int(found[0])

    def search(
        self,
        query: str,
        *,
        namespace: NamespaceLike | Sequence[NamespaceLike] = "default",
        k: int = 8,
        kinds: Sequence[str] | None = None,
        max_tokens: int | None = None,
    ) -> list[Hit]:
        """The ``k`` best memories for ``query``: those that share an entity
        with it first (most shared first), then by score (see
        :mod:`~context_core.memory_store.ranking`). ``namespace`` is read
        exactly (not the namespaces under it); a sequence of namespaces
        searches them together, as an agent's own memories beside its
        user's. ``kinds`` limits the kinds; with ``max_tokens`` only whole
        memories whose texts fit in that many tokens together are returned.
        Returned memories count one more access."""
        arguments = _search_arguments(query, namespace, k, kinds, max_tokens)
        return self._search(*arguments, None, self._hits)

    def search_texts(
        self,
        query: str,
        *,
        namespace: NamespaceLike | Sequence[NamespaceLike] = "default",
        k: int = 8,
        kinds: Sequence[str] | None = None,
        max_tokens: int | None = None,
    ) -> list[str]:
        """The texts of what :meth:`search` returns, in its order, with the
        same accesses counted: for a prompt, which needs only the texts. It
        reads no entities and builds no :class:`Memory`, so it costs less."""
        arguments = _search_arguments(query, namespace, k, kinds, max_tokens)
        return self._search(*arguments, None, _texts)

    def preload(self, *, namespace: NamespaceLike | Sequence[NamespaceLike] = "default") -> None:
        """Loads the vectors of ``namespace`` (each of a sequence) now, so
        the first :meth:`search` of it costs what later ones do: a store's
        first search of a namespace reads all its vectors (at 100,000
        memories, about a second). A server calls this at start; a
        :class:`~context_core.Session` does at open."""
        namespaces = namespace_keys(namespace)
        with self._lock:
            if self._width() is None:
                return

            def work(db: sqlite3.Connection) -> None:
                for key in namespaces:
                    self._sync(db, key)

            self._read(work)

    def prefetch(
        self,
        query: str,
        *,
        namespace: NamespaceLike | Sequence[NamespaceLike] = "default",
        k: int = 8,
        kinds: Sequence[str] | None = None,
    ) -> None:
        """Starts the vector scan of the :meth:`search` (or
        :meth:`search_texts`) for ``query`` about to come, with these
        arguments, on a worker thread, and returns: the caller does other
        work while it runs, and the search then waits for what is left of
        it. A :class:`~context_core.Session` calls this as a turn begins and
        builds its prompt meanwhile (the scan is most of a search at
        100,000 memories). Only namespaces already held (searched or
        preloaded) are scanned ahead. A search with another query or other
        arguments, or one after the namespace changed, scans for itself, so
        a search's results never depend on this. Each namespace holds one
        scan ahead: the next prefetch replaces it."""
        query, namespaces, k, kinds, _ = _search_arguments(query, namespace, k, kinds, None)
        with self._lock:
            if self._width() is None:
                return
            held = [self._vectors.get(ns) for ns in namespaces]
            ready = [index for index in held if index is not None and index.dim == self._dim]
            if not ready:
                return
            vector = self._embed([query])[0]
            self._prefetched = query, vector  # the search embeds it no more
            for index in ready:
                index.scan_ahead(
                    vector, _pool(k), quantise_from=QUANTISE_FROM, kinds=kinds, cut=self._builtin_embedder
                )

    async def asearch(
        self,
        query: str,
        *,
        namespace: NamespaceLike | Sequence[NamespaceLike] = "default",
        k: int = 8,
        kinds: Sequence[str] | None = None,
        max_tokens: int | None = None,
    ) -> list[Hit]:
        """:meth:`search` for asyncio: the query's embedding is awaited
        through the embedder's async form, the search runs in a worker
        thread."""
        arguments = _search_arguments(query, namespace, k, kinds, max_tokens)
        return await self._asearch(arguments, self._hits)

    async def asearch_texts(
        self,
        query: str,
        *,
        namespace: NamespaceLike | Sequence[NamespaceLike] = "default",
        k: int = 8,
        kinds: Sequence[str] | None = None,
        max_tokens: int | None = None,
    ) -> list[str]:
        """:meth:`search_texts` for asyncio, as :meth:`asearch` is."""
        arguments = _search_arguments(query, namespace, k, kinds, max_tokens)
        return await self._asearch(arguments, _texts)

    async def _asearch(self, arguments: _SearchArguments, finish: _Finish[_T]) -> list[_T]:
        """A search whose query is embedded by the embedder's async form,
        run in a worker thread."""
        vector = (await self._aembed([arguments[0]]))[0]

        def search() -> list[_T]:
            return self._search(*arguments, vector, finish)

        return await asyncio.to_thread(search)

    def _search(
        self,
        query: str,
        namespaces: tuple[str, ...],
        k: int,
        kinds: tuple[str, ...] | None,
        max_tokens: int | None,
        vector: np.ndarray | None,
        finish: _Finish[_T],
    ) -> list[_T]:
        """The search itself: ``finish`` makes the results from the chosen
        candidates and their rows, in the same read (one snapshot). For
        :func:`_texts` the rows come from the held index, which holds the
        columns it reads: no row of the file is read."""
        wanted = [v for _, v in _entities(query)]
        terms = search_terms(query)
        now = float(self.clock())
        with self._lock:
            if self._width() is None:
                return []
            prefetched = self._prefetched
            if vector is not None:  # embedded before the store's width was known
                checked(vector[None, :], 1, self._dim)
            elif prefetched is not None and prefetched[0] == query:
                vector, self._prefetched = prefetched[1], None
            else:
                vector = self._embed([query])[0]

            def work(db: sqlite3.Connection) -> tuple[list[_T], list[str]]:
                pool = _pool(k)
                held = {ns: self._sync(db, ns) for ns in namespaces}
                # Across namespaces, BM25 weighs by their statistics together
                # and the scores are over the best of the whole search: a
                # namespace's weak best match does not score 1 beside another
                # namespace's strong one.
                together = corpus(held.values(), terms) if len(namespaces) > 1 else None
                found = {ns: held[ns].keyword_hits(terms, pool, kinds, together) for ns in namespaces}
                best = max((score for hits in found.values() for _, score in hits), default=0.0) or 1.0
                ranked = [
                    hit
                    for namespace in namespaces
                    for hit in self._candidates(
                        db,
                        held[namespace],
                        vector,
                        wanted,
                        {rowid: score / best for rowid, score in found[namespace]},
                        pool,
                        kinds,
                        now,
                    )
                ]
                if len(namespaces) > 1:
                    ranked.sort()
                if finish is _texts:
                    rows: _RowReader = functools.partial(_held_rows, list(held.values()))
                else:
                    rows = functools.partial(_file_rows, db)
                chosen = self._chosen(rows, ranked, k, max_tokens)
                return finish(db, chosen, now), [row[1] for _, row in chosen]

            found: tuple[list[_T], list[str]] = self._read(work)
            results, ids = found
            if ids:
                self._count_accesses(ids, now)
                self._counted_in.update(namespaces)
        return results

    def _sync(self, db: sqlite3.Connection, namespace: str) -> NamespaceVectors:
        """The held vectors and keywords of ``namespace``, moved to ``db``'s
        snapshot (loaded, if none were held)."""
        index = self._vectors.get(namespace)
        if index is None or index.dim != self._dim:
            index = self._vectors[namespace] = NamespaceVectors(namespace, int(self._dim or 0))
        # The snapshot's version (other connections' commits) and this
        # store's writes: where neither moved since the index last synced,
        # there is nothing to read (two queries a search saved).
        (version,) = db.execute("PRAGMA data_version").fetchone()
        stamp = (int(version), self._writes)
        if index.synced_to != stamp:
            index.sync(db)
            index.synced_to = stamp
        return index

    def _candidates(
        self,
        db: sqlite3.Connection,
        index: NamespaceVectors,
        vector: np.ndarray,
        wanted: list[str],
        keyword: dict[int, float],
        pool: int,
        kinds: tuple[str, ...] | None,
        now: float,
    ) -> list[_Candidate]:
        """Every candidate (an entity it shares, one of the ``pool`` nearest
        vectors, a ``keyword`` match: rowid to its keyword score) of the
        namespace ``index`` holds (synced to ``db``), scored from its held
        ranking columns, best first."""
        namespace = index.namespace
        shared: dict[int, list[str]] = {}
        common: list[str] = []  # named by more than ENTITY_MATCHES memories
        for value in dict.fromkeys(wanted):
            found = db.execute(
                "SELECT memory FROM entities WHERE namespace = ? AND value = ? LIMIT ?",
                (namespace, value, ENTITY_MATCHES + 1),
            ).fetchall()
            if len(found) > ENTITY_MATCHES:
                common.append(value)
                continue
            for (rowid,) in found:
                shared.setdefault(rowid, []).append(value)
        # Long queries are scanned by their largest terms only where that
        # was measured to keep the best: the built-in embedder's.
        cut = self._builtin_embedder
        cosines = dict(index.nearest(vector, pool, quantise_from=QUANTISE_FROM, kinds=kinds, cut=cut))
        if common:  # marked on the candidates that name them, not read for every memory that does
            found_ids = list({*cosines, *keyword, *shared})  # one a rare entity found may name it too
            for chunk in _chunks(found_ids):
                marks, values = ",".join("?" * len(chunk)), ",".join("?" * len(common))
                for rowid, value in db.execute(
                    f"SELECT memory, value FROM entities WHERE memory IN ({marks}) AND value IN ({values})",
                    (*chunk, *common),
                ):
                    shared.setdefault(rowid, []).append(value)
        # Every memory of the namespace is held (synced in this snapshot); a
        # rowid that is not (an entity row a crafted file left behind) names
        # no memory of it, and is no candidate.
        position, ranks = index.position, index.ranks
        held = [rowid for rowid in {*shared, *cosines, *keyword} if rowid in position]
        unscored = {rowid for rowid in held if rowid not in cosines}
        if unscored:  # entity or keyword matches the vector scan did not reach
            cosines.update(index.scores(vector, list(unscored)))
        # Scored and sorted in Rust: the Python loop took 36.5 us for 45
        # candidates (about fifty a search), the Rust one 9.3.
        accesses, weights = self._accesses, ranking.weights()
        return _rank_candidates(
            held, position, ranks, cosines, keyword, shared, unscored, accesses, kinds, now, weights
        )

    def _chosen(
        self, read: _RowReader, ranked: list[_Candidate], k: int, max_tokens: int | None
    ) -> list[tuple[_Ranked, tuple[Any, ...]]]:
        """The first ``k`` of ``ranked`` (with ``max_tokens``, the first
        whose texts fit together) with their rows, ``read`` only for those."""
        chosen: list[tuple[_Ranked, tuple[Any, ...]]] = []
        used = 0
        at = 0
        while at < len(ranked) and len(chosen) < k:
            batch = ranked[at : at + (k - len(chosen)) * (1 if max_tokens is None else 2)]
            at += len(batch)
            rows = read([r[_ROWID] for r in batch])
            for r in batch:
                row = rows[r[_ROWID]]
                if max_tokens is not None:
                    # A memory comes back search after search: its count is cached.
                    tokens = self.tokenizer._count_cached(row[_TEXT])
                    if used + tokens > max_tokens:
                        continue
                    used += tokens
                chosen.append((_Ranked._make(r), row))
                if len(chosen) == k:
                    break
        return chosen

    def _hits(
        self, db: sqlite3.Connection, chosen: list[tuple[_Ranked, tuple[Any, ...]]], now: float
    ) -> list[Hit]:
        """The chosen candidates as hits, with their entities; each memory
        counts the access this search makes at ``now``."""
        named: dict[int, list[tuple[str, str]]] = {}
        for chunk in _chunks([r.rowid for r, _ in chosen]):
            for rowid, kind, value in db.execute(
                f"SELECT memory, kind, value FROM entities WHERE memory IN ({','.join('?' * len(chunk))})"
                " ORDER BY value",
                chunk,
            ):
                named.setdefault(rowid, []).append((kind, value))
        hits = []
        for r, row in chosen:
            memory = self._memory(row, tuple(named.get(r.rowid, ())), accessed=now)
            reasons = tuple(
                name
                for name, on in (("entity", bool(r.matched)), ("vector", r.near), ("keyword", r.keyword > 0))
                if on
            )
            hits.append(Hit(memory, r.score, reasons, r.matched, r.cosine, r.keyword))
        return hits

    # -- deleting and forgetting ------------------------------------------

    def delete(self, memory_id: str | None = None, *, namespace: NamespaceLike | None = None) -> int:
        """Deletes one memory by id, or every memory of ``namespace`` and of
        the namespaces under it (``Namespace(tenant, user)``: one user's
        whole store, every agent's included); returns how many went."""
        if (memory_id is None) == (namespace is None):
            raise InvalidInputError("give exactly one of memory_id and namespace")
        if memory_id is not None:
            _check_str(memory_id, "memory_id")
            return int(self._write(lambda db: self._delete_ids(db, [memory_id])))
        where, args = scope(namespace_key(namespace))
        emptied: list[str] = []

        def work(db: sqlite3.Connection) -> int:
            # Every key the scope holds, memories or not (a namespace whose
            # memories all went still has counters and changes).
            keys = [
                key
                for (key,) in db.execute(
                    f"SELECT namespace FROM memories WHERE {where}"
                    f" UNION SELECT namespace FROM changes WHERE {where}",
                    args * 2,
                )
            ]
            gone = 0
            for ns in keys:
                db.execute("DELETE FROM entities WHERE namespace = ?", (ns,))
                # The search terms by rowid: their namespace column is not indexed.
                db.execute(
                    "DELETE FROM terms WHERE rowid IN (SELECT rowid FROM memories WHERE namespace = ?)",
                    (ns,),
                )
                db.execute("DELETE FROM term_docs WHERE namespace = ?", (ns,))
                gone += db.execute("DELETE FROM memories WHERE namespace = ?", (ns,)).rowcount
                db.execute("DELETE FROM changes WHERE namespace = ?", (ns,))
                db.execute("DELETE FROM accessed WHERE namespace = ?", (ns,))
                db.execute("INSERT INTO changes (namespace, memory) VALUES (?, -1)", (ns,))
            emptied[:] = keys
            return gone

        gone = int(self._write(work))
        with self._lock:  # their matrices go too, not kept until searched again
            for key in emptied:
                self._vectors.pop(key, None)
        return gone

    @staticmethod
    def _delete_ids(db: sqlite3.Connection, ids: Sequence[str]) -> int:
        gone = 0
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT rowid, namespace FROM memories WHERE id IN ({marks})", chunk
            ).fetchall()
            for rowid, ns in rows:
                db.execute("DELETE FROM entities WHERE memory = ?", (rowid,))
                old = [
                    plain_words(w) for (w,) in db.execute("SELECT words FROM terms WHERE rowid = ?", (rowid,))
                ]
                count_terms(db, ns, (), old)
                db.execute("DELETE FROM terms WHERE rowid = ?", (rowid,))
                db.execute("DELETE FROM memories WHERE rowid = ?", (rowid,))
                db.execute("DELETE FROM accessed WHERE memory = ?", (rowid,))
                db.execute("INSERT INTO changes (namespace, memory) VALUES (?, ?)", (ns, rowid))
                gone += 1
        return gone

    def forget(
        self,
        threshold: float,
        *,
        namespace: NamespaceLike | None = None,
        dry_run: bool = True,
        importance_floor: float = 0.8,
        half_life_days: float = ranking.HALF_LIFE_DAYS,
    ) -> ForgetReport:
        """Memories whose retention (see :mod:`~context_core.memory_store.ranking`)
        is below ``threshold``, lowest first; with ``dry_run=False`` they are
        purged in one transaction. Pinned memories and those with importance
        at or above ``importance_floor`` are never candidates."""
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not math.isfinite(threshold)
        ):
            raise InvalidInputError(f"threshold must be a finite number, not {threshold!r}")
        if (
            isinstance(half_life_days, bool)
            or not isinstance(half_life_days, int | float)
            or not half_life_days > 0
        ):
            raise InvalidInputError(f"half_life_days must be a positive number, not {half_life_days!r}")
        floor = _check_unit(importance_floor, "importance_floor")
        within = None if namespace is None else scope(namespace_key(namespace))
        now = float(self.clock())
        if dry_run:  # retention counts every access (a purge writes them in its own transaction)
            with contextlib.suppress(StoreBusyError):
                self.flush()

        def work(db: sqlite3.Connection) -> ForgetReport:
            sql = (
                "SELECT id, last_access, access_count, importance FROM memories"
                " WHERE pinned = 0 AND importance < ?"
            )
            args: tuple[Any, ...] = (floor,)
            if within is not None:
                sql += f" AND {within[0]}"
                args += within[1]
            rows = db.execute(sql, args).fetchall()
            scored = sorted(
                (
                    (mid, ranking.retention(now - last, count, imp, half_life_days))
                    for mid, last, count, imp in rows
                ),
                key=lambda pair: (pair[1], pair[0]),
            )
            below = tuple((mid, score) for mid, score in scored if score < threshold)
            if not dry_run and below:
                self._delete_ids(db, [mid for mid, _ in below])
            return ForgetReport(below, not dry_run and bool(below))

        result: ForgetReport = self._write(work) if not dry_run else self._read(work)
        return result

    # -- lifetime ---------------------------------------------------------

    def integrity(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` (``"ok"`` when sound)."""
        with self._lock:
            self._check_open()
            return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        """Writes pending access counts and closes the database; again, nothing."""
        if self._pid != os.getpid():
            # A forked child's copy, never used there: the counts it holds
            # are its parent's to write, and the connection its parent's.
            self._closed = True
            self._accesses.clear()
            return
        writer = self._counts_writer
        if writer is not None and writer is not threading.current_thread():
            # Not under the lock: a write in progress takes it to finish.
            self._closing = True
            self._counts_asked.set()
            writer.join(timeout=60.0)
        with self._lock:
            if self._closed:
                return
            atexit.unregister(self._at_exit)
            try:
                self.flush()
            finally:
                self._closed = True
                self._accesses.clear()
                self._vectors.clear()
                self._db.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):  # dropped unclosed: its counts still go to disk
            with contextlib.suppress(Exception):
                self.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.close()
            return
        # The block's own error is the one to see: a busy final write of the
        # access counts must not replace it (those counts are all it loses).
        with contextlib.suppress(StoreBusyError):
            self.close()
