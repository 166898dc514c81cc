"""How search ranks and forgetting scores memories, with every weight named.

A search hit's score is its relevance, then a rerank:

``relevance = VECTOR_WEIGHT * cosine + KEYWORD_WEIGHT * keyword``, where
``keyword`` is the hit's BM25 over the best BM25 of the search, across
all the namespaces it reads (0 to 1);

``score = relevance + IMPORTANCE_WEIGHT * importance
+ RECENCY_WEIGHT * freshness(last access) + FREQUENCY_WEIGHT * frequency``,
added in that order, in float64. The search computes it in Rust (with the
weights :func:`weights` reads when it runs), to the same bits.

Memories that share an entity with the query come before all others
whatever their score (the most shared entities first): an exact id or path
is never lost to a chatty memory with a higher cosine.

Forgetting keeps what is fresh, used and important:
``retention = freshness(last access) * (1 + log1p(access count)) * importance``,
with ``freshness = 0.5 ** (age / half_life)``.
"""

from __future__ import annotations

import math

from context_core.errors import InvalidInputError

__all__ = [
    "FREQUENCY_WEIGHT",
    "HALF_LIFE_DAYS",
    "IMPORTANCE_WEIGHT",
    "KEYWORD_WEIGHT",
    "RECENCY_HALF_LIFE_DAYS",
    "RECENCY_WEIGHT",
    "VECTOR_WEIGHT",
    "frequency",
    "freshness",
    "retention",
    "weights",
]

VECTOR_WEIGHT = 0.6
KEYWORD_WEIGHT = 0.25
IMPORTANCE_WEIGHT = 0.1
RECENCY_WEIGHT = 0.05
FREQUENCY_WEIGHT = 0.05
#: Half-life of the recency term in a search's rerank.
RECENCY_HALF_LIFE_DAYS = 30.0
#: Half-life of freshness in forgetting.
HALF_LIFE_DAYS = 30.0
#: Accesses at which the frequency term reaches 1.
_FREQUENT = 100

_DAY = 86_400.0


def freshness(age_seconds: float, half_life_days: float) -> float:
    """``0.5 ** (age / half_life)``: 1 now, 0.5 one half-life ago."""
    return float(0.5 ** (max(age_seconds, 0.0) / (half_life_days * _DAY)))


def frequency(access_count: int) -> float:
    """``log1p(count) / log1p(100)``, at most 1."""
    return min(1.0, math.log1p(max(access_count, 0)) / math.log1p(_FREQUENT))


def weights() -> tuple[float, float, float, float, float, float, float]:
    """The weights as the search's ranking (in Rust) takes them, read now
    (a weight set on this module counts from the next search): those
    above, then the recency term's half-life in seconds and the frequency
    term's divisor, ``log1p(100)``. A half-life that is not a positive
    number is refused (it would divide by zero, or age nothing)."""
    span = RECENCY_HALF_LIFE_DAYS * _DAY
    if not 0 < span < math.inf:
        raise InvalidInputError(
            f"RECENCY_HALF_LIFE_DAYS must be a positive number of days, not {RECENCY_HALF_LIFE_DAYS!r}"
        )
    return (
        VECTOR_WEIGHT,
        KEYWORD_WEIGHT,
        IMPORTANCE_WEIGHT,
        RECENCY_WEIGHT,
        FREQUENCY_WEIGHT,
        span,
        math.log1p(_FREQUENT),
    )


def retention(
    age_seconds: float, access_count: int, importance: float, half_life_days: float = HALF_LIFE_DAYS
) -> float:
    """How much a memory is worth keeping (see the module's formula)."""
    return freshness(age_seconds, half_life_days) * (1.0 + math.log1p(max(access_count, 0))) * importance
