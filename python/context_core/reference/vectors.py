"""The twin of the store's vector index (``context_core._core._VectorIndex``),
written from its contract in numpy, for the differential tests.

Rows are kept in float32. The int8 copy quantises each row by its largest
magnitude (``round(v * 127 / largest)``, halves away from zero, scale
``largest / 127``); an int8 score is the exact integer dot product with the
query quantised the same way, as float32, times the row's scale. The
quantised search keeps the ``candidates`` best int8 scores (ties: the
earlier row) and rescores them exactly. With ``cut``, a sparse query
(non-zero in at most half the dimensions) with more than ``SCAN_TERMS``
non-zero int8 values is scanned by its ``SCAN_TERMS`` largest in
magnitude (ties: the lower dimension), the others zero, for ``CUT_POOL``
times the candidates; the rescoring uses the whole query. Each row has a tag (0-7); a mask
(bit ``t`` for tag ``t``) keeps only the rows of its tags. Exact scores are float32 dot
products summed as the Rust side sums them: eight lanes over the whole
groups of eight, the lanes added in order, then the rest; so the two agree
bit for bit.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["CUT_POOL", "SCAN_TERMS", "VectorIndex", "quantise"]

F32 = np.float32
SCAN_TERMS = 48
CUT_POOL = 4


def quantise(rows: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Each row's int8 values (as int64) and scale (``rows``: 2-D)."""
    rows = np.asarray(rows, dtype=F32)
    largest = np.abs(rows).max(axis=1, initial=F32(0)).astype(F32)
    safe = np.where(largest == 0, F32(1), largest).astype(F32)
    scaled = (rows * F32(127.0)).astype(F32) / safe[:, None]
    # The half added in float64, where it is exact: in float32,
    # 0.49999997 + 0.5 rounds up to 1, where Rust's round() gives 0.
    values = (np.sign(scaled) * np.floor(np.abs(scaled).astype(np.float64) + 0.5)).astype(np.int64)
    values[largest == 0] = 0
    scales = np.where(largest == 0, F32(0), largest / F32(127.0)).astype(F32)
    return values, scales


def _dots(rows: npt.NDArray[np.float32], query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Float32 dot products in the Rust order of summation."""
    n, dim = rows.shape
    head = dim - dim % 8
    lanes = np.zeros((n, 8), dtype=F32)
    for at in range(0, head, 8):
        lanes += rows[:, at : at + 8] * query[at : at + 8]
    total = np.zeros(n, dtype=F32)
    for lane in range(8):
        total += lanes[:, lane]
    tail = np.zeros(n, dtype=F32)
    for at in range(head, dim):
        tail += rows[:, at] * query[at]
    return (total + tail).astype(F32)


def _for_scan(values: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], bool]:
    """The quantised query the scan reads, and whether it was cut."""
    terms = [j for j in range(len(values)) if values[j] != 0]
    if len(terms) <= SCAN_TERMS or len(terms) > len(values) // 2:
        return values, False
    kept = sorted(terms, key=lambda j: (-abs(int(values[j])), j))[:SCAN_TERMS]
    scanned = np.zeros_like(values)
    scanned[kept] = values[kept]
    return scanned, True


def _scanned(query: npt.NDArray[np.float32], cut: bool) -> tuple[npt.NDArray[np.int64], bool]:
    """``query`` quantised as the scan reads it (cut, if asked and it is
    long and sparse), and whether it was cut."""
    values = quantise(np.asarray(query, dtype=F32)[None, :])[0][0]
    return _for_scan(values) if cut else (values, False)


def _best(scores: npt.NDArray[np.float32], k: int, rows: list[int]) -> list[tuple[int, float]]:
    """The ``k`` highest of ``rows``, ties by the earlier row."""
    order = sorted(rows, key=lambda i: (-float(scores[i]), i))[:k]
    return [(i, float(scores[i])) for i in order]


class VectorIndex:
    """Rows of one width; removing a row moves the last one into its place."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.rows = np.zeros((0, dim), dtype=F32)
        self.tags: list[int] = []

    def __len__(self) -> int:
        return len(self.rows)

    def extend(self, rows: npt.NDArray[np.float32], tags: list[int] | None = None) -> None:
        rows = np.asarray(rows, dtype=F32).reshape(-1, self.dim)
        self.rows = np.concatenate([self.rows, rows])
        self.tags += [0] * len(rows) if tags is None else list(tags)

    def set(self, index: int, row: npt.NDArray[np.float32], tag: int = 0) -> None:
        self.rows[index] = row
        self.tags[index] = tag

    def swap_remove(self, index: int) -> None:
        self.rows[index] = self.rows[-1]
        self.rows = self.rows[:-1]
        self.tags[index] = self.tags[-1]
        self.tags.pop()

    def _kept(self, mask: int | None) -> list[int]:
        return [i for i, t in enumerate(self.tags) if mask is None or mask & (1 << t)]

    def scores(self, query: npt.NDArray[np.float32], rows: list[int]) -> list[float]:
        return [float(s) for s in _dots(self.rows[rows], np.asarray(query, dtype=F32))]

    def top_k(
        self, query: npt.NDArray[np.float32], k: int, mask: int | None = None
    ) -> list[tuple[int, float]]:
        return _best(_dots(self.rows, np.asarray(query, dtype=F32)), k, self._kept(mask))

    def quantised_scores(
        self, query: npt.NDArray[np.float32], *, cut: bool = False
    ) -> npt.NDArray[np.float32]:
        """The int8 score of every row; with ``cut``, of the query as the
        scan reads it (see the module's notes)."""
        return self._int8_scores(_scanned(query, cut)[0])

    def _int8_scores(self, scanned: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        if not len(self.rows):
            return np.zeros(0, dtype=F32)
        values, scales = quantise(self.rows)
        scores: npt.NDArray[np.float32] = ((values @ scanned).astype(F32) * scales).astype(F32)
        return scores

    def top_k_quantised(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        candidates: int,
        mask: int | None = None,
        cut: bool = False,
    ) -> list[tuple[int, float]]:
        scanned, was_cut = _scanned(query, cut)
        pool = max(candidates, k) * (CUT_POOL if was_cut else 1)
        rough = [i for i, _ in _best(self._int8_scores(scanned), pool, self._kept(mask))]
        exact = _dots(self.rows[rough], np.asarray(query, dtype=F32)) if rough else np.zeros(0, F32)
        rescored = sorted(zip(rough, exact, strict=True), key=lambda p: (-float(p[1]), p[0]))
        return [(i, float(s)) for i, s in rescored[:k]]
