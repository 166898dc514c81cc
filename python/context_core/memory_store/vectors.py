"""One namespace's vectors, held in Rust and kept in step with the database.

Loaded once (one query), then moved forward by reading the ``changes``
rows written since the last sync, by this process or any other: a search
never rebuilds the matrix, and a write costs the search that follows one
row's update. Removing a row moves the last one into its place, in the
Rust rows and in :attr:`NamespaceVectors.rowids` alike.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import numpy.typing as npt

from context_core._core import _VectorIndex
from context_core.memory_store.extract import KINDS

__all__ = ["NamespaceVectors"]

# Each row is tagged with its memory's kind, so a search by kind scans only
# those rows (a memory's kind never changes once written).
_TAG = {kind: i for i, kind in enumerate(KINDS)}

#: Rows read and added at a time when a namespace is first loaded.
_LOAD_BATCH = 8192


class NamespaceVectors:
    """The vectors of one namespace, by the memories' rowids."""

    def __init__(self, namespace: str, dim: int) -> None:
        self.namespace = namespace
        self.dim = dim
        self.rows = _VectorIndex(dim)
        self.rowids: list[int] = []
        self.position: dict[int, int] = {}
        self.seq = -1  # nothing loaded yet

    def __len__(self) -> int:
        return len(self.rowids)

    def sync(self, connection: sqlite3.Connection) -> None:
        """Reads what changed since the last sync (inside the caller's read
        transaction, so rows and changes are one snapshot)."""
        if self.seq < 0:
            self._load(connection)
            return
        changed = connection.execute(
            "SELECT seq, memory FROM changes WHERE namespace = ? AND seq > ? ORDER BY seq",
            (self.namespace, self.seq),
        ).fetchall()
        if not changed:
            return
        if any(memory < 0 for _, memory in changed):
            self._load(connection)
            return
        rowids = list(dict.fromkeys(memory for _, memory in changed))
        present: dict[int, tuple[bytes, str]] = {}
        for start in range(0, len(rowids), 500):
            chunk = rowids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for rowid, embedding, kind in connection.execute(
                # A rowid freed by a delete can come back in another
                # namespace: then it has left this one.
                f"SELECT rowid, embedding, kind FROM memories WHERE rowid IN ({marks}) AND +namespace = ?",
                (*chunk, self.namespace),
            ):
                present[rowid] = (embedding, kind)
        for rowid in rowids:
            row = present.get(rowid)
            if row is None:
                self._remove(rowid)
                continue
            embedding, kind = row
            if rowid in self.position:
                self.rows.set(self.position[rowid], embedding, _TAG[kind])
            else:
                self.position[rowid] = len(self.rowids)
                self.rowids.append(rowid)
                self.rows.extend(embedding, bytes([_TAG[kind]]))
        self.seq = changed[-1][0]

    def _load(self, connection: sqlite3.Connection) -> None:
        last = connection.execute(
            "SELECT coalesce(max(seq), 0) FROM changes WHERE namespace = ?", (self.namespace,)
        ).fetchone()[0]
        cursor = connection.execute(
            "SELECT rowid, embedding, kind FROM memories WHERE namespace = ? ORDER BY rowid",
            (self.namespace,),
        )
        self.rows = _VectorIndex(self.dim)
        self.rowids = []
        # In batches: the rows' bytes are held a batch at a time, not all
        # of them twice over (a list of blobs and their join) beside the matrix.
        while found := cursor.fetchmany(_LOAD_BATCH):
            self.rowids += [rowid for rowid, _, _ in found]
            self.rows.extend(
                b"".join(embedding for _, embedding, _ in found), bytes(_TAG[kind] for _, _, kind in found)
            )
        self.position = {rowid: i for i, rowid in enumerate(self.rowids)}
        self.seq = int(last)

    def _remove(self, rowid: int) -> None:
        index = self.position.pop(rowid, None)
        if index is None:
            return
        self.rows.swap_remove(index)
        last = self.rowids.pop()
        if index < len(self.rowids):
            self.rowids[index] = last
            self.position[last] = index

    def scores(self, query: npt.NDArray[np.float32], rowids: list[int]) -> dict[int, float]:
        """The exact cosine of each of ``rowids`` held here, from the
        matrix (no database read)."""
        held = [rowid for rowid in rowids if rowid in self.position]
        if not held:
            return {}
        found = self.rows.scores(query.tobytes(), [self.position[rowid] for rowid in held])
        return dict(zip(held, found, strict=True))

    def nearest(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        *,
        quantise_from: int,
        kinds: tuple[str, ...] | None = None,
    ) -> list[tuple[int, float]]:
        """``(rowid, cosine)`` of the ``k`` nearest (of ``kinds``, if given),
        best first: exact below ``quantise_from`` rows, else an int8 scan of
        ``max(4k, 64)`` rescored exactly."""
        if not self.rowids or k <= 0:
            return []
        candidates = max(4 * k, 64) if len(self.rowids) >= quantise_from else None
        mask = None if kinds is None else sum(1 << _TAG[kind] for kind in set(kinds))
        found = self.rows.top_k(query.tobytes(), k, candidates, mask)
        return [(self.rowids[i], score) for i, score in found]
