"""The search's rerank is the module's documented formula to the last bit
(a copy written out for speed would order ties and near-ties differently
if it drifted), and reads its constants when called."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from context_core.memory_store import ranking

finite = st.floats(allow_nan=False, allow_infinity=False)


@given(
    relevance=st.floats(-1.0, 1.0),
    importance=st.floats(0.0, 1.0),
    age=st.one_of(finite, st.integers(-(10**12), 10**12)),
    count=st.integers(-5, 10**9),
)
def test_rerank_is_the_documented_formula(relevance, importance, age, count):
    formula = (
        relevance
        + ranking.IMPORTANCE_WEIGHT * importance
        + ranking.RECENCY_WEIGHT * ranking.freshness(age, ranking.RECENCY_HALF_LIFE_DAYS)
        + ranking.FREQUENCY_WEIGHT * ranking.frequency(count)
    )
    assert ranking.rerank(relevance, importance, age, count) == formula


def test_rerank_reads_the_constants_when_called(monkeypatch):
    before = ranking.rerank(0.5, 0.5, 30 * 86_400.0, 10)
    monkeypatch.setattr(ranking, "RECENCY_HALF_LIFE_DAYS", 1.0)
    after = ranking.rerank(0.5, 0.5, 30 * 86_400.0, 10)
    assert after < before
    assert after == 0.5 + ranking.IMPORTANCE_WEIGHT * 0.5 + ranking.RECENCY_WEIGHT * ranking.freshness(
        30 * 86_400.0, 1.0
    ) + ranking.FREQUENCY_WEIGHT * ranking.frequency(10)
