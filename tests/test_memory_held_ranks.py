"""What a search holds between calls: the ranking columns beside the
vectors, and the keyword index. Whoever writes (this store, another on the
same file), a search ranks by what the database says, exactly as a store
that read everything afresh would."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import MemoryStore
from context_core.memory_store import HashingEmbedder
from context_core.memory_store.store import search_terms

WORDS = ["refund", "order", "deploy", "zebra", "payments", "retry", "日志", "轮转", "A-8812", "Monday"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _open(path: Path, clock: Clock) -> MemoryStore:
    return MemoryStore(path, embedder=HashingEmbedder(32), clock=clock)


def _held(store: MemoryStore, namespace: str = "default") -> dict[int, tuple]:
    store.preload(namespace=namespace)  # synced to the database as it is now
    index = store._vectors[namespace]
    return {rowid: index.ranks[at] for rowid, at in index.position.items()}


def _stored(store: MemoryStore, namespace: str = "default") -> dict[int, tuple]:
    return {
        row[0]: tuple(row[1:])
        for row in store._db.execute(
            "SELECT rowid, id, kind, importance, last_access, access_count FROM memories WHERE namespace = ?",
            (namespace,),
        )
    }


def _held_terms(store: MemoryStore, namespace: str = "default") -> dict[str, int]:
    """How many memories hold each term the database counts, and each of
    ``WORDS``, as the store's keyword index says (synced, as a search would be)."""
    store.preload(namespace=namespace)
    index = store._vectors[namespace].keywords
    return {term: index.holding(term) for term in _terms(store, namespace)}


def _stored_terms(store: MemoryStore, namespace: str = "default") -> dict[str, int]:
    """What the database counts for the same terms (``term_docs``, moved by
    each write in its own transaction)."""
    found = dict(store._db.execute("SELECT term, docs FROM term_docs WHERE namespace = ?", (namespace,)))
    return {term: max(0, int(found.get(term, 0))) for term in _terms(store, namespace)}


def _terms(store: MemoryStore, namespace: str) -> set[str]:
    counted = store._db.execute("SELECT term FROM term_docs WHERE namespace = ? AND term != ''", (namespace,))
    return {term for (term,) in counted} | set(search_terms(" ".join(WORDS)).split())


def _ranked(store: MemoryStore, query: str) -> list[tuple[str, float, float]]:
    return [(h.memory.id, h.score, h.keyword) for h in store.search(query, k=6)]


_TEXT = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
_STEP = st.one_of(
    st.tuples(
        st.just("remember"),
        _TEXT,
        st.sampled_from(["semantic", "episodic"]),
        st.sampled_from(["mine", "other"]),
    ),
    st.tuples(st.just("search"), _TEXT, st.sampled_from(["mine", "other"])),
    st.tuples(st.just("flush"), st.sampled_from(["mine", "other"])),
    st.tuples(st.just("delete"), st.integers(0, 20), st.sampled_from(["mine", "other"])),
    st.tuples(st.just("wipe"), st.just("default")),
    st.tuples(st.just("tick"), st.floats(0, 40 * 86_400.0)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_STEP, max_size=25), _TEXT)
def test_held_ranks_match_the_database_whoever_writes(steps, query):
    """Two stores on one file, one searching and both writing, searching
    and flushing access counts: after each step the searcher's held
    columns are the database's, and its ranking (its pending counts
    written first) is that of a store opened afresh."""
    clock = Clock()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.db"
        with _open(path, clock) as mine, _open(path, clock) as other:
            mine.remember("the first memory, so the vectors have a width")
            for step in steps:
                action = step[0]
                if action == "remember":
                    (mine if step[3] == "mine" else other).remember(step[1], kind=step[2])
                elif action == "search":
                    (mine if step[2] == "mine" else other).search(step[1])
                elif action == "flush":
                    (mine if step[1] == "mine" else other).flush()
                elif action == "delete":
                    ids = [mid for (mid,) in other._db.execute("SELECT id FROM memories ORDER BY rowid")]
                    if ids:
                        (mine if step[2] == "mine" else other).delete(ids[step[1] % len(ids)])
                elif action == "wipe":
                    other.delete(namespace=step[1])
                else:
                    clock.now += step[1]
                with mine._lock, other._lock:  # no counts written between the two reads
                    assert _held(mine) == _stored(mine)
                    assert _held_terms(mine) == _stored_terms(mine)
                    assert len(mine._vectors["default"].keywords) == len(_stored(mine))
            mine.flush()
            other.flush()
            with _open(path, clock) as fresh:
                assert _ranked(mine, query) == _ranked(fresh, query)


def test_another_stores_access_counts_move_the_ranking(tmp_path):
    """Accesses another process wrote change the frequency and recency
    terms: the searcher's next search scores by them, not by the counts it
    loaded."""
    clock = Clock()
    with _open(tmp_path / "m.db", clock) as mine, _open(tmp_path / "m.db", clock) as other:
        mine.remember_many(["refund order notes", "refund payments notes", "deploy on Monday"])
        before = _ranked(mine, "refund notes")
        mine.flush()  # its own counts written: the fresh store sees them too
        clock.now += 3 * 86_400.0
        for _ in range(30):
            other.search("refund payments")
        other.flush()
        with _open(tmp_path / "m.db", clock) as fresh:  # (its close writes its own counts)
            expected = _ranked(fresh, "refund notes")
            assert _ranked(mine, "refund notes") == expected
        assert expected != before  # the counts did move the scores


def test_a_term_written_elsewhere_is_searched_for_at_once(tmp_path):
    """A term the searcher found in no memory (held as such) is looked up
    again once another store writes a memory that holds it."""
    clock = Clock()
    with _open(tmp_path / "m.db", clock) as mine, _open(tmp_path / "m.db", clock) as other:
        mine.remember("refund order notes")
        assert all(hit.keyword == 0 for hit in mine.search("zebra"))
        zebra = other.remember("a zebra crossing near the office")
        hits = mine.search("zebra")
        assert hits[0].memory.id == zebra.id
        assert hits[0].keyword > 0
        assert "keyword" in hits[0].reasons


def test_the_keyword_index_follows_every_write(tmp_path):
    """The held keyword index moves with the store's own writes (a new
    memory, a near duplicate that updates one, a delete) and with another
    store's, and written access counts change no memory's terms: after
    each, its counts are the database's and the keyword scores those of a
    store opened afresh."""
    clock = Clock()
    with _open(tmp_path / "m.db", clock) as store, _open(tmp_path / "m.db", clock) as other:
        store.remember_many(["refund order notes", "deploy on Monday"])
        store.search("refund order")
        index = store._vectors["default"].keywords
        assert (index.holding("refund"), index.holding("order"), len(index)) == (1, 1, 2)
        store.flush()
        store.search("refund order")
        assert store._vectors["default"].keywords is index  # counts written: nothing reloaded
        store.remember("another refund")
        updated = store.remember("Another refund.")  # a near duplicate: the same memory, updated
        store.search("refund order")
        assert index.holding("refund") == 2 == _stored_terms(store)["refund"]
        other.remember("a refund elsewhere")
        other.delete(updated.id)
        hits = {h.memory.text: h.keyword for h in store.search("refund order")}
        assert store._vectors["default"].keywords is index  # moved by the changes, not reloaded
        assert _held_terms(store) == _stored_terms(store)
        assert index.holding("refund") == 2
        assert len(index) == 3
        with _open(tmp_path / "m.db", clock) as fresh:
            assert {h.memory.text: h.keyword for h in fresh.search("refund order")} == hits


def test_a_deleted_memory_does_not_hide_the_next_flush(tmp_path):
    """The newest flush wrote one memory, which is then deleted: the flush
    after it still reaches a store that saw the first (its number is new)."""
    clock = Clock()
    with _open(tmp_path / "m.db", clock) as mine, _open(tmp_path / "m.db", clock) as other:
        gone = other.remember("refund order A-1 notes")
        kept = other.remember("deploy on Monday notes")
        other.search("A-1", k=1)
        other.flush()
        assert _held(mine) == _stored(mine)  # saw that flush
        other.delete(gone.id)
        other.search("deploy Monday", k=1)
        other.flush()
        assert _held(mine) == _stored(mine)
        assert _held(mine)[next(iter(_held(mine)))][4] == mine.get(kept.id).access_count == 1


def test_searches_do_not_grow_the_database(tmp_path):
    """However often memories are found and their counts written, each
    keeps one ``accessed`` row and ``changes`` holds only writes."""
    clock = Clock()
    with _open(tmp_path / "m.db", clock) as store:
        store.remember_many([f"note {i} about refund order {i}" for i in range(20)])
        changes = store._db.execute("SELECT count(*) FROM changes").fetchone()[0]
        for i in range(200):
            store.search(f"refund order {i % 20}", k=4)
            if i % 10 == 0:
                store.flush()
        store.flush()
        assert store._db.execute("SELECT count(*) FROM changes").fetchone()[0] == changes
        accessed = store._db.execute("SELECT count(*) FROM accessed").fetchone()[0]
        assert 0 < accessed <= 20
        store.delete(namespace="default")
        assert store._db.execute("SELECT count(*) FROM accessed").fetchone()[0] == 0
        assert store._vectors == {}  # the namespace's index went with it


def test_own_writes_leave_the_next_search_nothing_to_read(tmp_path):
    """A store's own write moves its held index forward as it returns (a
    session's memory writes run between turns, so the turn's search does
    not read them); another store's write is read by the next search."""
    clock = Clock()
    with _open(tmp_path / "m.db", clock) as store, _open(tmp_path / "m.db", clock) as other:
        store.remember("refund order notes")
        store.search("refund")  # the namespace is held from here on
        held = store._vectors["default"]
        store.remember("a zebra crossing near the office")
        assert held.seq == _newest(store)
        assert held.keywords.holding("zebra") == 1
        other.remember("another zebra, elsewhere")
        assert held.seq < _newest(store)
        assert held.keywords.holding("zebra") == 1
        store.search("zebra")
        assert held.seq == _newest(store)
        assert held.keywords.holding("zebra") == 2


def _newest(store: MemoryStore) -> int:
    return int(store._db.execute("SELECT max(seq) FROM changes").fetchone()[0])


def test_a_write_stands_when_moving_the_held_index_fails(tmp_path):
    """Another writer left a row the held index cannot take (a crafted
    file): the store's own write still returns once committed, and the
    namespace is read afresh by the next search, which meets the row."""
    clock = Clock()
    with _open(tmp_path / "m.db", clock) as store:
        store.remember("refund order notes")
        store.search("refund")
        raw = sqlite3.connect(tmp_path / "m.db")
        raw.execute("UPDATE memories SET embedding = 'not a blob'")
        raw.execute("INSERT INTO changes (namespace, memory) SELECT namespace, rowid FROM memories")
        raw.commit()
        raw.close()
        written = store.remember("deploy on monday")
        assert store.get(written.id) is not None
        assert "default" not in store._vectors  # dropped: loaded again by the next search


def test_a_first_load_indexes_the_same_whether_batches_overlap_or_not(tmp_path, monkeypatch):
    """A large namespace's first load indexes each batch of words on a
    thread of its own while the next is read: the held index is the one a
    load on one thread builds, memory by memory."""
    import context_core.memory_store.vectors as vectors

    clock = Clock()
    texts = [f"{WORDS[i % len(WORDS)]} note {i} about {WORDS[(i * 7) % len(WORDS)]}" for i in range(300)]
    with _open(tmp_path / "m.db", clock) as store:
        store.remember_many([{"text": t, "kind": "episodic"} for t in texts])
    queries = ["refund order", "日志 轮转", "deploy zebra note", "note 17"]

    def load(pipeline_from: int) -> tuple:
        monkeypatch.setattr(vectors, "_PIPELINE_FROM", pipeline_from)
        monkeypatch.setattr(vectors, "_WORDS_BATCH", 7)
        with _open(tmp_path / "m.db", clock) as store:
            store.preload()
            held = store._vectors["default"]
            terms = search_terms(" ".join(texts))
            return (
                len(held.keywords),
                held.keywords.words,
                {t: held.keywords.holding(t) for t in terms.split()},
                [held.keyword_hits(search_terms(q), 8, ("episodic",)) for q in queries],
            )

    together, alone = load(1), load(10**9)
    assert together == alone
    assert together[0] == 300
    assert all(together[3])
