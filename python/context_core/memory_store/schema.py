"""The memory store's SQLite schema and its migrations.

The version is ``PRAGMA user_version``; :func:`migrate` applies each step
after it in one transaction, so a database is always at one version.
``changes`` records every write (a memory's rowid, or ``-1`` for a whole
namespace), and ``accessed`` the memories whose access counts were last
written by which flush: a process keeps its vector index and ranking
columns in step by reading the rows of both after the last ones it saw,
whoever wrote them.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable

from context_core.errors import StoreVersionError
from context_core.memory_store.keywords import count_terms, indexed_words, plain_words, search_terms

__all__ = ["SCHEMA_VERSION", "entity_key", "migrate"]

_STEPS: tuple[str, ...] = (
    """
    CREATE TABLE memories (
        id TEXT NOT NULL UNIQUE,
        namespace TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('semantic', 'episodic', 'procedural')),
        text TEXT NOT NULL,
        text_key BLOB NOT NULL,
        importance REAL NOT NULL CHECK (importance >= 0 AND importance <= 1),
        pinned INTEGER NOT NULL DEFAULT 0,
        source TEXT,
        tags TEXT NOT NULL DEFAULT '[]',
        created REAL NOT NULL,
        last_access REAL NOT NULL,
        access_count INTEGER NOT NULL DEFAULT 0,
        embedding BLOB NOT NULL
    );
    CREATE UNIQUE INDEX memories_by_text ON memories (namespace, text_key);
    CREATE TABLE entities (
        namespace TEXT NOT NULL,
        value TEXT NOT NULL,
        memory INTEGER NOT NULL,
        kind TEXT NOT NULL,
        PRIMARY KEY (namespace, value, memory)
    ) WITHOUT ROWID;
    CREATE INDEX entities_by_memory ON entities (memory);
    CREATE VIRTUAL TABLE terms USING fts5 (words, namespace UNINDEXED, tokenize = 'unicode61');
    CREATE TABLE changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL,
        memory INTEGER NOT NULL
    );
    CREATE INDEX changes_by_namespace ON changes (namespace, seq);
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    # 2: how many memories hold each term (the empty term: how many there
    # are), so a keyword query can leave out the terms most of them share.
    """
    CREATE TABLE term_docs (
        namespace TEXT NOT NULL,
        term TEXT NOT NULL,
        docs INTEGER NOT NULL,
        PRIMARY KEY (namespace, term)
    ) WITHOUT ROWID;
    CREATE VIRTUAL TABLE temp.term_rows USING fts5vocab (main, terms, 'instance');
    INSERT INTO term_docs (namespace, term, docs)
        SELECT t.namespace, v.term, count(DISTINCT v.doc)
        FROM temp.term_rows AS v JOIN terms AS t ON t.rowid = v.doc
        WHERE v.col = 'words'
        GROUP BY t.namespace, v.term;
    INSERT INTO term_docs (namespace, term, docs)
        SELECT namespace, '', count(*) FROM memories GROUP BY namespace;
    DROP TABLE temp.term_rows;
    """,
    # 3: a digest of each memory's entity values, so a near duplicate (which
    # must name the same entities) is looked for among a handful of rows.
    """
    ALTER TABLE memories ADD COLUMN entity_key BLOB;
    CREATE INDEX memories_by_entities ON memories (namespace, entity_key) WHERE entity_key IS NOT NULL;
    """,
    # 4: each indexed word carries its memory's namespace as a prefix, so a
    # query reads only its namespace's postings, not every tenant's.
    """
    UPDATE terms SET words = context_core_indexed(namespace, words);
    """,
    # 5: the memories whose access counts a flush wrote, one row each with
    # the newest such flush's number, so a process holding the namespace
    # reads those few columns again. One row a memory, however often it is
    # found: a row per flush would grow with the searches.
    """
    CREATE TABLE accessed (
        memory INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        seq INTEGER NOT NULL
    );
    CREATE INDEX accessed_by_namespace ON accessed (namespace, seq);
    """,
    # 6: runs of Japanese kana are indexed as overlapping pairs, as Chinese
    # characters were (see _pair_kana, which does the work).
    "",
)

#: Work a step needs beyond SQL, by step number (from 1), run after it.
_BACKFILLS: dict[int, Callable[[sqlite3.Connection], None]] = {}


def entity_key(values: Iterable[str]) -> bytes | None:
    """The digest of a set of entity values (``None`` for none)."""
    ordered = sorted(set(values))
    if not ordered:
        return None
    return hashlib.blake2b("\x00".join(ordered).encode(), digest_size=16).digest()


def _fill_entity_keys(connection: sqlite3.Connection) -> None:
    values: dict[int, list[str]] = {}
    for memory, value in connection.execute("SELECT memory, value FROM entities"):
        values.setdefault(memory, []).append(value)
    connection.executemany(
        "UPDATE memories SET entity_key = ? WHERE rowid = ?", [(entity_key(v), m) for m, v in values.items()]
    )


_BACKFILLS[3] = _fill_entity_keys

# A memory's text holding a kana character (hiragana, katakana, half-width
# katakana), for SQLite's GLOB.
_HOLDS_KANA = "*[\u3040-\u30ff\uff66-\uff9f]*"


def _pair_kana(connection: sqlite3.Connection) -> None:
    """The words of each memory holding kana, indexed again: a kana run
    was one word, so ``ローテーション`` never matched a memory that wrote
    ``ログのローテーション``. The term counts move with them, one upsert a
    term per namespace, and each memory is recorded as changed, so a
    process holding the namespace reads its words again."""
    rows = connection.execute(
        "SELECT m.rowid, m.namespace, m.text, t.words FROM memories AS m JOIN terms AS t ON t.rowid = m.rowid"
        # GLOB reads a text only up to a NUL, so a text holding one is read too.
        " WHERE m.text GLOB ? OR instr(m.text, char(0)) > 0",
        (_HOLDS_KANA,),
    ).fetchall()
    updates: list[tuple[str, int]] = []
    changed: list[tuple[str, int]] = []
    moved: dict[str, tuple[list[str], list[str]]] = {}
    for rowid, namespace, text, words in rows:
        if not isinstance(text, str) or not isinstance(words, str):
            continue  # a crafted file's other value: left as it is
        new, old = search_terms(text), plain_words(words)
        if new == old:
            continue
        updates.append((indexed_words(namespace, new), rowid))
        added, removed = moved.setdefault(namespace, ([], []))
        added.append(new)
        removed.append(old)
        changed.append((namespace, rowid))
    connection.executemany("UPDATE terms SET words = ? WHERE rowid = ?", updates)
    connection.executemany("INSERT INTO changes (namespace, memory) VALUES (?, ?)", changed)
    for namespace, (added, removed) in moved.items():
        count_terms(connection, namespace, added, removed)


_BACKFILLS[6] = _pair_kana

#: The schema version this code writes.
SCHEMA_VERSION = len(_STEPS)


def migrate(connection: sqlite3.Connection) -> int:
    """Brings the database to :data:`SCHEMA_VERSION` (creating it when new);
    returns the version it found. A newer database than this code knows is
    refused rather than written."""
    connection.create_function("context_core_indexed", 2, indexed_words, deterministic=True)
    connection.execute("BEGIN IMMEDIATE")
    try:
        found = connection.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            raise StoreVersionError(
                f"the memory store's schema version {found} is newer than this library's"
                f" {SCHEMA_VERSION}: upgrade context_core to open it",
                found=int(found),
                supported=SCHEMA_VERSION,
            )
        for number, step in enumerate(_STEPS[found:], start=found + 1):
            for statement in step.split(";"):
                if statement.strip():
                    connection.execute(statement)
            backfill = _BACKFILLS.get(number)
            if backfill is not None:
                backfill(connection)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return int(found)
