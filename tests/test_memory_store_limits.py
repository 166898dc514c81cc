"""The memory store at its edges: limits on a search's size, kinds found
among many memories of another kind, common entities, a search that must
not wait on another writer, storage errors, argument checks, and the event
helpers with their tags."""

from __future__ import annotations

import functools
import sqlite3
import threading
import types

import numpy as np
import pytest

from context_core import (
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    MemoryStore,
    StoreStorageError,
)
from context_core.memory_store import HashingEmbedder
from context_core.memory_store.store import ACCESS_FLUSH_SECONDS, ENTITY_MATCHES, MAX_K


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path):
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=Clock()) as s:
        yield s


def test_k_is_bounded_and_a_k_past_the_store_returns_all(store):
    store.remember_many([f"note {i} on the billing job" for i in range(5)])
    for bad in (0, MAX_K + 1, 10**9, 2**70, True, 2.5):
        with pytest.raises(InvalidInputError):
            store.search("billing", k=bad)
    assert len(store.search("billing", k=MAX_K)) == 5


def test_a_kind_is_found_among_many_memories_of_another(store):
    store.remember_many(
        [{"text": f"deploy {i} went out on the release train {i}", "kind": "episodic"} for i in range(2000)]
    )
    lessons = store.remember_many(
        [
            {"text": f"before a deploy, freeze the release branch (lesson {i})", "kind": "procedural"}
            for i in range(20)
        ]
    )
    hits = store.search("deploy release train", kinds=["procedural"])
    assert len(hits) == 8
    assert {h.memory.id for h in hits} <= {m.id for m in lessons}
    assert [h.memory.id for h in store.search("deploy", kinds="procedural", k=3)] == [
        h.memory.id for h in store.search("deploy", kinds=["procedural"], k=3)
    ]
    for bad, error in [([], InvalidInputError), (5, InvalidTypeError), (["feelings"], InvalidInputError)]:
        with pytest.raises(error):
            store.search("deploy", kinds=bad)


def test_a_rare_entity_is_never_lost_beside_a_common_one(store):
    store.remember_many(
        [f"note {i}: the AWS bill went up again this month" for i in range(ENTITY_MATCHES + 20)]
    )
    target = store.remember("Ticket A-8812 closed after the charge was reversed", kind="episodic")
    hits = store.search("AWS bill and A-8812", k=5)
    assert hits[0].memory.id == target.id
    assert hits[0].entities == ("a-8812",)
    # The common name still counts for the memories found that name it.
    assert all("aws" in h.entities for h in hits[1:])


def test_a_search_never_waits_for_another_writer(tmp_path):
    clock = Clock()
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(64), clock=clock, busy_timeout=3600.0) as s:
        memory = s.remember("the deploy key is in the vault")
        s.search("deploy key")  # one access pending
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process is writing
        clock.now += ACCESS_FLUSH_SECONDS + 1  # the next search is due to write the counts
        done: list[int] = []
        searcher = threading.Thread(target=lambda: done.append(len(s.search("deploy key"))), daemon=True)
        searcher.start()
        searcher.join(30)  # waiting out the busy timeout would take an hour
        assert done == [1]
        other.execute("ROLLBACK")
        other.close()
        assert s.get(memory.id).access_count == 2  # the counts waited their turn
    with MemoryStore(path, embedder=HashingEmbedder(64)) as again:
        assert again.get(memory.id).access_count == 2


def test_storage_errors_are_the_librarys_own(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, just some text " * 200)
    for where in (junk, tmp_path):
        with pytest.raises(StoreStorageError) as caught:
            MemoryStore(where, embedder=HashingEmbedder(8))
        assert isinstance(caught.value, ContextCoreError)
        assert isinstance(caught.value, sqlite3.DatabaseError)
        assert caught.value.path == str(where)
    assert junk.read_bytes().startswith(b"this is not a database")


@pytest.mark.parametrize(
    ("option", "error"),
    [
        ({"busy_timeout": "x"}, InvalidInputError),
        ({"busy_timeout": -1}, InvalidInputError),
        ({"busy_timeout": float("inf")}, InvalidInputError),
        ({"near_duplicate": 2.0}, InvalidInputError),
        ({"near_duplicate": "high"}, InvalidTypeError),
        ({"clock": 5}, InvalidTypeError),
    ],
)
def test_bad_options_are_refused_before_the_file_is_made(tmp_path, option, error):
    with pytest.raises(error):
        MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(8), **option)
    assert not (tmp_path / "m.db").exists()


def test_an_update_returns_the_memory_as_stored(store):
    first = store.remember("Alice Chen prefers tabs in Go code", source="session-1", kind="semantic")
    again = store.remember("alice chen prefers tabs in go code", kind="procedural")  # no source given
    assert again.id == first.id
    assert again == store.get(first.id)
    assert (again.source, again.kind) == ("session-1", "semantic")


def test_the_stored_embedding_is_the_embedders_unit_vector(store):
    memory = store.remember("the cache TTL is 300 seconds")
    vector = HashingEmbedder(64).embed(["the cache TTL is 300 seconds"])[0]
    np.testing.assert_allclose(store.embedding(memory.id), vector / np.linalg.norm(vector), rtol=1e-6)
    assert store.embedding("no such id") is None


def test_the_event_helpers_write_their_kinds_importance_and_tags(store):
    liked = store.preference("I prefer short answers", tags=["style"])
    done = store.task_done("Moved the retry job to the new queue; it drains in 40 s")
    failed = store.tool_failed("pytest", "timeout after 600 s", lesson="run the payments suite alone")
    assert (liked.kind, liked.importance, liked.tags) == ("semantic", 0.8, ("style",))
    assert (done.kind, done.importance) == ("episodic", 0.5)
    assert (failed.kind, failed.importance) == ("procedural", 0.7)
    assert failed.text == "pytest failed: timeout after 600 s. Lesson: run the payments suite alone"
    again = store.preference("I prefer short answers", tags=["tone", "style"], importance=0.9)
    assert again.id == liked.id
    assert (again.tags, again.importance) == (("style", "tone"), 0.9)
    assert store.get(liked.id).tags == ("style", "tone")


def test_deleting_a_namespace_lets_its_matrix_go(store):
    store.remember("a note for user 7", namespace="u7")
    store.search("note", namespace="u7")
    assert "u7" in store._vectors
    store.delete(namespace="u7")
    assert "u7" not in store._vectors
    assert store.search("note", namespace="u7") == []


def test_the_blocks_own_error_is_not_hidden_by_a_busy_close(tmp_path):
    path = tmp_path / "m.db"
    other = None
    with (  # noqa: PT012
        pytest.raises(ValueError, match="the caller's own"),
        MemoryStore(path, embedder=HashingEmbedder(8), busy_timeout=0.05) as s,
    ):
        s.remember("a memory")
        s.search("memory")  # a count pending for close to write
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # so close cannot
        raise ValueError("the caller's own")
    assert other is not None
    other.execute("ROLLBACK")
    other.close()


def test_a_store_remembers_which_embedder_made_its_vectors(tmp_path):
    """Two embedders of one width make vectors whose cosines mean nothing
    together: a store records its embedder, reopens with it when none is
    given, and refuses another."""
    from context_core.memory_store import CallableEmbedder

    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(48)) as s:
        kept = s.remember("the refund job retries three times")
    with MemoryStore(path) as again:  # no embedder given: the one that made them
        assert isinstance(again.embedder, HashingEmbedder)
        assert again.embedder.dim == 48
        assert again.search("refund job retries")[0].memory.id == kept.id
    same_width = CallableEmbedder(lambda texts: np.ones((len(texts), 48), dtype=np.float32))
    for other in (HashingEmbedder(32), same_width):
        with pytest.raises(InvalidInputError, match="made by hashing-48"):
            MemoryStore(path, embedder=other)
    custom = tmp_path / "custom.db"
    with MemoryStore(custom, embedder=same_width) as s:
        s.remember("a memory")
    with MemoryStore(custom, embedder=same_width) as s:
        assert s.count() == 1
    with pytest.raises(InvalidInputError, match="pass that embedder"):
        MemoryStore(custom)


def test_a_crafted_row_of_another_width_leaves_the_held_index_as_it_was(tmp_path):
    """Another writer's row whose embedding is not the store's width is
    refused by the matrix. The held index used to grow its ids, ranks and
    texts before the matrix refused it: once that row was deleted, every
    later search failed with ``no row 4 of 4`` until the store reopened."""
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(64)) as store:
        for text in ("alpha refund ledger", "beta gateway retry", "gamma invoice cursor"):
            store.remember(text)
        assert store.search_texts("refund", k=1) == ["alpha refund ledger"]
        db = sqlite3.connect(path)
        db.execute(
            "INSERT INTO memories (id, namespace, kind, text, text_key, importance, created, last_access,"
            " embedding) VALUES ('x1', 'default', 'semantic', 'CRAFTED', X'01', 0.5, 0, 0, X'00000000')"
        )
        db.execute("INSERT INTO changes (namespace, memory) VALUES ('default', last_insert_rowid())")
        db.commit()
        db.close()
        with pytest.raises(InvalidInputError, match="whole rows"):
            store.search_texts("refund", k=1)
        store.delete("x1")
        store.remember("delta refund memory")
        assert store.search_texts("delta refund", k=1) == ["delta refund memory"]
        held = store._vectors["default"]
        assert len(held.rowids) == len(held.ranks) == len(held.texts) == len(held.position) == 4
        texts = {"beta gateway retry", "gamma invoice cursor", "alpha refund ledger", "delta refund memory"}
        assert set(store.search_texts("refund", k=4)) == texts


def _ones(texts):
    return np.ones((len(texts), 48), dtype=np.float32)


def _twos(texts):
    return np.full((len(texts), 48), 2.0, dtype=np.float32)


def test_a_store_refuses_another_functions_vectors_of_the_same_width(tmp_path):
    """Two functions behind CallableEmbedder make vectors of one width whose
    cosines mean nothing together: each records its own name."""
    from context_core.memory_store import CallableEmbedder

    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=CallableEmbedder(_ones)) as s:
        s.remember("a memory")
    refused = r"by callable:_ones, not callable:_twos.*name='callable:_ones'"
    with pytest.raises(InvalidInputError, match=refused):
        MemoryStore(path, embedder=CallableEmbedder(_twos))
    with MemoryStore(path, embedder=CallableEmbedder(_ones)) as s:  # the same function, again
        assert s.count() == 1
    moved = types.FunctionType(_ones.__code__, {"np": np}, "_ones")  # imported from elsewhere
    moved.__module__ = "__main__"
    with MemoryStore(path, embedder=CallableEmbedder(moved)) as s:
        assert s.count() == 1
    named = tmp_path / "named.db"
    with MemoryStore(named, embedder=CallableEmbedder(_ones, name="team-model-v2")) as s:
        s.remember("a memory")
    with MemoryStore(named, embedder=CallableEmbedder(functools.partial(_twos), name="team-model-v2")) as s:
        assert s.count() == 1  # the name is the caller's word for the model
    with pytest.raises(InvalidInputError, match="made by team-model-v2"):
        MemoryStore(named, embedder=CallableEmbedder(_ones))
    # A store written before callables were named took any of them, and still does.
    with MemoryStore(path, embedder=CallableEmbedder(_ones)) as s:
        s._db.execute("UPDATE meta SET value = 'CallableEmbedder' WHERE key = 'embedder'")
    with MemoryStore(path, embedder=CallableEmbedder(_twos)) as s:
        assert s.count() == 1

    class Named(CallableEmbedder):  # a subclass that names itself
        @property
        def name(self) -> str:
            return "team-model-v3"

    assert Named(_ones).name == "team-model-v3"
    with pytest.raises(InvalidInputError, match="name must not be blank"):
        CallableEmbedder(_ones, name=" ")
    with pytest.raises(InvalidTypeError, match="name must be a str, not int"):
        CallableEmbedder(_ones, name=3)  # type: ignore[arg-type]
