"""The vector scan started ahead of its search: on a worker thread while the
caller goes on, with the same results as the scan run in place, never a
result of rows that changed meanwhile, and nothing of a parent's after a
fork."""

from __future__ import annotations

import os
import shutil
import threading

import numpy as np
import pytest

from context_core import InvalidInputError, InvalidTypeError, MemoryStore, Session
from context_core._core import _VectorIndex
from context_core.memory_store import HashingEmbedder
from context_core.memory_store import store as store_module
from memory_corpus import corpus

DIM = 32


def _clock() -> float:
    return 1_700_000_000.0


def _index(rng: np.random.Generator, n: int) -> _VectorIndex:
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    rows[rng.random(rows.shape) < 0.5] = 0.0
    index = _VectorIndex(DIM)
    index.extend(rows.tobytes(), bytes(int(t) for t in rng.integers(0, 3, n)))
    return index


def _query(rng: np.random.Generator) -> bytes:
    return rng.standard_normal(DIM).astype(np.float32).tobytes()


def _exit_code(pid: int) -> int:
    """The child's exit code, waited for up to 30 s (a hang guard, not a
    timing): a child still running then is killed and the test fails."""
    pause = threading.Event()
    for _ in range(30_000):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        pause.wait(0.001)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the child hung")


def _until_ready(scan) -> None:
    """Waits (bounded, as a hang guard) for the worker to finish ``scan``."""
    done = threading.Event()
    for _ in range(60_000):
        if scan.ready:
            return
        done.wait(0.001)
    raise AssertionError("the scan never finished")


@pytest.mark.parametrize("candidates", [None, 8, 40])
@pytest.mark.parametrize("mask", [None, 0b101])
@pytest.mark.parametrize("cut", [False, True])
def test_a_scan_ahead_finds_what_the_scan_in_place_does(candidates, mask, cut):
    rng = np.random.default_rng(7)
    index = _index(rng, 1_500)
    queries = [_query(rng) for _ in range(20)]
    scans = [index.top_k_ahead(q, 5, candidates, mask, cut) for q in queries]  # several in flight
    for query, scan in zip(queries, scans, strict=True):
        assert scan.result() == index.top_k(query, 5, candidates, mask, cut)


def test_readiness_can_be_asked_while_another_thread_waits():
    rng = np.random.default_rng(8)
    index = _index(rng, 5_000)
    for _ in range(20):
        scan = index.top_k_ahead(_query(rng), 3)
        waiter = threading.Thread(target=scan.result)
        waiter.start()
        while waiter.is_alive():
            assert scan.ready in (True, False)
        waiter.join()
        assert scan.ready


def test_a_result_is_given_once():
    rng = np.random.default_rng(1)
    index = _index(rng, 200)
    scan = index.top_k_ahead(_query(rng), 3)
    assert scan.result() is not None
    assert scan.ready
    assert scan.result() is None


@pytest.mark.parametrize("change", ["extend", "set", "swap_remove"])
def test_no_result_of_rows_that_changed_after_the_scan(change):
    rng = np.random.default_rng(2)
    index = _index(rng, 300)
    query = _query(rng)
    before = index.top_k(query, 4)
    scan = index.top_k_ahead(query, 4)
    _until_ready(scan)  # it read the rows as they were
    best = before[0][0]
    if change == "extend":
        index.extend((np.frombuffer(query, np.float32) * 10).tobytes())  # the new best
    elif change == "set":
        index.set(best, (-np.frombuffer(query, np.float32)).tobytes())  # the best now the worst
    else:
        index.swap_remove(best)
    assert index.top_k(query, 4) != before  # what it read is stale
    assert scan.result() is None


def test_a_scan_may_read_rows_changed_before_it_ran():
    """Rows changed while a scan waited for the worker: what it returns is
    what a scan of the rows now held finds, or nothing."""
    rng = np.random.default_rng(3)
    index = _index(rng, 2_000)
    query = _query(rng)
    for _ in range(50):
        scan = index.top_k_ahead(query, 4)
        index.extend(_query(rng))
        found = scan.result()
        assert found is None or found == index.top_k(query, 4)


@pytest.mark.parametrize(
    ("query", "error"),
    [(b"\x00" * 12, InvalidInputError), (np.full(DIM, np.nan, np.float32).tobytes(), InvalidInputError)],
)
def test_a_bad_query_is_refused_when_the_scan_starts(query, error):
    index = _index(np.random.default_rng(4), 10)
    with pytest.raises(error):
        index.top_k_ahead(query, 3)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_scans_for_itself():
    """A scan started before a fork gives the child nothing (it scans
    again); the child's own scans run on a worker of its own."""
    rng = np.random.default_rng(5)
    index = _index(rng, 500)
    query = _query(rng)
    expected = index.top_k(query, 4)
    before = index.top_k_ahead(query, 4)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            ok = before.result() is None
            ahead = [index.top_k_ahead(query, 4) for _ in range(3)]
            ok = ok and all(scan.result() == expected for scan in ahead)
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert _exit_code(pid) == 0
    assert os.read(read, 1) == b"1"
    os.close(read)
    assert before.result() == expected  # the parent's own, untouched


# -- the store ---------------------------------------------------------------


@pytest.fixture(scope="module")
def memories(tmp_path_factory):
    """3,000 memories, searched by an int8 scan (the threshold lowered)."""
    data = corpus(3_000, seed=11, queries=40)
    path = tmp_path_factory.mktemp("ahead") / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(64)) as store:
        store.remember_many([{"text": t, "kind": k} for t, k in zip(data.texts, data.kinds, strict=True)])
    return path, [q for q, _ in data.entity_queries] + data.texts[:20]


@pytest.fixture
def scanned(memories, tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "QUANTISE_FROM", 1_000)
    path, queries = memories
    shutil.copy(path, tmp_path / "m.db")
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=_clock) as store:
        store.preload()
        yield store, queries


class _Rows:
    """A namespace's rows, its scans counted by how they ran."""

    def __init__(self, rows: _VectorIndex) -> None:
        self.rows, self.calls = rows, []

    def top_k(self, *args):
        self.calls.append("in place")
        return self.rows.top_k(*args)

    def top_k_ahead(self, *args):
        self.calls.append("ahead")
        return self.rows.top_k_ahead(*args)

    def __getattr__(self, name):
        return getattr(self.rows, name)


def _spied(store: MemoryStore) -> _Rows:
    index = store._vectors["default"]
    index.rows = _Rows(index.rows)
    return index.rows


def test_a_prefetched_search_is_the_search_and_waits_for_its_scan(scanned, memories, tmp_path):
    store, queries = scanned
    rows = _spied(store)
    shutil.copy(memories[0], tmp_path / "again.db")
    with MemoryStore(tmp_path / "again.db", embedder=HashingEmbedder(64), clock=_clock) as plain:
        for query in queries:
            store.prefetch(query, k=6)
            ahead = store.search(query, k=6)
            assert [(h.memory.id, h.score, h.reasons) for h in ahead] == [
                (h.memory.id, h.score, h.reasons) for h in plain.search(query, k=6)
            ]
    assert rows.calls == ["ahead"] * len(queries)  # every search took its scan
    assert store._vectors["default"].ahead is None


def test_a_search_for_another_query_scans_for_itself(scanned):
    store, queries = scanned
    rows = _spied(store)
    store.prefetch(queries[0], k=6)
    texts = store.search_texts(queries[1], k=6)
    assert rows.calls == ["ahead", "in place"]
    store.prefetch(queries[1], k=10)  # another k: another pool of candidates
    assert store.search_texts(queries[1], k=6) == texts
    assert rows.calls == ["ahead", "in place", "ahead", "in place"]


def test_a_memory_written_after_the_prefetch_is_found(scanned):
    store, _ = scanned
    query = "the vendor ZX-4411 invoice reconciliation failed twice"
    store.prefetch(query, k=3)
    written = store.remember(query)
    assert store.search(query, k=3)[0].memory.id == written.id


def test_a_delete_after_the_prefetch_moves_no_result(scanned, memories, tmp_path):
    """Deleting a query's best match moves the last row into its place: a
    scan that read the rows before would map its positions to the wrong
    memories."""
    store, queries = scanned
    shutil.copy(memories[0], tmp_path / "plain.db")
    with MemoryStore(tmp_path / "plain.db", embedder=HashingEmbedder(64), clock=_clock) as plain:
        index = store._vectors["default"]
        for query in queries[:12]:
            nearest = index.nearest(store._embed([query])[0], 32, quantise_from=1_000, cut=True)
            doomed = index.ranks[index.position[nearest[0][0]]][0]  # its best vector match
            store.prefetch(query, k=6)
            _until_ready(store._vectors["default"].ahead[1])  # it read the rows before the delete
            store.delete(doomed)
            plain.delete(doomed)
            got = [(h.memory.id, h.score) for h in store.search(query, k=6)]
            assert got == [(h.memory.id, h.score) for h in plain.search(query, k=6)]


class _CheckedScan:
    """A scan ahead whose result is checked against the scan in place, run
    when it is taken (under the store's lock: the rows cannot move)."""

    def __init__(self, rows: _VectorIndex, args: tuple, checks: list) -> None:
        self.scan, self.rows, self.args, self.checks = rows.top_k_ahead(*args), rows, args, checks

    @property
    def ready(self) -> bool:
        return self.scan.ready

    def result(self):
        found = self.scan.result()
        if found is not None:
            self.checks.append(found == self.rows.top_k(*self.args))
        return found


def test_searches_from_several_threads_each_take_a_right_scan(scanned):
    store, queries = scanned
    rows = _spied(store)
    checks: list[bool] = []
    rows.top_k_ahead = lambda *args: _CheckedScan(rows.rows, args, checks)

    def searching(mine: list[str]) -> None:
        for query in mine:
            store.prefetch(query, k=5)
            store.search_texts(query, k=5)

    threads = [threading.Thread(target=searching, args=(queries[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert checks  # scans ahead were taken,
    assert all(checks)  # each what the scan in place finds


def test_a_prefetch_of_a_namespace_not_held_does_nothing(tmp_path):
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as store:
        store.prefetch("anything")  # no vectors stored yet
        store.remember("the ledger export runs nightly")
        store.prefetch("ledger export", namespace="elsewhere")
        assert store._vectors == {}
        assert [h.memory.text for h in store.search("ledger export")] == ["the ledger export runs nightly"]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"query": 3}, InvalidTypeError),
        ({"query": "x", "k": 0}, InvalidInputError),
        ({"query": "x", "kinds": ["bogus"]}, InvalidInputError),
    ],
)
def test_a_prefetch_checks_its_arguments_as_search_does(scanned, arguments, error):
    store, _ = scanned
    with pytest.raises(error):
        store.prefetch(**arguments)
    with pytest.raises(error):
        store.search(**arguments)


# -- the session -------------------------------------------------------------


def test_a_session_turn_scans_ahead_and_sends_what_it_would_without(memories, tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "QUANTISE_FROM", 1_000)
    path, queries = memories
    sent, scans = {}, {}
    for mode in ("ahead", "in place"):
        shutil.copy(path, tmp_path / f"{mode}.db")
        store = MemoryStore(tmp_path / f"{mode}.db", embedder=HashingEmbedder(64), clock=_clock)
        if mode == "in place":
            store.prefetch = None  # a store without it, as a caller's own may be
        session = Session.open(tmp_path / mode, model="gpt-4o", identity="You help.", tools=[], store=store)
        rows = _spied(store)
        sent[mode] = []
        for query in queries[:12]:
            request = session.prepare(query, now="2026-12-08T09:00:00Z")
            sent[mode].append(request["messages"])
            session.join()  # the background writes of the turn, as a model's call leaves them time
            session.record({"role": "assistant", "content": "Noted."})
            session.join()
        scans[mode] = rows.calls
        session.close(persist=False)
        store.close()
    assert sent["ahead"] == sent["in place"]
    assert scans == {"ahead": ["ahead"] * 12, "in place": ["in place"] * 12}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_fork_during_scans_leaves_the_child_free_to_change_the_rows():
    """A fork waits for the scan the worker is running (none starts while
    it forks): a child that inherited rows read-locked by a scan it does
    not have would wait for ever to change them."""
    rng = np.random.default_rng(6)
    index = _index(rng, 60_000)
    for attempt in range(5):
        scans = [index.top_k_ahead(_query(rng), 4, 16) for _ in range(30)]  # one running, the rest queued
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                index.extend(_query(rng))
                index.swap_remove(0)
            finally:
                os._exit(0)
        assert _exit_code(pid) == 0, f"attempt {attempt}"
        assert all(scan.result() is not None for scan in scans)


def test_a_session_leaves_a_prefetch_of_a_store_of_the_callers_own_alone(tmp_path):
    class Store:
        def search(self, query, **arguments):
            return []

        def search_texts(self, query, **arguments):
            return ["the ledger export runs nightly"]

        def prefetch(self, *arguments, **named):
            raise AssertionError("a method of the caller's own, not ours to call")

    with Session.open(tmp_path / "s", model="gpt-4o", store=Store()) as session:
        request = session.prepare("when does the export run?")
    assert "the ledger export runs nightly" in str(request["messages"])
