"""The search's ranking (in Rust) scores by the module's documented formula
to the last bit (near-ties would order differently if it drifted), reads
the module's weights when it runs, and orders candidates as its Python
twin (``context_core.reference.ranking``) does."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core._core import _rank_candidates
from context_core.errors import InvalidInputError
from context_core.memory_store import ranking
from context_core.reference.ranking import rank_candidates

finite = st.floats(allow_nan=False, allow_infinity=False)


def _score(cosine: float, keyword: float, importance: float, age: float, count: int) -> float:
    """One candidate's score from the Rust ranking, last accessed ``age`` seconds ago."""
    ranked = _rank_candidates(
        [7], {7: 0}, [("m", "semantic", importance, 0.0, count)], {7: cosine}, {7: keyword}, {}, set(), {},
        None, age, ranking.weights(),
    )  # fmt: skip
    return -ranked[0][1]


@given(
    cosine=st.floats(-1.0, 1.0),
    keyword=st.floats(0.0, 1.0),
    importance=st.floats(0.0, 1.0),
    age=st.one_of(finite, st.integers(-(10**12), 10**12).map(float)),
    count=st.integers(-5, 10**9),
)
def test_a_score_is_the_documented_formula(cosine, keyword, importance, age, count):
    formula = (
        ranking.VECTOR_WEIGHT * cosine
        + ranking.KEYWORD_WEIGHT * keyword
        + ranking.IMPORTANCE_WEIGHT * importance
        + ranking.RECENCY_WEIGHT * ranking.freshness(age, ranking.RECENCY_HALF_LIFE_DAYS)
        + ranking.FREQUENCY_WEIGHT * ranking.frequency(count)
    )
    assert _score(cosine, keyword, importance, age, count) == formula


def test_scores_over_many_ages_and_counts_are_the_formulas_bits():
    """Near-ties order by the last bit, so the score must be the formula's
    exactly: a compiler that turned ``pow(0.5, x)`` into ``exp2(-x)`` was
    an ulp off for about one age in a thousand, which examples at the
    edges of the range do not reach. Twenty thousand ages and counts,
    scored in one call."""
    rng = random.Random(5)
    ages = [855_384_853.8632963, 2_479_817.0, 281_470.0] + [rng.uniform(0.0, 4e8) for _ in range(20_000)]
    counts = [rng.choice([0, 1, 7, 99, 100, 10**6]) + rng.randrange(50) for _ in ages]
    held = list(range(len(ages)))
    lived = enumerate(zip(ages, counts, strict=True))
    ranks = [(f"m{i}", "semantic", 0.5, -age, count) for i, (age, count) in lived]
    cosines = dict.fromkeys(held, 0.5)
    ranked = _rank_candidates(
        held, {i: i for i in held}, ranks, cosines, {}, {}, set(), {}, None, 0.0, ranking.weights()
    )
    scores = {row[2]: -row[1] for row in ranked}
    for i, (age, count) in enumerate(zip(ages, counts, strict=True)):
        formula = (
            ranking.VECTOR_WEIGHT * 0.5
            + ranking.KEYWORD_WEIGHT * 0.0
            + ranking.IMPORTANCE_WEIGHT * 0.5
            + ranking.RECENCY_WEIGHT * ranking.freshness(age, ranking.RECENCY_HALF_LIFE_DAYS)
            + ranking.FREQUENCY_WEIGHT * ranking.frequency(count)
        )
        assert scores[i] == formula, (age, count)


def test_the_ranking_reads_the_weights_when_it_runs(monkeypatch):
    before = _score(0.5, 0.0, 0.5, 30 * 86_400.0, 10)
    monkeypatch.setattr(ranking, "RECENCY_HALF_LIFE_DAYS", 1.0)
    after = _score(0.5, 0.0, 0.5, 30 * 86_400.0, 10)
    assert after < before
    assert after == ranking.VECTOR_WEIGHT * 0.5 + ranking.IMPORTANCE_WEIGHT * 0.5 + ranking.RECENCY_WEIGHT * (
        ranking.freshness(30 * 86_400.0, 1.0)
    ) + ranking.FREQUENCY_WEIGHT * ranking.frequency(10)


KINDS = ("semantic", "episodic", "procedural")
row = st.tuples(
    st.sampled_from(["m1", "m2", "m3", "m4", "m5", "m6"]),
    st.sampled_from(KINDS),
    st.floats(0.0, 1.0),
    st.one_of(finite, st.sampled_from([0.0, 1e9])),
    st.integers(0, 10**6),
)


@st.composite
def searches(draw):
    """A namespace's held rows and one search's candidates among them:
    rowids held at shuffled places, cosines and keyword scores (ties
    likely), shared entities, accesses not yet written, kinds."""
    ranks = draw(st.lists(row, min_size=1, max_size=30))
    rowids = draw(st.lists(st.integers(1, 10**6), min_size=len(ranks), max_size=len(ranks), unique=True))
    position = {rowid: at for at, rowid in enumerate(rowids)}
    held = draw(st.lists(st.sampled_from(rowids), unique=True, max_size=len(rowids)))
    score = st.one_of(st.sampled_from([0.0, -0.0, 0.5, 1.0]), st.floats(-1.0, 1.0))
    cosines = {rowid: draw(score) for rowid in held}
    keyword = {rowid: draw(score) for rowid in held if draw(st.booleans())}
    names = st.lists(st.sampled_from(["A-1", "B-2", "c.py"]), min_size=1, max_size=3)
    shared = {rowid: draw(names) for rowid in held if draw(st.booleans())}
    unscored = {rowid for rowid in held if draw(st.booleans())}
    pending = st.tuples(st.integers(1, 50), finite)
    accesses = draw(st.dictionaries(st.sampled_from(["m1", "m2", "m3"]), pending))
    kinds = draw(st.one_of(st.none(), st.lists(st.sampled_from(KINDS), min_size=1, unique=True).map(tuple)))
    now = draw(finite)
    return held, position, ranks, cosines, keyword, shared, unscored, accesses, kinds, now


@given(searches())
def test_the_rust_ranking_agrees_with_the_twin(search):
    ours = _rank_candidates(*search, ranking.weights())
    twin = rank_candidates(*search, ranking.weights())
    assert ours == twin
    assert [type(v) for r in ours for v in r] == [type(v) for r in twin for v in r]


@pytest.mark.parametrize("days", [0, -1.0, float("nan"), float("inf")])
def test_a_half_life_that_is_no_positive_number_is_refused(monkeypatch, days):
    """It divided by zero in the Python loop; in Rust it would score a NaN."""
    monkeypatch.setattr(ranking, "RECENCY_HALF_LIFE_DAYS", days)
    with pytest.raises(InvalidInputError, match="RECENCY_HALF_LIFE_DAYS must be a positive number of days"):
        ranking.weights()
