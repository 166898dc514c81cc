"""The twin of the memory search's candidate ranking
(``context_core._core._rank_candidates``), for the differential tests:
the loop the store ran in Python, scoring each candidate by the formula
of :mod:`context_core.memory_store.ranking` with the weights given.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["rank_candidates"]


def rank_candidates(
    held: list[int],
    position: dict[int, int],
    ranks: list[tuple[str, str, float, float, int]],
    cosines: dict[int, float],
    keyword: dict[int, float],
    shared: dict[int, list[str]],
    unscored: set[int],
    accesses: dict[str, tuple[int, float]],
    kinds: tuple[str, ...] | None,
    now: float,
    weights: tuple[float, float, float, float, float, float, float],
) -> list[tuple[Any, ...]]:
    """``(-len(matched), -score, rowid, matched, cosine, keyword, near)``
    of each of ``held`` whose kind is in ``kinds``, best first."""
    by_vector, by_keyword, by_importance, by_recency, by_frequency, span, frequent = weights
    ranked = []
    for rowid in held:
        mid, kind, importance, last, count = ranks[position[rowid]]
        if kinds is not None and kind not in kinds:
            continue
        pending = accesses.get(mid)
        if pending is not None:
            count, last = count + pending[0], max(last, pending[1])
        cosine, kw = cosines[rowid], keyword.get(rowid, 0.0)
        score = (
            by_vector * cosine
            + by_keyword * kw
            + by_importance * importance
            + by_recency * 0.5 ** (max(now - last, 0.0) / span)
            + by_frequency * min(1.0, math.log1p(max(count, 0)) / frequent)
        )
        matched = tuple(shared[rowid]) if rowid in shared else ()
        ranked.append((-len(matched), -score, rowid, matched, cosine, kw, rowid not in unscored))
    ranked.sort()
    return ranked
