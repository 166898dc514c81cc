"""The memory store: writes, duplicates, entity-first search, token-bounded
results, forgetting, namespaces, bad input, and several processes (and a
killed one) on one database."""

from __future__ import annotations

import multiprocessing
import os
import re
import sqlite3
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import (
    ContextCoreError,
    EmbeddingError,
    InvalidInputError,
    InvalidTypeError,
    MemoryStore,
    StoreBusyError,
    StoreVersionError,
    Tokenizer,
)
from context_core.memory_store import CallableEmbedder, HashingEmbedder, Namespace, search_terms
from context_core.memory_store.store import ACCESS_FLUSH_MEMORIES, ACCESS_FLUSH_SECONDS
from killed import reports_until_killed

DAY = 86_400.0


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=clock) as s:
        yield s


CHATTY = [
    "The user talked at length about refunds, orders, payments and how refunds for orders usually go",
    "Orders and refunds: the user wants refund orders handled kindly, refunds for every order",
    "We discussed what happened with the refund of the order and what the user thinks of refunds",
]


def test_an_entity_match_comes_first_whatever_its_cosine(store):
    target = store.remember("Ticket A-8812 closed after the charge was reversed", kind="episodic")
    for text in CHATTY:
        store.remember(text)
    hits = store.search("what happened with the refund for order A-8812?", k=3)
    chatty_cosine = max(h.cosine for h in hits[1:])
    assert hits[0].memory.id == target.id
    assert hits[0].entities == ("a-8812",)
    assert "entity" in hits[0].reasons
    assert hits[0].cosine < chatty_cosine  # it won on the entity, not the vector


def test_paths_meet_in_any_case(store):
    m = store.remember("retry logic lives in services/payments/retry.go", kind="procedural")
    hits = store.search("Services/Payments/retry.go", k=1)
    assert hits[0].memory.id == m.id
    assert set(hits[0].entities) == {"services/payments/retry.go", "retry.go"}
    assert hits[0].memory.entities == m.entities == store.get(m.id).entities
    assert m.entities == (("file", "retry.go"), ("path", "services/payments/retry.go"))
    assert hits[0].memory.access_count == store.get(m.id).access_count == 1


def test_a_duplicate_updates_the_old_memory(store, clock):
    first = store.remember("Alice prefers tabs over spaces", importance=0.4)
    clock.now += 10
    again = store.remember("  alice prefers TABS over spaces ", importance=0.9)
    assert again.id == first.id
    assert again.access_count == 1
    assert again.importance == 0.9
    assert store.count() == 1
    assert store.get(first.id).text == "  alice prefers TABS over spaces "


def test_a_near_duplicate_with_a_shared_entity_updates_it(store):
    first = store.remember("The refund for order A-8812 was issued on Monday")
    again = store.remember("The refund for order A-8812 was issued on Monday.")
    other = store.remember("Order A-8812 ships to Berlin")
    assert again.id == first.id
    assert other.id != first.id
    assert store.count() == 2


def test_a_batch_finds_duplicates_in_itself_and_in_the_store(store):
    """A batch inserts its new memories together: a duplicate of one written
    before, or of an earlier item of the same batch, still updates it."""
    old = store.remember("The refund for order A-8812 was issued on Monday")
    plain = store.remember("staging runs on three nodes")
    batch = store.remember_many(
        [
            "The refund for order A-8812 was issued on Monday.",  # the stored one, by entity
            "deploys go out on Tuesdays",
            "ticket PAY-77 is about the ledger export",
            "Deploys go out on   TUESDAYS",  # the second item, by text
            {"text": "Ticket PAY-77 is about the ledger export.", "importance": 0.9},  # the third, by entity
            "STAGING runs on three nodes",  # stored, by text
            "a new note about the cache",
        ]
    )
    ids = [m.id for m in batch]
    assert ids[0] == old.id
    assert ids[5] == plain.id
    assert ids[3] == ids[1]
    assert ids[4] == ids[2]
    assert len({ids[1], ids[2], ids[6], old.id, plain.id}) == 5
    assert store.count() == 5
    assert store.get(ids[2]).importance == 0.9
    assert store.get(ids[2]).access_count == 1
    assert store.get(old.id).text.endswith("Monday.")
    assert store.search("PAY-77", k=1)[0].memory.id == ids[2]
    assert store.search("cache note", k=1)[0].memory.id == ids[6]
    assert store.integrity() == "ok"


def test_kinds_filter_and_namespaces_are_apart(store):
    store.remember("deploy with make release", kind="procedural", namespace="u1")
    store.remember("deploy happened on 2026-11-30", kind="episodic", namespace="u1")
    store.remember("deploy with make release", kind="procedural", namespace="u2")
    hits = store.search("deploy", namespace="u1", kinds=["episodic"])
    assert [h.memory.kind for h in hits] == ["episodic"]
    assert store.delete(namespace="u1") == 2
    assert store.search("deploy", namespace="u1") == []
    assert len(store.search("deploy", namespace="u2")) == 1


def test_max_tokens_returns_whole_memories_within_the_budget(store):
    tok = Tokenizer("o200k_base")
    for i in range(6):
        store.remember(f"fact {i}: the staging database port is {5400 + i} on host db{i}.internal")
    hits = store.search("staging database port", k=8, max_tokens=40)
    assert hits
    assert sum(tok.count(h.text) for h in hits) <= 40
    assert len(hits) < 6


def test_a_returned_memory_is_counted_through_the_shared_cache(store):
    """Within ``max_tokens``, a memory's count is read from the shared count
    cache when a later search returns it again: the same choice, no new
    count."""
    tok = Tokenizer("o200k_base")
    for i in range(6):
        store.remember(f"fact {i}: the staging database port is {5400 + i} on host db{i}.internal")
    first = store.search("staging database port", k=8, max_tokens=40)
    before = tok.cache_info()
    again = store.search("staging database port", k=8, max_tokens=40)
    after = tok.cache_info()
    assert [h.memory.id for h in again] == [h.memory.id for h in first]
    assert after.misses == before.misses
    assert after.hits >= before.hits + len(again)


def test_the_built_in_embedders_rows_are_taken_as_they_come(tmp_path):
    """The hashing embedder's rows are already unit length (or zero) and
    finite: the store takes them unchanged, a width it does not hold is
    still refused."""
    texts = ["the staging database port", "", "订单已退款"]
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as store:
        store.remember("a first memory sets the width")
        rows = store._embed(texts)
        assert rows.dtype == np.float32
        assert rows.shape == (3, 64)
        assert np.array_equal(rows, HashingEmbedder(64).embed(texts))
        assert np.allclose(np.linalg.norm(rows, axis=1), [1.0, 0.0, 1.0], atol=1e-6)
        store.embedder = HashingEmbedder(32)
        with pytest.raises(EmbeddingError, match="this store holds 64"):
            store._embed(texts)
    # A crafted file's width of 0 is a width, not "none yet": still refused.
    db = sqlite3.connect(tmp_path / "m.db")
    with db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'dim'")
    db.close()
    with (
        MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as store,
        pytest.raises(EmbeddingError, match="this store holds 0"),
    ):
        store.remember("a second memory")


def test_only_the_built_in_embedders_long_queries_are_cut(tmp_path, monkeypatch):
    """The scan reads a long sparse query's largest terms only where that
    was measured to keep the best: for the hashing embedder; any other
    embedder's queries are scanned whole."""
    import context_core.memory_store.vectors as vectors

    asked: list[bool] = []
    nearest = vectors.NamespaceVectors.nearest

    def recording(self, query, k, *, quantise_from, kinds=None, cut=False):
        asked.append(cut)
        return nearest(self, query, k, quantise_from=quantise_from, kinds=kinds, cut=cut)

    monkeypatch.setattr(vectors.NamespaceVectors, "nearest", recording)
    hashing = HashingEmbedder(32)
    for name, embedder in (("hashing", hashing), ("callable", CallableEmbedder(hashing.embed))):
        with MemoryStore(tmp_path / f"{name}.db", embedder=embedder) as store:
            store.remember("the staging database port is 5432")
            store.search("which port does staging use")
    assert asked == [True, False]


def test_a_tokenizer_that_is_not_one_is_refused(tmp_path):
    with pytest.raises(InvalidTypeError, match="tokenizer must be a Tokenizer, not str"):
        MemoryStore(tmp_path / "m.db", tokenizer="o200k_base")  # type: ignore[arg-type]


def _counts_written(store: MemoryStore) -> bool:
    """Whether the store's own thread wrote the counts a search made due
    (waited for, within a bound)."""
    for _ in range(6000):
        if not store._accesses:
            return True
        time.sleep(0.005)
    return False


def test_access_counts_are_written_together_and_never_lost_by_close(tmp_path, clock):
    """A search keeps its access counts in memory: the same store reads
    them at once, another sees them after the next write, a flush, the
    clock passing ACCESS_FLUSH_SECONDS (written by the store's own thread),
    or close."""
    path = tmp_path / "m.db"
    with (
        MemoryStore(path, embedder=HashingEmbedder(64), clock=clock) as a,
        MemoryStore(path, embedder=HashingEmbedder(64), clock=clock) as b,
    ):
        m = a.remember("the refund for order A-8812 was issued")
        first = a.search("A-8812")[0].memory
        assert first.access_count == 1
        assert a.search("A-8812")[0].memory.access_count == 2
        assert a.get(m.id).access_count == 2
        assert b.get(m.id).access_count == 0  # not written yet
        a.remember("an unrelated note about the cache")  # a write carries them
        assert b.get(m.id).access_count == 2
        a.search("A-8812")
        clock.now += ACCESS_FLUSH_SECONDS
        a.search("A-8812")  # the clock has passed: written now, by the store's thread
        assert _counts_written(a)
        assert b.get(m.id).access_count == 4
        assert b.get(m.id).last_access == clock.now
        a.search("A-8812")
        a.flush()
        assert b.get(m.id).access_count == 5
        a.search("A-8812")
    with MemoryStore(path, embedder=HashingEmbedder(64), clock=clock) as c:
        assert c.get(m.id).access_count == 6  # close wrote the last one


def test_a_full_batch_of_accesses_is_written(tmp_path, clock):
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=clock) as s:
        s.remember_many([f"ticket T-{i:03d} is about invoice export" for i in range(ACCESS_FLUSH_MEMORIES)])
        for i in range(ACCESS_FLUSH_MEMORIES):
            s.search(f"T-{i:03d}", k=1)
        assert _counts_written(s)  # written once the batch was full
        counts = [c for (c,) in s._db.execute("SELECT access_count FROM memories")]
        assert sorted(counts) == [1] * ACCESS_FLUSH_MEMORIES


def test_a_search_leaves_the_counts_write_to_the_stores_thread(tmp_path, clock):
    """A search that makes the counts due does not write them itself (a
    server whose turns are seconds apart would pay that write in each)."""
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=clock) as s:
        m = s.remember("ticket PAY-77 is about the ledger export")
        writers: list[threading.Thread] = []
        write = s._write

        def recorded(work):
            writers.append(threading.current_thread())
            return write(work)

        s._write = recorded
        for _ in range(3):
            s.search("PAY-77")  # pending: not due yet
            clock.now += ACCESS_FLUSH_SECONDS
            s.search("PAY-77")  # due
            assert _counts_written(s)
        assert len(writers) == 3
        assert threading.current_thread() not in writers
        assert s.get(m.id).access_count == 6
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as again:
        assert again.get(m.id).access_count == 6


def test_the_counts_thread_does_not_wait_for_a_busy_database(tmp_path, clock):
    """The store's thread tries its write once, without SQLite's busy wait:
    with another writer holding the database it gives up at once (the
    counts stay pending), and writes them the next time they are due."""
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(64), clock=clock, busy_timeout=3600.0) as s:
        m = s.remember("ticket PAY-77 is about the ledger export")
        tried = threading.Event()
        attempt = s._write_counts_now

        def recorded() -> None:
            attempt()
            tried.set()

        s._write_counts_now = recorded
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process is writing
        try:
            s.search("PAY-77")
            clock.now += ACCESS_FLUSH_SECONDS
            s.search("PAY-77")  # due, and the database is busy
            assert tried.wait(60)  # it gave up (waiting it out would take an hour)
            assert s._accesses  # still pending
        finally:
            other.execute("ROLLBACK")
            other.close()
        tried.clear()
        clock.now += ACCESS_FLUSH_SECONDS
        s.search("PAY-77")  # due again: the thread is still there, and writes them
        assert tried.wait(60)
        assert _counts_written(s)
    with MemoryStore(path, embedder=HashingEmbedder(64)) as again:
        assert again.get(m.id).access_count == 3


def test_a_forked_childs_copy_writes_none_of_its_parents_counts(tmp_path, clock):
    """A child that inherits a store and never uses it leaves the counts
    to its parent: neither its close nor its exit writes them again."""
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=clock) as s:
        m = s.remember("ticket PAY-77 is about the ledger export")
        s.search("PAY-77")  # pending in the parent
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            s.close()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert s.get(m.id).access_count == 1
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as again:
        assert again.get(m.id).access_count == 1  # written once, by the parent


def test_closing_ends_the_counts_thread(tmp_path, clock):
    s = MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=clock)
    s.remember("ticket PAY-77 is about the ledger export")
    clock.now += ACCESS_FLUSH_SECONDS
    s.search("PAY-77")
    clock.now += ACCESS_FLUSH_SECONDS
    s.search("PAY-77")
    writer = s._counts_writer
    assert writer is not None
    s.close()
    assert not writer.is_alive()
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as again:
        assert again.search("PAY-77")[0].memory.access_count == 3  # both, and this one


def _forked_while_writing(s: MemoryStore) -> int:
    """The exit status of a child forked while another thread uses the
    store's connection under its lock (as its counts' thread, or a
    session's memory writes, do): 0 if the fork waited for the write."""
    holding, done = threading.Event(), []

    def writing() -> None:
        with s._lock:
            holding.set()
            s._db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            time.sleep(0.2)
            done.append(True)

    writer = threading.Thread(target=writing)
    writer.start()
    holding.wait()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if done else 1)
    _, status = os.waitpid(pid, 0)
    writer.join()
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_fork_waits_for_the_counts_thread_to_leave_sqlite(tmp_path, clock):
    """A child forked while the store's thread writes would inherit
    SQLite's process-wide mutexes held by a thread it does not have, and
    hang in its first SQLite call: a fork waits for the store's lock,
    under which that thread writes."""
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=clock) as s:
        s.remember("ticket PAY-77 is about the ledger export")
        s.search("PAY-77")
        clock.now += ACCESS_FLUSH_SECONDS
        s.search("PAY-77")
        assert _counts_written(s)  # its thread has started
        assert _forked_while_writing(s) == 0  # forked only once the write was done


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_fork_waits_for_a_write_to_a_store_never_searched(tmp_path):
    """A session's memory writes run on a thread of their own, into a store
    that may never have searched: a fork waits for that write too."""
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as s:
        assert _forked_while_writing(s) == 0


def test_forgetting_counts_accesses_not_yet_written(store, clock):
    m = store.remember("a note", importance=0.3)
    clock.now += 60 * DAY
    threshold = store.forget(1.0).candidates[0][1] * 1.5
    for _ in range(5):
        store.search("a note")
    assert store.forget(threshold).candidates == ()  # five accesses raise its retention
    assert store.get(m.id).access_count == 5


def test_a_rowid_freed_in_one_namespace_never_leaks_into_another(store):
    """A deleted memory's rowid can come back in another namespace: the
    first namespace's vectors must let it go, not find the new memory."""
    kept, newest = store.remember_many(
        ["alice likes green tea", "alice account number is 4417"], namespace="alice"
    )
    assert store.search("alice account", namespace="alice")[0].memory.id == newest.id
    store.delete(newest.id)
    store.remember_many(["bob password hint is rosebud"], namespace="bob")
    found = store.search("password hint", namespace="alice")
    assert [h.memory.namespace for h in found] == ["alice"]
    assert [h.memory.id for h in found] == [kept.id]


def test_close_is_idempotent_and_an_unclosed_store_writes_its_counts_at_exit(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(64)) as s:
        m = s.remember("the refund for order A-8812 was issued")
    s.close()  # again: nothing
    script = (
        "from context_core import MemoryStore\n"
        "from context_core.memory_store import HashingEmbedder\n"
        f"s = MemoryStore({str(path)!r}, embedder=HashingEmbedder(64))\n"
        "for _ in range(5): s.search('A-8812')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    with MemoryStore(path, embedder=HashingEmbedder(64)) as s:
        assert s.get(m.id).access_count == 5


def test_a_busy_database_keeps_the_counts_pending_and_search_answers(tmp_path, clock):
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(64), clock=clock, busy_timeout=0.05) as s:
        m = s.remember("ticket PAY-77 is about the ledger export")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            clock.now += ACCESS_FLUSH_SECONDS
            assert s.search("PAY-77")[0].memory.id == m.id  # the flush is due, and busy
            assert s.get(m.id).access_count == 1
        finally:
            other.execute("ROLLBACK")
            other.close()
        s.flush()
    with MemoryStore(path, embedder=HashingEmbedder(64)) as s:
        assert s.get(m.id).access_count == 1


def test_a_new_store_another_connection_holds_waits_for_it(tmp_path, clock):
    """Two server workers creating one store at boot: switching the new
    file to WAL, SQLite answered "locked" at once, without waiting, while
    the other held it, and one worker failed with StoreBusyError after a
    few milliseconds of a 10 s busy_timeout. It waits now, up to that."""

    def held(path):  # the other worker, making its tables in a file still in rollback mode
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("CREATE TABLE boot (x)")
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO boot VALUES (1)")
        return other

    other = held(tmp_path / "m.db")
    timer = threading.Timer(0.2, lambda: other.execute("COMMIT"))
    timer.start()
    try:
        with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=clock, busy_timeout=10) as s:
            assert s.remember("booted").text == "booted"
    finally:
        timer.join()
        other.close()
    other = held(tmp_path / "n.db")
    try:
        with pytest.raises(StoreBusyError):  # held past the timeout: said, not waited on for good
            MemoryStore(tmp_path / "n.db", embedder=HashingEmbedder(64), clock=clock, busy_timeout=0.05)
    finally:
        other.close()


def test_search_counts_accesses(store, clock):
    m = store.remember("Bob's handle is @bob_k")
    clock.now += 100
    store.search("@bob_k")
    again = store.get(m.id)
    assert again.access_count == 1
    assert again.last_access == clock.now


def test_forgetting_spares_pinned_and_important_memories(store, clock):
    old = store.remember("an old passing remark about the weather", importance=0.2)
    pinned = store.remember("the production region is eu-west-1", importance=0.2, pinned=True)
    important = store.remember("never force-push to main", importance=0.9)
    clock.now += 365 * DAY
    fresh = store.remember("a new remark about lunch", importance=0.2)
    report = store.forget(0.05)
    assert [mid for mid, _ in report.candidates] == [old.id]
    assert not report.purged
    assert store.count() == 4
    done = store.forget(0.05, dry_run=False)
    assert done.purged
    assert store.get(old.id) is None
    for kept in (pinned, important, fresh):
        assert store.get(kept.id) is not None
    assert store.search("weather remark") == [] or all(
        h.memory.id != old.id for h in store.search("weather remark")
    )


def test_bad_input_is_refused_and_nothing_is_written(tmp_path):
    calls = []

    def embed(texts):
        calls.append(texts)
        if texts == ["nan please"]:
            return np.full((1, 8), np.nan, dtype=np.float32)
        if texts == ["wide please"]:
            return np.ones((1, 9), dtype=np.float32)
        if texts == ["raise please"]:
            raise RuntimeError("model down")
        return np.ones((len(texts), 8), dtype=np.float32)

    with MemoryStore(tmp_path / "m.db", embedder=CallableEmbedder(embed)) as s:
        s.remember("a first memory")
        for text, error in [
            ("nan please", EmbeddingError),
            ("wide please", EmbeddingError),
            ("raise please", EmbeddingError),
        ]:
            with pytest.raises(error):
                s.remember(text)
        with pytest.raises(EmbeddingError) as caught:
            s.remember("wide please")
        assert caught.value.expected == 8
        assert caught.value.got == (1, 9)
        with pytest.raises(InvalidTypeError):
            s.remember(42)
        with pytest.raises(InvalidInputError):
            s.remember("x", kind="feelings")
        with pytest.raises(InvalidInputError):
            s.remember("x", importance=float("nan"))
        with pytest.raises(InvalidInputError):
            s.remember("   ")
        with pytest.raises(InvalidInputError):
            s.remember("lone \ud800 surrogate")
        with pytest.raises(InvalidTypeError):
            s.remember_many(["fine", 3])
        with pytest.raises(InvalidInputError):
            s.search("x", k=0)
        assert s.count() == 1
        assert s.integrity() == "ok"


def test_search_terms_split_chinese_into_pairs():
    assert search_terms("订单A-8812已退款") == "订单 a 8812 已退 退款"


def test_search_terms_split_japanese_kana_into_pairs():
    """Japanese puts no space between words either: a kana run was one
    word, so ``ローテーション`` never matched ``ログのローテーション``."""
    written = "ログのローテーションを設定"
    assert search_terms(written) == "ログ グの のロ ロー ーテ テー ーシ ショ ョン ンを を設 設定"
    assert search_terms("ﾛｸﾞ・ｶﾀ") == "ﾛｸ ｸﾞ ｶﾀ"  # half width; the middle dot breaks the run
    assert set(search_terms("ローテーション").split()) <= set(search_terms(written).split())


def test_a_japanese_memory_is_found_by_a_word_inside_its_text(tmp_path):
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(256)) as s:
        s.remember_many(
            ["ログのローテーションは毎週月曜日に行う", "デプロイは金曜日に行わない", "注文A-1は返金済み"]
            + [f"メモ{i}: 会議は午後{i % 12}時から" for i in range(30)]
        )
        hit = s.search("ローテーション", k=1)[0]
        assert hit.text == "ログのローテーションは毎週月曜日に行う"
        assert "keyword" in hit.reasons


_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_KANA = "\u3040-\u30ff\uff66-\uff9f"


def _terms_by_regex(text: str, paired: str = _HAN + _KANA) -> str:
    """The definition: lowered word characters (no ``_``), each run of a
    word in the ``paired`` scripts (Chinese characters and Japanese kana)
    cut into overlapping pairs."""
    out = []
    for word in re.findall(r"[^\W_]+", text.lower()):
        for part in re.split(f"([{paired}]+)", word):
            if re.fullmatch(f"[{paired}]+", part):
                out += [part] if len(part) == 1 else [part[i : i + 2] for i in range(len(part) - 1)]
            elif part:
                out.append(part)
    return " ".join(out)


@settings(max_examples=400, deadline=None)
@given(
    st.text(
        st.sampled_from("aZ09_-./ \t\n日志轮转中文\ufa6e\ufa0eéİΣςログのー・ｶﾞ\u309b\u30a0")
        | st.characters(codec="utf-8"),
        max_size=40,
    )
)
def test_search_terms_match_their_definition_on_any_text(text):
    """The ASCII fast path and the Chinese and kana pairs give what the
    plain regex definition gives, on ASCII and on any other text."""
    assert search_terms(text) == _terms_by_regex(text)


def _writer(path: str, worker: int, count: int, queue) -> None:
    with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
        done = []
        for i in range(count):
            m = s.remember(f"worker {worker} note {i}: ticket W{worker}-{i:04d} handled", namespace="shared")
            s.search(f"ticket W{worker}-{i:04d}", namespace="shared", k=2)
            done.append(m.id)
        queue.put(done)


def test_eight_processes_write_and_search_one_store(tmp_path):
    path = str(tmp_path / "m.db")
    MemoryStore(path, embedder=HashingEmbedder(32)).close()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_writer, args=(path, w, 25, queue)) for w in range(8)]
    for w in workers:
        w.start()
    acknowledged = [mid for _ in workers for mid in queue.get(timeout=120)]
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
        assert s.count("shared") == len(acknowledged) == 200
        ids = [row[0] for row in s._db.execute("SELECT id FROM memories")]
        assert sorted(ids) == sorted(acknowledged)
        hit = s.search("ticket W3-0017", namespace="shared", k=1)[0]
        assert hit.text == "worker 3 note 17: ticket W3-0017 handled"
        assert s.integrity() == "ok"


RACED = [f"the user prefers deploys on Tuesdays, ticket R-{i:03d}" for i in range(30)]


def _racer(path: str, worker: int, queue) -> None:
    import random

    order = list(RACED)
    random.Random(worker).shuffle(order)
    with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
        queue.put([s.remember(text, namespace="race").id for text in order])


def test_processes_racing_the_same_texts_keep_one_memory_each(tmp_path):
    """Four processes remember the same 30 texts in different orders: the
    duplicate check and the write are one transaction, so each text is
    stored once, every process is given that one id, and each repeat
    counts one access (none lost)."""
    path = str(tmp_path / "m.db")
    MemoryStore(path, embedder=HashingEmbedder(32)).close()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_racer, args=(path, w, queue)) for w in range(4)]
    for w in workers:
        w.start()
    answers = [queue.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
        query = "SELECT id, text, access_count FROM memories WHERE namespace = 'race'"
        rows = s._db.execute(query).fetchall()
        assert sorted(text for _, text, _ in rows) == sorted(RACED)
        assert {mid for answer in answers for mid in answer} == {mid for mid, _, _ in rows}
        assert [count for _, _, count in rows] == [3] * len(RACED)
        assert s.integrity() == "ok"


def _updates(path: str, report_fd: int) -> None:
    import os

    with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
        for i in range(1_000_000):
            # After the first round each of these updates its duplicate.
            s.remember(RACED[i % len(RACED)], namespace="race")
            s.remember(f"new memory {i}: order N-{i}", namespace="race")
            os.write(report_fd, i.to_bytes(8, "little"))


def test_a_writer_killed_while_updating_duplicates_loses_nothing(tmp_path):
    path = str(tmp_path / "m.db")
    MemoryStore(path, embedder=HashingEmbedder(32)).close()
    for after in (0.3, 0.5):
        acknowledged = reports_until_killed(lambda fd: _updates(path, fd), after)
        with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
            assert s.integrity() == "ok"
            texts = [row[0] for row in s._db.execute("SELECT text FROM memories")]
            assert len(texts) == len(set(texts))  # no update became a second copy
            for i in acknowledged:
                assert f"new memory {i}: order N-{i}" in texts
            assert set(RACED[: min(len(RACED), len(acknowledged))]) <= set(texts)


def _remembers(path: str, report_fd: int) -> None:
    import os

    with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
        for i in range(1_000_000):
            s.remember_many([f"batch {i} item {j}: order K-{i}-{j}" for j in range(5)])
            os.write(report_fd, i.to_bytes(8, "little"))


def test_a_killed_writer_loses_nothing_it_acknowledged(tmp_path):
    path = str(tmp_path / "m.db")
    MemoryStore(path, embedder=HashingEmbedder(32)).close()
    for after in (0.3, 0.45, 0.6):
        acknowledged = reports_until_killed(lambda fd: _remembers(path, fd), after)
        with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
            assert s.integrity() == "ok"
            texts = {row[0] for row in s._db.execute("SELECT text FROM memories")}
            for i in acknowledged:
                for j in range(5):
                    assert f"batch {i} item {j}: order K-{i}-{j}" in texts
            # whole batches only: every batch is all there or not at all
            batches = {}
            for t in texts:
                batches.setdefault(t.split(" item ")[0], 0)
                batches[t.split(" item ")[0]] += 1
            assert set(batches.values()) <= {5}
        assert acknowledged


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "m.db"
    MemoryStore(path, embedder=HashingEmbedder(8)).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(StoreVersionError) as caught:
        MemoryStore(path, embedder=HashingEmbedder(8))
    assert isinstance(caught.value, ContextCoreError)
    assert isinstance(caught.value, sqlite3.DatabaseError)
    assert caught.value.found == 99
    assert caught.value.supported >= 3
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 99  # refused, not written
    db.close()


def test_migrating_a_version_1_store_fills_what_later_versions_keep(tmp_path):
    """Version 2 adds per-term document counts, version 3 the entity
    digests, version 4 the namespace tags of indexed words and version 5
    the table of memories whose access counts were written; a store written before
    them gets all of them from what it holds, the same values as writes
    keep."""
    from context_core.memory_store.keywords import plain_words
    from context_core.memory_store.schema import SCHEMA_VERSION

    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(16)) as s:
        s.remember_many(["refund order A-1", "refund payment", "订单已退款"], namespace="a")
        s.remember("deploy on Monday for Alice Chen", namespace="b")
        terms = sorted(s._db.execute("SELECT namespace, term, docs FROM term_docs WHERE docs > 0"))
        keys = sorted(s._db.execute("SELECT rowid, entity_key FROM memories"))
    db = sqlite3.connect(path)  # as version 1 wrote it: the indexed words without namespace tags
    for rowid, words in db.execute("SELECT rowid, words FROM terms").fetchall():
        db.execute("UPDATE terms SET words = ? WHERE rowid = ?", (plain_words(words), rowid))
    db.execute("DROP TABLE term_docs")
    db.execute("DROP INDEX memories_by_entities")
    db.execute("ALTER TABLE memories DROP COLUMN entity_key")
    db.execute("DROP TABLE accessed")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with MemoryStore(path, embedder=HashingEmbedder(16)) as s:
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        assert sorted(s._db.execute("SELECT namespace, term, docs FROM term_docs")) == terms
        assert s._db.execute("SELECT count(*) FROM accessed").fetchone()[0] == 0
        assert sorted(s._db.execute("SELECT rowid, entity_key FROM memories")) == keys
        again = s.remember("refund order A-1.", namespace="a")
        assert again.access_count == 1  # found by its entities after the migration
    assert ("a", "", 3) in terms
    assert ("a", "refund", 2) in terms
    assert sum(key is None for _, key in keys) == 2  # "refund payment" and the Chinese one name nothing


def test_migrating_a_version_5_store_pairs_its_kana(tmp_path, monkeypatch):
    """Version 6 indexes kana runs as pairs: a store whose words were
    written before (each kana run one word) gets the words and term counts
    a new store writes, and its Japanese memories are found by a word
    inside them."""
    from context_core.memory_store import store as store_module
    from context_core.memory_store.schema import SCHEMA_VERSION

    texts = ["ログのローテーションは毎週月曜日", "デプロイは金曜日に行わない"]
    texts += ["订单已退款", "refund order A-1", "note\x00キャッシュの設定"]  # GLOB stops at a NUL

    def written(path, terms):
        with monkeypatch.context() as patched:
            patched.setattr(store_module, "search_terms", terms)
            with MemoryStore(path, embedder=HashingEmbedder(256)) as s:
                s.remember_many(texts[:2], namespace="ja")
                s.remember_many(texts[2:], namespace="other")
                s.remember("ログ・ローテーション", namespace=Namespace("t", user="u"))

    def held(path):
        db = sqlite3.connect(path)
        try:
            words = sorted(
                db.execute("SELECT m.text, t.words FROM memories AS m JOIN terms AS t ON t.rowid = m.rowid")
            )
            counts = sorted(db.execute("SELECT namespace, term, docs FROM term_docs WHERE docs > 0"))
            return words, counts
        finally:
            db.close()

    old, new = tmp_path / "old.db", tmp_path / "new.db"
    written(old, lambda text: _terms_by_regex(text, paired=_HAN))  # as version 5 wrote them
    written(new, search_terms)
    assert held(old) != held(new)
    db = sqlite3.connect(old)
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    with MemoryStore(old, embedder=HashingEmbedder(256)) as s:
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        assert "keyword" in s.search("ローテーション", namespace="ja", k=1)[0].reasons
    assert held(old) == held(new)


def test_keyword_search_leaves_out_terms_most_memories_share(tmp_path):
    from context_core.memory_store.keywords import KEYWORD_POSTINGS, match_query
    from context_core.memory_store.namespaces import space_token

    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(16)) as s:
        s.remember_many([f"common words everywhere note {i}" for i in range(KEYWORD_POSTINGS + 1)])
        s.remember("common words and a rare zebra")
        query = s._read(lambda db: match_query(db, "default", "common zebra"))
        assert query == f'"{space_token("default")}zebra"'
        assert s._read(lambda db: match_query(db, "default", "common words")) is None
        hit = s.search("zebra", k=1)[0]
        assert "keyword" in hit.reasons
        assert hit.text == "common words and a rare zebra"
        s.delete(hit.memory.id)
        docs = dict(s._db.execute("SELECT term, docs FROM term_docs WHERE term IN ('zebra', '')"))
        assert docs == {"zebra": 0, "": KEYWORD_POSTINGS + 1}


def test_preload_reads_a_namespaces_vectors_once_so_the_first_search_does_not(store, monkeypatch):
    from context_core.memory_store.vectors import NamespaceVectors

    store.preload()  # nothing stored yet: no width, nothing to read
    assert store._vectors == {}
    store.remember_many([f"order ord_{i} was refunded on day {i}" for i in range(40)])
    store.remember("the deploy runs on Mondays", namespace="ops")
    loads = []
    real = NamespaceVectors._load
    monkeypatch.setattr(
        NamespaceVectors, "_load", lambda self, db: (loads.append(self.namespace), real(self, db))
    )
    store.preload(namespace=["default", "ops"])
    assert sorted(loads) == ["default", "ops"]
    assert len(store._vectors["default"]) == 40
    assert len(store._vectors["ops"]) == 1
    hits = store.search("which order was refunded on day 7", k=3)
    assert "ord_7" in hits[0].memory.text
    store.search("the deploy", namespace="ops")
    assert sorted(loads) == ["default", "ops"], "a search after preload reads only what changed"
    store.remember("order ord_99 was refunded late")  # a later write: synced, not reloaded
    assert "ord_99" in store.search("ord_99 refunded", k=1)[0].memory.text
    assert sorted(loads) == ["default", "ops"]
    with pytest.raises(InvalidTypeError):
        store.preload(namespace=3)


def test_a_namespace_loaded_in_batches_holds_what_one_batch_does(tmp_path, monkeypatch):
    import context_core.memory_store.vectors as vectors

    texts = [f"invoice INV-{i:04d} was paid by card on day {i}" for i in range(23)]
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as writer:
        writer.remember_many(texts)
    found = {}
    for batch in (3, 8192):
        monkeypatch.setattr(vectors, "_LOAD_BATCH", batch)
        with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as store:
            store.preload()
            held = store._vectors["default"]
            assert len(held) == len(texts)
            assert held.position == {rowid: i for i, rowid in enumerate(held.rowids)}
            queries = store._embed([f"paid on day {day}" for day in (0, 11, 22)])
            found[batch] = (
                held.rowids,
                [held.nearest(q, 8, quantise_from=0) for q in queries],  # the int8 scan and its rescore
                [held.nearest(q, 8, quantise_from=10**9) for q in queries],  # exact
            )
    assert found[3] == found[8192]


def test_search_texts_read_the_texts_another_store_wrote_updated_and_deleted(tmp_path):
    """``search_texts`` answers from the texts its held index keeps (no row
    of the file read): after another store on the file rewrote, deleted
    and added memories, those texts are the file's, moved with the rows a
    delete moves, and a search finds the rewritten text, not the old."""
    from memory_corpus import corpus

    texts = corpus(41, seed=8, queries=0).texts
    path = tmp_path / "m.db"
    writer = MemoryStore(path, embedder=HashingEmbedder(64))
    reader = MemoryStore(path, embedder=HashingEmbedder(64))
    try:
        ids = [m.id for m in writer.remember_many(texts[:40])]
        assert len(set(ids)) == 40
        assert reader.search_texts(texts[7], k=1) == [texts[7]]
        assert writer.remember(texts[7].upper()).id == ids[7]  # the same text key: rewritten
        for gone in ids[:5]:  # each moves the last held row into its place
            writer.delete(gone)
        writer.remember(texts[40])
        assert reader.search_texts(texts[7], k=1) == [texts[7].upper()]
        assert reader.search_texts(texts[40], k=1) == [texts[40]]
        assert reader.search_texts(texts[39], k=1) == [texts[39]]  # moved by a delete
        held = reader._vectors["default"]
        on_file = dict(sqlite3.connect(path).execute("SELECT rowid, text FROM memories").fetchall())
        assert dict(zip(held.rowids, held.texts, strict=True)) == on_file
        assert len(on_file) == 36
    finally:
        writer.close()
        reader.close()


@pytest.mark.parametrize(("k", "max_tokens"), [(1, None), (8, None), (8, 300), (5, 60)])
def test_search_texts_are_what_search_returns_with_the_same_accesses(tmp_path, k, max_tokens):
    """Two stores written alike, one asked by ``search`` and one by
    ``search_texts`` in step: the same texts each time, so the accesses
    they count (which move later rankings) are the same too."""
    from memory_corpus import corpus

    data = corpus(400, seed=5, queries=30)
    clocks = Clock(), Clock()
    stores = [
        MemoryStore(tmp_path / f"{i}.db", embedder=HashingEmbedder(64), clock=clocks[i]) for i in range(2)
    ]
    try:
        for s in stores:
            s.remember_many(
                [{"text": t, "kind": kind} for t, kind in zip(data.texts, data.kinds, strict=True)]
            )
            s.remember("Carol wants refunds in euros", namespace="carol")
        queries = [q for q, _ in data.entity_queries + data.paraphrase_queries]
        returned = 0
        for n, query in enumerate(queries * 2):
            for c in clocks:
                c.now += 3_600
            kinds = ("episodic", "procedural") if n % 5 == 0 else None
            namespace = ("default", "carol") if n % 7 == 0 else "default"
            asked = {"k": k, "max_tokens": max_tokens, "kinds": kinds, "namespace": namespace}
            hits = stores[0].search(query, **asked)
            texts = stores[1].search_texts(query, **asked)
            assert texts == [hit.memory.text for hit in hits]
            returned += len(texts)
        assert returned >= (1 if max_tokens is not None else 2 * len(queries))
        for s in stores:
            s.flush()
        counts = [
            sorted((m.text, m.access_count, m.last_access) for m in (s.get(i) for i in _ids(s)))
            for s in stores
        ]
        assert counts[0] == counts[1]
        assert sum(count for _, count, _ in counts[0]) == returned
    finally:
        for s in stores:
            s.close()


def _ids(store: MemoryStore) -> list[str]:
    return [row[0] for row in store._db.execute("SELECT id FROM memories").fetchall()]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            "Refunded orders A-8812,A-8813 after the retry job failed",
            "Refunded orders A-8812,A-8814 after the retry job failed",
        ),
        (
            "PR #4521 fixed the cache race in the session store",
            "PR #4522 fixed the cache race in the session store",
        ),
        (
            "The invoice is in report_2024_q1.pdf on the shared drive",
            "The invoice is in report_2024_q2.pdf on the shared drive",
        ),
        (
            "Pin the base image to nginx:1.25 in the Dockerfile",
            "Pin the base image to nginx:1.27 in the Dockerfile",
        ),
        (
            "Merge feature/login into main before the freeze",
            "Merge feature/signup into main before the freeze",
        ),
    ],
)
def test_memories_naming_other_values_are_never_merged(store, first, second):
    """Near duplicates by cosine were merged, and the first lost, when the
    values they differ in are ones the entity extractor does not read (ids
    joined by a comma, ``#4521``, a .pdf, an image tag, a branch)."""
    a, b = store.remember(first), store.remember(second)
    assert a.id != b.id
    assert store.get(a.id).text == first
    assert store.get(b.id).text == second
    assert store.count() == 2
    c = store.remember(first.upper())  # the same text again is still the same memory
    assert c.id == a.id
    again = store.remember_many([second, first])
    assert {m.id for m in again} == {a.id, b.id}


def test_a_memory_a_rare_entity_found_also_counts_the_common_one(tmp_path):
    """A memory found by a rare entity was never checked for the common one
    the query named too: it ranked below a memory naming only the common
    one, and its hit listed one entity of two."""
    store = MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder())
    store.remember_many([f"note {i}: the billing job runs on AWS in region {i % 5}" for i in range(300)])
    rare = store.remember("Service Z-1 is hosted on AWS", importance=0.1)
    store.remember("How to deploy to AWS: run the deploy script", importance=1.0)
    hits = store.search("deploy Z-1 to AWS", k=3)
    assert hits[0].memory.id == rare.id
    assert set(hits[0].entities) == {"z-1", "aws"}
    store.close()


def test_bad_arguments_and_a_closed_store_raise_the_librarys_errors(tmp_path):
    """remember_many of a str stored it a character at a time (of a dict,
    its keys); a kind that is not a str, or half_life_days that is not a
    number, raised a bare TypeError; a closed store raised sqlite3's
    ProgrammingError, or a StoreStorageError that read as a disk fault."""
    from context_core import StoreClosedError

    store = MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64))
    for items in ("deploy-freeze", {"text": "User prefers tabs"}, b"bytes"):
        with pytest.raises(InvalidTypeError, match="items must be a list"):
            store.remember_many(items)  # type: ignore[arg-type]
    assert store.count() == 0
    with pytest.raises(InvalidTypeError, match="kinds must be kind names"):
        store.search("q", kinds=[[1]])  # type: ignore[list-item]
    for bad in ("x", None, 0, float("nan")):
        with pytest.raises(InvalidInputError, match="half_life_days"):
            store.forget(0.1, half_life_days=bad)  # type: ignore[arg-type]
    store.remember("the deploy key is in ops/rotate.md")
    store.close()
    for call in (
        lambda: store.search("deploy key"),
        lambda: store.search_texts("deploy key"),
        lambda: store.remember("more"),
        lambda: store.count(),
        lambda: store.integrity(),
        lambda: store.forget(0.1),
    ):
        with pytest.raises(StoreClosedError, match="closed"):
            call()
    assert issubclass(StoreClosedError, ContextCoreError)
    assert issubclass(StoreClosedError, ValueError)


def test_counts_a_search_keeps_are_written_within_seconds_with_no_later_call(tmp_path):
    """The counts of a store's last search stayed in memory while it sat
    idle (written only at its next search, write or close), so another
    process's forget judged a memory just used by its old counts."""
    path = tmp_path / "m.db"
    agent = MemoryStore(path, embedder=HashingEmbedder(64))
    memory = agent.remember("Deploy key rotation runbook lives in ops/rotate.md")
    agent.search_texts("key rotation runbook")
    other = MemoryStore(path, embedder=HashingEmbedder(64))
    deadline = time.monotonic() + 30
    while other.get(memory.id).access_count < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert other.get(memory.id).access_count == 1  # found once
    other.close()
    agent.close()


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Deploy uses nginx:1.25 on port 8080", "On port 8080, deploy uses nginx:1.25"),
        (
            "PR #4521 fixed the cache race in the session store",
            "PR #4521 fixed the cache race in the session store (see #4521)",
        ),
        ("用户喜欢深色主题，版本2", "用户喜欢深色主题，版本2。"),
    ],
)
def test_near_duplicates_naming_the_same_values_still_merge(store, first, second):
    """Found by a review of the guard above: compared as a list, with every
    word holding a mark inside, it kept apart what names the same values in
    another order, twice, or with Chinese punctuation."""
    assert store.remember(first).id == store.remember(second).id


def test_a_search_reads_changes_only_after_a_write(tmp_path, clock, monkeypatch):
    """A held index is synced when the file moved since (another
    connection's commit, or one of this store's own writes), and not read
    again otherwise: a session's every turn searches an unchanged store."""
    from context_core.memory_store.vectors import NamespaceVectors

    synced = []
    sync = NamespaceVectors.sync
    monkeypatch.setattr(
        NamespaceVectors, "sync", lambda self, db: (synced.append(self.namespace), sync(self, db))[1]
    )
    path = tmp_path / "m.db"
    with (
        MemoryStore(path, embedder=HashingEmbedder(64), clock=clock) as reader,
        MemoryStore(path, embedder=HashingEmbedder(64), clock=clock) as writer,
    ):
        reader.remember("a note of another user", namespace="other")
        reader.search("note", namespace="other")  # held, and not searched again below
        reader.flush()
        reader.remember("ticket PAY-77 is about the ledger export")
        reader.search("ledger")
        before = len(synced)
        reader.search("ledger")
        reader.search("export")
        assert len(synced) == before  # nothing moved: nothing read
        writer.remember("ticket PAY-78 is about the refund queue")
        assert reader.search("PAY-78 refund")[0].memory.text.startswith("ticket PAY-78")
        assert len(synced) == before + 1  # the other connection's commit
        reader.flush()  # a write of its own the index has not seen (the access counts)
        assert reader.search("PAY-77")[0].memory.access_count >= 1
        assert len(synced) == before + 2
        # Counts its own thread writes, it reads back itself (for the
        # namespace they are of only): not the next search.
        clock.now += ACCESS_FLUSH_SECONDS
        reader.search("PAY-77")
        assert _counts_written(reader)
        with reader._lock:  # the thread's write and read done
            written = len(synced)
        assert synced[before + 2 :] == ["default"]
        reader.search("ledger")
        assert len(synced) == written
