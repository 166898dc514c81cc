"""The store's vector index in Rust against its numpy twin
(``context_core.reference.vectors``): exact and int8 top-k, after appends,
replacements and removals, on row counts around the int8 copy's block of
4,096 rows and on sparse queries (most dimensions zero, as the hashing
embedder's are) and dense ones. Both sides must agree exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core._core import _VectorIndex
from context_core.reference.vectors import CUT_POOL, SCAN_TERMS, VectorIndex, quantise

BLOCK = 4096


def _rows(rng: np.random.Generator, n: int, dim: int, zeros: float) -> np.ndarray:
    rows = _values(rng, n, dim, zeros)
    if n:
        rows[rng.integers(0, n)] = 0  # an all-zero row
    return rows


def _values(rng: np.random.Generator, n: int, dim: int, zeros: float) -> np.ndarray:
    """``n`` rows of normal values, about ``zeros`` of them zero."""
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    rows[rng.random((n, dim)) < zeros] = 0
    return rows


def _query(rng: np.random.Generator, dim: int, zeros: float) -> np.ndarray:
    """A query: about ``zeros`` of its values zero, never all of them
    unless asked for all (``_rows`` zeroes one row of those it makes)."""
    return _values(rng, 1, dim, zeros)[0]


def _tagged_pair(
    rng: np.random.Generator, n: int, dim: int, zeros: float
) -> tuple[_VectorIndex, VectorIndex]:
    """The index and its twin, holding the same ``n`` rows, tagged 0-2."""
    ours, twin = _VectorIndex(dim), VectorIndex(dim)
    rows = _rows(rng, n, dim, zeros)
    tags = [int(t) for t in rng.integers(0, 3, n)]
    ours.extend(rows.tobytes(), bytes(tags))
    twin.extend(rows, tags)
    return ours, twin


def _agree(
    ours: _VectorIndex, twin: VectorIndex, query: np.ndarray, k: int, candidates: int, mask: int | None = None
) -> None:
    q = query.astype(np.float32).tobytes()
    assert ours.top_k(q, k) == twin.top_k(query, k)
    assert ours.top_k(q, k, candidates) == twin.top_k_quantised(query, k, candidates)
    assert ours.top_k(q, k, None, mask) == twin.top_k(query, k, mask)
    assert ours.top_k(q, k, candidates, mask) == twin.top_k_quantised(query, k, candidates, mask)
    cut = twin.top_k_quantised(query, k, candidates, mask, cut=True)
    assert ours.top_k(q, k, candidates, mask, True) == cut
    some = list(range(0, len(twin), max(1, len(twin) // 7)))
    assert ours.scores(q, some) == twin.scores(query, some)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 24),
    st.sampled_from([0, 1, 9, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 3]),
    st.lists(st.tuples(st.sampled_from(["set", "remove", "extend"]), st.integers(0, 10**6)), max_size=6),
    st.floats(0.0, 0.95),
    st.integers(1, 12),
    st.integers(1, 80),
    st.integers(0, 7),
)
def test_the_index_agrees_with_its_twin(seed, dim, n, steps, sparsity, k, candidates, mask):
    rng = np.random.default_rng(seed)
    ours, twin = _tagged_pair(rng, n, dim, 0.3)
    for step, at in steps:
        if step == "extend":
            more = _rows(rng, 1 + at % 40, dim, 0.3)
            ours.extend(more.tobytes())  # tagged 0
            twin.extend(more)
        elif len(twin) and step == "set":
            row = _query(rng, dim, 0.3)
            ours.set(at % len(twin), row.tobytes(), at % 3)
            twin.set(at % len(twin), row, at % 3)
        elif len(twin):
            ours.swap_remove(at % len(twin))
            twin.swap_remove(at % len(twin))
    assert len(ours) == len(twin)
    query = _query(rng, dim, sparsity)
    _agree(ours, twin, query, k, candidates, mask)


def test_a_large_index_split_over_the_cores_agrees_with_its_twin():
    """Enough rows times query dimensions that the scans run on several
    threads: the exact one from 2**21 values, the int8 one from 2**23
    read (``PARALLEL_SCAN_VALUES``: 150,000 rows of the dense query)."""
    rng = np.random.default_rng(5)
    dim = 64
    rows = _rows(rng, 150_000, dim, 0.3)
    ours, twin = _VectorIndex(dim), VectorIndex(dim)
    ours.extend(rows.tobytes())
    twin.extend(rows)
    for sparsity in (0.0, 0.5, 0.9):
        query = _query(rng, dim, sparsity)
        terms = np.count_nonzero(quantise(query[None, :])[0])
        assert terms > 0
        if sparsity == 0.0:
            assert len(twin) * terms >= 2**23  # the int8 scan splits
        _agree(ours, twin, query, 8, 64)
    # Ties: rows that are copies of one another score alike and go by row.
    copies = np.repeat(rows[:3], 5000, axis=0)
    ours.extend(copies.tobytes())
    twin.extend(copies)
    _agree(ours, twin, rows[1], 8, 64)


def _sparse_query(rng: np.random.Generator, dim: int, terms: int, levels: int) -> np.ndarray:
    """A query non-zero in ``terms`` dimensions, its values drawn from a few
    magnitudes (so the scan's choice of the largest meets ties)."""
    query = np.zeros(dim, dtype=np.float32)
    at = rng.choice(dim, terms, replace=False)
    query[at] = rng.integers(1, levels + 1, terms) * rng.choice([-1.0, 1.0], terms)
    return query


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([100, 128, 256]),
    st.sampled_from([1, 300, BLOCK + 17]),
    st.integers(SCAN_TERMS - 2, 140),
    st.sampled_from([1, 2, 5]),
    st.integers(1, 12),
    st.integers(1, 40),
    st.integers(0, 7),
)
def test_a_long_sparse_query_is_scanned_by_its_largest_terms(
    seed, dim, n, terms, levels, k, candidates, mask
):
    """Asked to cut, a sparse query past SCAN_TERMS is scanned by its
    largest terms for a larger pool, in full blocks and in the row-major
    tail alike; one non-zero in more than half the dimensions is scanned
    whole."""
    rng = np.random.default_rng(seed)
    ours, twin = _tagged_pair(rng, n, dim, 0.4)
    _agree(ours, twin, _sparse_query(rng, dim, min(terms, dim), levels), k, candidates, mask)


def test_the_cut_changes_what_a_small_pool_finds():
    """The cut is real: on random rows, scanning a 100-term query by its 48
    largest picks other candidates than the whole query would for the same
    pool, and the Rust side follows the cut, not the whole query."""
    rng = np.random.default_rng(11)
    dim, n = 256, 3000
    rows = _rows(rng, n, dim, 0.3)
    ours, twin = _VectorIndex(dim), VectorIndex(dim)
    ours.extend(rows.tobytes())
    twin.extend(rows)
    differ = 0
    for _ in range(20):
        query = _sparse_query(rng, dim, 100, 3)
        q, _ = quantise(query[None, :])
        assert np.count_nonzero(q) == 100
        found = ours.top_k(query.tobytes(), 4, 4, None, True)
        assert found == twin.top_k_quantised(query, 4, 4, cut=True)
        # Not asked to cut, the whole query is scanned.
        assert ours.top_k(query.tobytes(), 4, 4) == twin.top_k_quantised(query, 4, 4)
        whole = np.argsort(-twin.quantised_scores(query), kind="stable")[: 4 * CUT_POOL]  # the same pool
        exact = twin.scores(query, [int(i) for i in whole])
        uncut = sorted(zip((int(i) for i in whole), exact, strict=True), key=lambda p: (-p[1], p[0]))[:4]
        differ += found != uncut
    assert differ > 0


def test_the_twin_rounds_a_value_just_below_one_half_down_as_rust_does():
    """0.49999997 (the float32 below one half) rounds to 0 in Rust's
    ``round()``; the twin adding its half in float32 made it 1, which could
    add a 49th term and decide whether a query is cut."""
    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    values, _ = quantise(np.array([[127.0, below_half], [-127.0, -below_half]], dtype=np.float32))
    assert values.tolist() == [[127, 0], [-127, 0]]


def test_quantising_rounds_halves_away_from_zero():
    """127 * 0.5 / 127 is exactly one half: it rounds to 1, not to 0 (the
    even neighbour), so the second row is the one int8 candidate."""
    rows = np.array([[127.0, 0.4, 0.0], [127.0, 0.5, 0.0], [127.0, -2.5, 0.0]], dtype=np.float32)
    ours, twin = _VectorIndex(3), VectorIndex(3)
    ours.extend(rows.tobytes())
    twin.extend(rows)
    query = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    assert ours.top_k(query.tobytes(), 1, 1) == twin.top_k_quantised(query, 1, 1) == [(1, 0.5)]
    assert twin.quantised_scores(-query)[2] == 3 * 127  # -2.5 -> -3: away from zero both ways
    assert ours.top_k((-query).tobytes(), 1, 1) == [(2, 2.5)]
