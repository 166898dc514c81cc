"""Namespaces of the memory store: a tenant, a user, an agent as one key;
deleting, counting and forgetting a namespace with everything under it;
searching one or several; bad keys refused before anything is written."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import ContextCoreError, InvalidInputError, InvalidTypeError, MemoryStore, Namespace
from context_core.memory_store import HashingEmbedder
from context_core.memory_store.keywords import plain_words
from context_core.memory_store.namespaces import SEPARATOR, namespace_of, scope, space_token
from context_core.memory_store.schema import SCHEMA_VERSION


@pytest.fixture
def store(tmp_path):
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64), clock=lambda: 1_700_000_000.0) as s:
        yield s


def test_a_memory_reads_back_the_namespace_it_was_written_to(store):
    agent = Namespace("acme", "u42", "support")
    memory = store.remember("the user prefers replies in French", namespace=agent)
    assert memory.namespace == agent
    assert store.get(memory.id).namespace == agent
    assert store.search("replies in French", namespace=agent)[0].memory.namespace == agent
    plain = store.remember("a tenant of its own", namespace="user-42")
    assert store.get(plain.id).namespace == "user-42"
    # A tenant alone is the plain string: one key, whichever way it is named.
    assert Namespace("user-42").key == "user-42"
    assert store.count(Namespace("user-42")) == 1
    assert str(agent) == "acme/u42/support"


def _fill(store: MemoryStore) -> dict[str | Namespace, str]:
    """One memory in each namespace, by a text naming it."""
    spaces: list[str | Namespace] = [
        Namespace("acme", "u42"),
        Namespace("acme", "u42", "support"),
        Namespace("acme", "u42", "coder"),
        Namespace("acme", "u4"),  # a prefix of u42's name, not of its key
        Namespace("acme", "u420", "support"),
        Namespace("acme"),
        Namespace("other", "u42", "support"),
        "acme-two",
    ]
    made = {}
    for i, ns in enumerate(spaces):
        made[ns] = store.remember(f"order Q-{i:03d} refund note for {ns}", namespace=ns).id
    return made


def test_deleting_a_user_removes_every_agent_of_that_user_and_nothing_else(store):
    made = _fill(store)
    user = Namespace("acme", "u42")
    mine = {ns for ns in made if isinstance(ns, Namespace) and ns.tenant == "acme" and ns.user == "u42"}
    assert store.count(user) == 3
    assert store.delete(namespace=user) == 3
    for ns, mid in made.items():
        assert (store.get(mid) is None) == (ns in mine), ns
    # Its rows in every table went with it: entities, search terms, counters.
    db = store._db
    gone_keys = [ns.key for ns in mine]
    marks = ",".join("?" * len(gone_keys))
    for table in ("memories", "entities", "term_docs"):
        assert db.execute(
            f"SELECT count(*) FROM {table} WHERE namespace IN ({marks})", gone_keys
        ).fetchone() == (0,)
    assert db.execute(
        "SELECT count(*) FROM terms WHERE rowid NOT IN (SELECT rowid FROM memories)"
    ).fetchone() == (0,)
    for ns in mine:
        assert store.search("order refund note", namespace=ns) == []
    # Every other namespace still searches as before, and a deleted one is
    # written to afresh.
    for ns in set(made) - mine:
        assert [h.memory.id for h in store.search("refund note", namespace=ns)] == [made[ns]]
    again = store.remember("a fresh start", namespace=Namespace("acme", "u42", "support"))
    assert [h.memory.id for h in store.search("fresh start", namespace=again.namespace)] == [again.id]
    assert store.integrity() == "ok"


def test_a_tenant_scope_covers_all_its_users_and_a_plain_string_is_that_tenant(store):
    made = _fill(store)
    assert store.count("acme") == 6
    assert store.count(Namespace("acme", "u42", "support")) == 1
    assert store.delete(namespace="acme") == 6
    assert {ns for ns, mid in made.items() if store.get(mid) is not None} == {
        Namespace("other", "u42", "support"),
        "acme-two",
    }


def test_forget_covers_the_namespace_and_those_under_it(store):
    made = _fill(store)
    report = store.forget(2.0, namespace=Namespace("acme", "u42"))  # every unpinned memory
    assert sorted(mid for mid, _ in report.candidates) == sorted(
        made[ns] for ns in made if isinstance(ns, Namespace) and ns.tenant == "acme" and ns.user == "u42"
    )


def test_search_reads_its_namespace_exactly_or_several_together(store):
    user = Namespace("acme", "u42")
    agent = Namespace("acme", "u42", "support")
    shared = store.remember("the user wants refunds for order A-8812 in EUR", namespace=user)
    own = store.remember("support lesson: check the refund queue before replying", namespace=agent)
    store.remember("order A-8812 belongs to someone else here", namespace=Namespace("acme", "u7"))
    assert [h.memory.id for h in store.search("order A-8812", namespace=agent)] == [own.id]
    together = store.search("refund for order A-8812", namespace=[agent, user, agent])
    # The entity match comes first across namespaces, each memory once.
    assert [h.memory.id for h in together] == [shared.id, own.id]
    assert together[0].reasons[0] == "entity"


def test_keyword_scores_are_scaled_by_the_best_match_of_the_whole_search(store):
    """Keyword scores are BM25 over the best BM25 of the whole search, not
    of each namespace: a namespace's weak match does not score 1 because it
    is that namespace's best."""
    best = store.remember("rollback the kafka consumer", namespace="a")
    store.remember("rollback steps", namespace="a")
    weak = store.remember("rollback steps", namespace="b")
    for word in ("alpha", "beta", "gamma"):  # an index of some size, so IDFs are not all near zero
        store.remember(f"{word} notes", namespace="b")
    found = store.search("rollback kafka consumer", namespace=["a", "b"])
    hits = {h.memory.id: h for h in found}
    assert hits[best.id].keyword == 1.0
    assert 0.0 < hits[weak.id].keyword < 1.0
    assert found[0].memory.id == best.id


def test_the_same_match_scores_the_same_in_a_small_namespace_and_a_large_one(store):
    """A search across namespaces weighs BM25 by their statistics together:
    a user's own memory scores as the same memory in a large shared
    namespace does, not lower because its namespace is small."""
    text = "rollback the kafka consumer"
    own = store.remember(text, namespace="user")
    store.remember_many(["deploy notes", "billing notes"], namespace="user")
    shared = store.remember(text, namespace="shared")
    store.remember_many([f"runbook page {i} about payments" for i in range(300)], namespace="shared")
    hits = {
        h.memory.id: h for h in store.search("rollback kafka consumer", namespace=["user", "shared"], k=4)
    }
    assert hits[own.id].keyword == hits[shared.id].keyword == 1.0
    assert hits[own.id].score == pytest.approx(hits[shared.id].score)
    # Alone, each namespace weighs by its own statistics.
    alone = store.search("rollback kafka consumer", namespace="user", k=1)[0]
    assert alone.memory.id == own.id
    assert alone.keyword == 1.0


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (lambda: Namespace("acme", agent="support"), InvalidInputError),
        (lambda: Namespace("acme", ""), InvalidInputError),
        (lambda: Namespace("acme", "u" + SEPARATOR + "x"), InvalidInputError),
        (lambda: Namespace("acme", 42), InvalidTypeError),
        (lambda: Namespace(" "), InvalidInputError),
    ],
)
def test_a_bad_namespace_is_refused_when_made(bad, error):
    with pytest.raises(error) as caught:
        bad()
    assert isinstance(caught.value, ContextCoreError)


def test_bad_namespaces_write_nothing(store):
    store.remember("the one memory")
    for bad, error in [
        ("a" + SEPARATOR + "b", InvalidInputError),
        (42, InvalidTypeError),
        ("", InvalidInputError),
    ]:
        with pytest.raises(error):
            store.remember("x", namespace=bad)
        with pytest.raises(error):
            store.remember_many(["x"], namespace=bad)
        with pytest.raises(error):
            store.delete(namespace=bad)
        with pytest.raises(error):
            store.forget(2.0, namespace=bad, dry_run=False)
    for bad, error in [([], InvalidTypeError), (["ok", 3], InvalidTypeError), (b"bytes", InvalidTypeError)]:
        with pytest.raises(error):
            store.search("x", namespace=bad)
    assert store.count() == 1


# Parts that are prefixes of each other, or end just below, at or above the
# separator, where a range over the key could go wrong.
_PART = st.sampled_from(["a", "a ", "a a", "a\x1e", "a!", "aé", "a中", "b"])
_SPACES = st.builds(
    lambda t, u, a: Namespace(t, u, a if u is not None else None),
    _PART,
    st.none() | _PART,
    st.none() | _PART,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_SPACES, min_size=1, max_size=12), _SPACES)
def test_a_scope_holds_exactly_the_namespace_and_those_under_it(spaces, within):
    """The SQL range of a scope against its definition, in SQLite's own
    ordering of text."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE memories (namespace TEXT NOT NULL)")
    db.execute("CREATE INDEX by_namespace ON memories (namespace)")
    db.executemany("INSERT INTO memories VALUES (?)", [(ns.key,) for ns in spaces])
    where, args = scope(within.key)
    found = sorted(key for (key,) in db.execute(f"SELECT namespace FROM memories WHERE {where}", args))

    def under(ns: Namespace) -> bool:
        parts = [p for p in (ns.tenant, ns.user, ns.agent) if p is not None]
        mine = [p for p in (within.tenant, within.user, within.agent) if p is not None]
        return parts[: len(mine)] == mine

    assert found == sorted(ns.key for ns in spaces if under(ns))
    for ns in spaces:
        assert namespace_of(ns.key) == (ns if ns.user is not None else ns.tenant)


def test_a_keyword_query_reads_only_its_namespaces_postings(store):
    """The index holds each memory's namespace as a word of its own, and
    the query names it: another tenant's memories with the same word are
    never matched, so they cost nothing. So does the index a search holds
    for the namespace: it holds only its own memories."""
    from context_core.memory_store.keywords import match_query

    store.remember_many([f"zebra sighting number {i}" for i in range(300)], namespace="big-tenant")
    mine = store.remember("a zebra crossed the road", namespace=Namespace("small", "u1"))
    query = store._read(lambda db: match_query(db, Namespace("small", "u1").key, "zebra"))
    assert query is not None
    matched = store._read(
        lambda db: db.execute("SELECT rowid FROM terms WHERE terms MATCH ?", (query,)).fetchall()
    )
    assert len(matched) == 1  # the index itself, before any namespace check
    assert [h.memory.id for h in store.search("zebra", namespace=Namespace("small", "u1"))] == [mine.id]
    held = store._vectors[Namespace("small", "u1").key].keywords
    assert (len(held), held.holding("zebra"), held.holding("sighting")) == (1, 1, 0)


def test_a_rowid_another_namespace_reuses_is_no_keyword_match(tmp_path):
    """A memory deleted from one namespace frees its rowid; the next memory,
    written in another namespace, can take it. The first namespace's held
    keyword index lets it go with the vector, and the word is found only
    where it now is."""
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(32)) as store:
        store.remember("zebra notes", namespace="a")
        last = store.remember("zebra crossing", namespace="a")
        assert store.search("zebra", namespace="a")  # held from here on
        rowid = store._db.execute("SELECT rowid FROM memories WHERE id = ?", (last.id,)).fetchone()[0]
        store.delete(last.id)
        moved = store.remember("zebra crossing again", namespace="b")
        assert (
            store._db.execute("SELECT rowid FROM memories WHERE id = ?", (moved.id,)).fetchone()[0] == rowid
        )
        found = store.search("zebra crossing", namespace="a", kinds=["semantic"])
        assert [h.memory.text for h in found] == ["zebra notes"]
        assert rowid not in store._vectors["a"].keywords
        assert [h.memory.id for h in store.search("crossing", namespace="b")] == [moved.id]


def test_a_version_3_store_gets_its_namespace_words_on_opening(tmp_path):
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
        kept = s.remember("the refund job retries three times", namespace="a")
        s.remember("the refund job in another tenant", namespace="b")
    db = sqlite3.connect(path)  # back to the version 3 keyword index: words without namespace tags
    for rowid, words in db.execute("SELECT rowid, words FROM terms").fetchall():
        db.execute("UPDATE terms SET words = ? WHERE rowid = ?", (plain_words(words), rowid))
    db.execute("DROP TABLE accessed")  # and without the later steps
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    with MemoryStore(path, embedder=HashingEmbedder(32)) as s:
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert all(
            words.startswith(space_token(ns))
            for words, ns in s._db.execute("SELECT words, namespace FROM terms")
        )
        hits = s.search("retries", namespace="a")
        assert [h.memory.id for h in hits] == [kept.id]
        assert "keyword" in hits[0].reasons
        assert s.integrity() == "ok"
