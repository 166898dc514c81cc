"""The memory store's SQLite schema and its migrations.

The version is ``PRAGMA user_version``; :func:`migrate` applies each step
after it in one transaction, so a database is always at one version.
``changes`` records every write (a memory's rowid, or ``-1`` for a whole
namespace): a process keeps its vector index in step by reading the rows
after the last one it saw, whoever wrote them.
"""

from __future__ import annotations

import sqlite3

__all__ = ["SCHEMA_VERSION", "migrate"]

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
        GROUP BY t.namespace, v.term;
    INSERT INTO term_docs (namespace, term, docs)
        SELECT namespace, '', count(*) FROM memories GROUP BY namespace;
    DROP TABLE temp.term_rows;
    """,
)

#: The schema version this code writes.
SCHEMA_VERSION = len(_STEPS)


def migrate(connection: sqlite3.Connection) -> int:
    """Brings the database to :data:`SCHEMA_VERSION` (creating it when new);
    returns the version it found. A newer database than this code knows is
    refused rather than written."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        found = connection.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {found} is newer than this library's {SCHEMA_VERSION}"
            )
        for step in _STEPS[found:]:
            for statement in step.split(";"):
                if statement.strip():
                    connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return int(found)
