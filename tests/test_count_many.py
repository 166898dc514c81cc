"""count_many: numpy output, parallel batches, and safety in forked workers."""

from __future__ import annotations

import multiprocessing
import os
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import Tokenizer, reference
from context_core.tokens import PARALLEL_MIN_BYTES
from strategies import texts


@given(batch=st.lists(texts, max_size=20))
def test_matches_the_reference(batch):
    got = Tokenizer("cl100k_base").count_many(batch)
    assert got.dtype == np.int64
    assert got.shape == (len(batch),)
    np.testing.assert_array_equal(got, reference.Tokenizer("cl100k_base").count_many(batch))


def big_batch() -> list[str]:
    words = ["alpha", "beta", "日本語", "ünïcode", "12345", "\n", "   ", "don't", "🚀"]
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(i % 300)) for i in range(4000)]


def test_parallel_batch_equals_one_by_one(encoding):
    batch = big_batch()
    assert sum(len(t.encode()) for t in batch) > PARALLEL_MIN_BYTES  # really takes the parallel path
    tok = Tokenizer(encoding)
    counts = tok.count_many(batch)
    assert counts.tolist() == [tok.count(t) for t in batch]


def test_any_iterable_of_str_is_accepted():
    tok = Tokenizer()
    words = ["one", "two words", "three more words"]
    expected = [tok.count(w) for w in words]
    assert tok.count_many(iter(words)).tolist() == expected
    assert tok.count_many(np.array(words)).tolist() == expected  # numpy str_ subclasses str


def test_result_is_a_writable_array_and_tuples_work():
    counts = Tokenizer().count_many(("one", "two words"))
    counts += 1
    assert counts.tolist() == [2, 3]
    assert Tokenizer().count_many([]).shape == (0,)


def _count_in_child(queue) -> None:
    batch = big_batch()
    queue.put(int(Tokenizer().count_many(batch).sum()))


@pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX")
def test_counting_in_a_forked_child_after_the_parent_counted():
    tok = Tokenizer()
    batch = big_batch()
    expected = int(tok.count_many(batch).sum())  # the parent uses its threads first
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_count_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child deadlocked while counting")
    assert child.exitcode == 0
    assert queue.get(timeout=5) == expected


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_counting_in_many_forked_children_at_once():
    Tokenizer().count_many(big_batch())
    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:  # child: count, exit 0 only on the right answer
            ok = Tokenizer().count_many(["hello world"] * 3000).tolist() == [2] * 3000
            os._exit(0 if ok else 1)
        pids.append(pid)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
