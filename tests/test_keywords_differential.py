"""The store's keyword index in Rust against its Python twin
(``context_core.reference.keywords``): BM25 top-k, the terms a query keeps
and the counts behind them, after sets, replacements and removals (enough
of them to rebuild the postings), with words of other namespaces and
kinds filtered by mask. Both sides must agree exactly."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core._core import _KeywordIndex
from context_core.errors import InvalidInputError
from context_core.reference.keywords import KeywordIndex

PREFIX = "nab12"
VOCAB = ["refund", "order", "late", "日志", "轮转", "deploy", "the", "a", "kubernetes", "x1"]


def _words(draw_terms: list[str], foreign: list[str]) -> str:
    return " ".join([PREFIX + t for t in draw_terms] + ["nzz99" + t for t in foreign])


def _agree(ours: _KeywordIndex, twin: KeywordIndex, queries: list[str]) -> None:
    assert len(ours) == len(twin)
    for term in [*VOCAB, "missing"]:
        assert ours.holding(term) == twin.holding(term), term
    for query in queries:
        for max_terms, max_postings in ((32, 1000), (2, 1000), (32, 3), (32, 0)):
            assert ours.chosen(query, max_terms, max_postings) == twin.chosen(query, max_terms, max_postings)
            for mask in (None, 0b1, 0b110, 0):
                assert ours.top(query, 5, max_terms, max_postings, mask) == twin.top(
                    query, 5, max_terms, max_postings, mask
                ), (query, max_terms, max_postings, mask)
    # Scored by a corpus of several namespaces: larger than the index, and
    # one that counts less than it does (the index's own then stand).
    for corpus in (
        (len(twin) + 40, twin.words + 300, {"refund": twin.holding("refund") + 7, "日志": 2}),
        (0, 0, {"order": 0}),
    ):
        for query in queries:
            assert ours.top(query, 5, 32, 1000, None, corpus) == twin.top(query, 5, 32, 1000, None, corpus)
    assert ours.words == twin.words


terms = st.lists(st.sampled_from(VOCAB), max_size=8)
op = st.one_of(
    st.tuples(
        st.just("set"),
        st.integers(0, 30),
        terms,
        st.lists(st.sampled_from(VOCAB), max_size=2),
        st.integers(0, 7),
    ),
    st.tuples(st.just("remove"), st.integers(0, 30)),
    st.tuples(
        st.just("raw"),
        st.integers(0, 30),
        st.sampled_from(["", "   ", PREFIX, f"{PREFIX}a  {PREFIX}a", "plain words"]),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(op, max_size=40),
    st.lists(st.lists(st.sampled_from([*VOCAB, "missing"]), max_size=6), max_size=4),
)
def test_agrees_after_any_writes(ops: list[tuple[Any, ...]], queries: list[list[str]]) -> None:
    ours, twin = _KeywordIndex(PREFIX), KeywordIndex(PREFIX)
    for step in ops:
        if step[0] == "set":
            _, key, mine, foreign, tag = step
            for index in (ours, twin):
                index.set_many([key], [_words(mine, foreign)], bytes([tag]))
        elif step[0] == "remove":
            assert ours.remove(step[1]) == twin.remove(step[1])
        else:
            for index in (ours, twin):
                index.set_many([step[1]], [step[2]])
    _agree(ours, twin, [" ".join(q) for q in queries] + ["refund  order ", "", "日志 轮转 日志"])


def test_agrees_across_rebuilds() -> None:
    # Thousands of removals and replacements: the postings are rebuilt
    # without the dead documents more than once on the way.
    rng = random.Random(7)
    ours, twin = _KeywordIndex(PREFIX), KeywordIndex(PREFIX)
    for _ in range(6):
        keys = [rng.randrange(4000) for _ in range(1500)]
        words = [_words(rng.choices(VOCAB, k=rng.randrange(1, 12)), []) for _ in keys]
        tags = bytes(rng.randrange(8) for _ in keys)
        ours.set_many(keys, words, tags)
        twin.set_many(keys, words, tags)
        for key in rng.sample(range(4000), 1200):
            assert ours.remove(key) == twin.remove(key)
        _agree(ours, twin, ["refund late", "the a order", "kubernetes 日志", "x1 deploy refund the"])
    assert len(ours) > 0


def test_a_term_is_counted_at_most_65535_times_in_a_document() -> None:
    ours, twin = _KeywordIndex(PREFIX), KeywordIndex(PREFIX)
    words = [" ".join([PREFIX + "refund"] * 70_000 + [PREFIX + "order"]), PREFIX + "refund other"]
    for index in (ours, twin):
        index.set_many([1, 2], words)
    _agree(ours, twin, ["refund", "refund order"])


def test_refuses_mismatched_batches() -> None:
    index = _KeywordIndex(PREFIX)
    for keys, words, tags in (([1, 2], ["a"], None), ([1], ["a"], b"\x00\x00"), ([1], ["a"], b"\x08")):
        with pytest.raises(InvalidInputError) as raised:
            index.set_many(keys, words, tags)
        assert isinstance(raised.value, ValueError)
    assert len(index) == 0
