"""One namespace's vectors and keyword index, held in Rust, and the
columns search ranks by, held beside them; all kept in step with the
database.

Loaded once (the vectors in one query, the words in batches), then moved
forward by reading the ``changes`` rows written since the last sync, by
this process or any other: a search never rebuilds the matrix, and a
write costs the search that follows one row's update. A memory in
``accessed`` past the last flush seen had only its access count and last
access written (searches' counts, written together), so only those are
read again. Removing a row moves the last one into its place, in the Rust
rows and in every held column alike.

The keyword index holds each memory's search terms (read from the FTS5
table that stores them) and answers the BM25 query in microseconds: FTS5
itself took 0.1-0.3 ms a query at 100,000 memories, and several times
that once writes had split its index into small segments. It takes about
ten bytes per distinct word of each memory.

Holding the ranking columns spares a search reading a row per candidate
from SQLite (about a hundred scattered pages a search at 100,000
memories): only the few it returns are read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from context_core._core import _KeywordIndex, _ScanAhead, _VectorIndex
from context_core.memory_store.extract import KINDS
from context_core.memory_store.keywords import KEYWORD_POSTINGS, QUERY_TERMS, query_terms
from context_core.memory_store.namespaces import space_token

__all__ = ["ACCESS_FLUSHES", "Corpus", "NamespaceVectors", "Ranks", "corpus"]

# Each row is tagged with its memory's kind, so a search by kind scans only
# those rows (a memory's kind never changes once written).
_TAG = {kind: i for i, kind in enumerate(KINDS)}

#: Rows read and added at a time when a namespace is first loaded.
_LOAD_BATCH = 8192

#: Memories whose words are read at a time, and how many a load must have
#: before each batch is indexed beside the reading of the next.
_WORDS_BATCH = 500
_PIPELINE_FROM = 5000

# One string per kind, shared by every held row (SQLite returns a new one each).
_KIND = {kind: kind for kind in KINDS}

#: A scan's arguments: the query's bytes, k, candidates, kind mask and cut.
_ScanKey = tuple[bytes, int, int | None, int | None, bool]

#: BM25's statistics over several namespaces: documents, words, and the
#: documents holding each term.
Corpus = tuple[int, int, dict[str, int]]


def corpus(held: Iterable[NamespaceVectors], terms: str) -> Corpus:
    """The statistics of the namespaces ``held`` together, for the query
    ``terms``: a search across namespaces scores each one's keyword
    matches by these, so a rare word counts the same in a small namespace
    as in a large one, and the scores share one scale."""
    held = list(held)
    distinct = query_terms(terms)
    return (
        sum(len(index.keywords) for index in held),
        sum(index.keywords.words for index in held),
        {term: sum(index.keywords.holding(term) for index in held) for term in distinct},
    )


#: What search ranks a memory by: its id, kind, importance, last access and
#: access count, as stored (searches' counts not yet written are not in it).
Ranks = tuple[str, str, float, float, int]

_RANK_COLUMNS = "id, kind, importance, last_access, access_count"


def _ranks(mid: str, kind: str, importance: float, last: float, count: int) -> Ranks:
    """A row's ``_RANK_COLUMNS`` as held (its kind the shared string)."""
    return (mid, _KIND[kind], importance, last, count)


#: The ``meta`` key counting the flushes of access counts (each memory in
#: ``accessed`` carries the number of the newest flush that wrote it).
ACCESS_FLUSHES = "access_flushes"


class NamespaceVectors:
    """The vectors of one namespace, by the memories' rowids."""

    def __init__(self, namespace: str, dim: int) -> None:
        self.namespace = namespace
        self.dim = dim
        self.rows = _VectorIndex(dim)
        self.keywords = _KeywordIndex(space_token(namespace))
        self.rowids: list[int] = []
        self.ranks: list[Ranks] = []  # by position, as rowids
        # The texts too, by position: a search for texts (a session's every
        # turn) then reads no row of the file. 0.2 ms of a turn went on
        # reading eight rows scattered over a large file.
        self.texts: list[Any] = []
        self.position: dict[int, int] = {}
        self.seq = -1  # nothing loaded yet
        self.flush = 0  # the newest flush of access counts seen
        # What its store last synced it to (SQLite's data_version, the
        # store's own writes); None: not yet.
        self.synced_to: tuple[int, int] | None = None
        # A scan started ahead of its search (see `scan_ahead`), by its arguments.
        self.ahead: tuple[_ScanKey, _ScanAhead] | None = None

    def __len__(self) -> int:
        return len(self.rowids)

    def sync(self, connection: sqlite3.Connection) -> None:
        """Reads what changed since the last sync (inside the caller's read
        transaction, so rows and changes are one snapshot): the namespace
        whole the first time, or after it was emptied."""
        if self.seq < 0:
            self._load(connection)
            return
        changed = connection.execute(
            "SELECT seq, memory FROM changes WHERE namespace = ? AND seq > ? ORDER BY seq",
            (self.namespace, self.seq),
        ).fetchall()
        if any(memory < 0 for _, memory in changed):
            self._load(connection)
            return
        written = list(dict.fromkeys(memory for _, memory in changed))
        if changed:
            self._write_rows(connection, written)  # read whole: the ranking columns come with them
            self.seq = changed[-1][0]
        counted = connection.execute(
            "SELECT seq, memory FROM accessed WHERE namespace = ? AND seq > ? ORDER BY seq",
            (self.namespace, self.flush),
        ).fetchall()
        if counted:
            done = set(written)
            self._count_rows(connection, [m for _, m in counted if m not in done])
            self.flush = counted[-1][0]

    def _select(self, connection: sqlite3.Connection, columns: str, rowids: list[int]) -> Iterator[Any]:
        """``columns`` of those of ``rowids`` in this namespace, 500 at a time."""
        for start in range(0, len(rowids), 500):
            chunk = rowids[start : start + 500]
            yield from connection.execute(
                # A rowid freed by a delete can come back in another
                # namespace: then it has left this one.
                f"SELECT rowid, {columns} FROM memories"
                f" WHERE rowid IN ({','.join('?' * len(chunk))}) AND +namespace = ?",
                (*chunk, self.namespace),
            )

    def _write_rows(self, connection: sqlite3.Connection, rowids: list[int]) -> None:
        """The rows of memories written (added, updated or removed) since the last sync."""
        present = {
            row[0]: row[1:] for row in self._select(connection, f"embedding, text, {_RANK_COLUMNS}", rowids)
        }
        for rowid in rowids:
            row = present.get(rowid)
            if row is None:
                self._remove(rowid)
                continue
            embedding, text, *columns = row
            ranks = _ranks(*columns)
            at = self.position.get(rowid)
            if at is not None:
                self.rows.set(at, embedding, _TAG[ranks[1]])
                self.ranks[at] = ranks
                self.texts[at] = text
            else:
                # The matrix first: it refuses a row of another width (a
                # crafted file), and then nothing else may have grown.
                self.rows.extend(embedding, bytes([_TAG[ranks[1]]]))
                self.position[rowid] = len(self.rowids)
                self.rowids.append(rowid)
                self.ranks.append(ranks)
                self.texts.append(text)
        self._index_words(connection, [rowid for rowid in rowids if rowid in present])

    def _index_words(self, connection: sqlite3.Connection, rowids: list[int]) -> None:
        """The keyword index's documents of ``rowids`` (memories held here)
        as the terms table holds them now, tagged by kind; one it has no
        words for is no document. A namespace's first load indexes each
        batch on a thread of its own while the next is read (the index
        releases the interpreter as it builds): one batch in flight, so the
        index is only ever built on one thread at a time."""
        chunks = (rowids[start : start + _WORDS_BATCH] for start in range(0, len(rowids), _WORDS_BATCH))
        if len(rowids) < _PIPELINE_FROM:
            for chunk in chunks:
                self._set_words(chunk, self._read_words(connection, chunk))
            return
        with ThreadPoolExecutor(1, thread_name_prefix="context_core-keywords") as builder:
            building: Future[None] | None = None
            for chunk in chunks:
                found = self._read_words(connection, chunk)
                if building is not None:
                    building.result()
                building = builder.submit(self._set_words, chunk, found)
            if building is not None:
                building.result()

    @staticmethod
    def _read_words(connection: sqlite3.Connection, rowids: list[int]) -> dict[int, str]:
        return {
            rowid: words
            for rowid, words in connection.execute(
                f"SELECT rowid, words FROM terms WHERE rowid IN ({','.join('?' * len(rowids))})", rowids
            )
            if isinstance(words, str)  # a crafted file's other value indexes nothing
        }

    def _set_words(self, rowids: list[int], found: dict[int, str]) -> None:
        for rowid in rowids:
            if rowid not in found:
                self.keywords.remove(rowid)
        if found:
            keys = list(found)
            tags = bytes(_TAG[self.ranks[self.position[k]][1]] for k in keys)
            self.keywords.set_many(keys, [found[k] for k in keys], tags)

    def _count_rows(self, connection: sqlite3.Connection, rowids: list[int]) -> None:
        """The ranking columns of held memories whose accesses were written."""
        for rowid, *columns in self._select(connection, _RANK_COLUMNS, rowids):
            at = self.position.get(rowid)
            if at is not None:  # a rowid that left the namespace is not held
                self.ranks[at] = _ranks(*columns)

    def _load(self, connection: sqlite3.Connection) -> None:
        last = connection.execute(
            "SELECT coalesce(max(seq), 0) FROM changes WHERE namespace = ?", (self.namespace,)
        ).fetchone()[0]
        flush = connection.execute("SELECT value FROM meta WHERE key = ?", (ACCESS_FLUSHES,)).fetchone()
        cursor = connection.execute(
            f"SELECT rowid, embedding, text, {_RANK_COLUMNS} FROM memories"
            " WHERE namespace = ? ORDER BY rowid",
            (self.namespace,),
        )
        self.rows = _VectorIndex(self.dim)
        self.ahead = None  # it read the rows replaced
        self.rowids = []
        self.ranks = []
        self.texts = []
        # In batches: the rows' bytes are held a batch at a time, not all
        # of them twice over (a list of blobs and their join) beside the matrix.
        while found := cursor.fetchmany(_LOAD_BATCH):
            self.rowids += [row[0] for row in found]
            self.texts += [row[2] for row in found]
            self.ranks += [_ranks(*row[3:]) for row in found]
            self.rows.extend(b"".join(row[1] for row in found), bytes(_TAG[row[4]] for row in found))
        self.position = {rowid: i for i, rowid in enumerate(self.rowids)}
        self.keywords = _KeywordIndex(space_token(self.namespace))
        self._index_words(connection, self.rowids)
        self.keywords.shrink_to_fit()
        self.seq, self.flush = int(last), 0 if flush is None else int(flush[0])

    def _remove(self, rowid: int) -> None:
        self.keywords.remove(rowid)
        index = self.position.pop(rowid, None)
        if index is None:
            return
        self.rows.swap_remove(index)
        last, ranks, text = self.rowids.pop(), self.ranks.pop(), self.texts.pop()
        if index < len(self.rowids):
            self.rowids[index], self.ranks[index], self.texts[index] = last, ranks, text
            self.position[last] = index

    def held_row(self, rowid: int) -> tuple[int, str, str, str, Any]:
        """``(rowid, id, namespace, kind, text)`` of a memory held here, as
        the file holds them in this sync's snapshot."""
        at = self.position[rowid]
        mid, kind = self.ranks[at][:2]
        return rowid, mid, self.namespace, kind, self.texts[at]

    def scores(self, query: npt.NDArray[np.float32], rowids: list[int]) -> dict[int, float]:
        """The exact cosine of each of ``rowids`` held here, from the
        matrix (no database read)."""
        held = [rowid for rowid in rowids if rowid in self.position]
        if not held:
            return {}
        found = self.rows.scores(query.tobytes(), [self.position[rowid] for rowid in held])
        return dict(zip(held, found, strict=True))

    def keyword_hits(
        self, terms: str, k: int, kinds: tuple[str, ...] | None = None, corpus: Corpus | None = None
    ) -> list[tuple[int, float]]:
        """``(rowid, bm25)`` of the ``k`` best keyword matches (of ``kinds``,
        if given: the best of those) for ``terms``
        (:func:`~context_core.memory_store.store.search_terms`), best first:
        the query's rarest terms within :data:`KEYWORD_POSTINGS` documents.
        BM25 weighs by this namespace's statistics, or ``corpus``'s (see
        :func:`corpus`)."""
        mask = None if kinds is None else sum(1 << _TAG[kind] for kind in set(kinds))
        return self.keywords.top(terms, k, QUERY_TERMS, KEYWORD_POSTINGS, mask, corpus)

    def nearest(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        *,
        quantise_from: int,
        kinds: tuple[str, ...] | None = None,
        cut: bool = False,
    ) -> list[tuple[int, float]]:
        """``(rowid, cosine)`` of the ``k`` nearest (of ``kinds``, if given),
        best first: exact below ``quantise_from`` rows, else an int8 scan of
        ``max(2k, 64)`` rescored exactly (at 100,000 rows,
        twice as many as wanted already found every exact best of the
        replayed sessions' queries; four times cost 0.1 ms more cold). With
        ``cut``, a sparse query of more than 48 terms is scanned by its 48
        largest, for four times as many (see ``SCAN_TERMS`` in the Rust
        core): the store asks it for its built-in embedder's queries only."""
        if not self.rowids or k <= 0:
            return []
        key = self._scan_key(query, k, quantise_from, kinds, cut)
        found = None
        if self.ahead is not None and self.ahead[0] == key:
            # Taken only by its own search: another thread's search for
            # something else leaves it to the one it was started for.
            found, self.ahead = self.ahead[1].result(), None
        if found is None:  # none started, another query's, or the rows changed since
            found = self.rows.top_k(*key)
        return [(self.rowids[i], score) for i, score in found]

    def scan_ahead(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        *,
        quantise_from: int,
        kinds: tuple[str, ...] | None = None,
        cut: bool = False,
    ) -> None:
        """Starts the scan of :meth:`nearest` with these arguments on a
        worker thread, for the next :meth:`nearest` with the same arguments
        to take (one started later replaces it): the caller does other work
        while it runs. A :meth:`nearest` with other arguments, or after the
        rows changed, scans itself."""
        if not self.rowids or k <= 0:
            self.ahead = None
            return
        key = self._scan_key(query, k, quantise_from, kinds, cut)
        self.ahead = key, self.rows.top_k_ahead(*key)

    def _scan_key(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        quantise_from: int,
        kinds: tuple[str, ...] | None,
        cut: bool,
    ) -> _ScanKey:
        """The arguments of the rows' scan for :meth:`nearest`'s."""
        candidates = max(2 * k, 64) if len(self.rowids) >= quantise_from else None
        mask = None if kinds is None else sum(1 << _TAG[kind] for kind in set(kinds))
        return query.tobytes(), k, candidates, mask, cut
