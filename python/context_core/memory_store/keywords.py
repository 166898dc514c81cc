"""Keyword search that stays fast however many memories share a word.

FTS5 scores every document a query term matches, so ``"refund" OR "order"``
over 100,000 memories costs hundreds of milliseconds. The store counts, per
namespace, how many memories hold each term (``term_docs``; the empty term
counts the memories), and a query keeps only its rarest terms, in rising
order, while the documents they match add up to at most
:data:`KEYWORD_POSTINGS`. A word most memories share tells BM25 little
anyway (its IDF is near zero); the vector still sees it.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable
from itertools import chain

__all__ = ["KEYWORD_POSTINGS", "count_terms", "match_query"]

#: The most documents a keyword query's terms may match together.
KEYWORD_POSTINGS = 1000

_UPSERT = (
    "INSERT INTO term_docs (namespace, term, docs) VALUES (?, ?, ?)"
    " ON CONFLICT (namespace, term) DO UPDATE SET docs = docs + excluded.docs"
)


def count_terms(db: sqlite3.Connection, namespace: str, added: Iterable[str], removed: Iterable[str]) -> None:
    """Moves ``term_docs`` by the memories indexed (``added``) and no longer
    indexed (``removed``), each given as its space-separated terms."""
    added = list(added)
    delta = Counter(chain.from_iterable(set(words.split()) for words in added))
    delta[""] += len(added)
    for words in removed:
        delta.subtract(set(words.split()))
        delta[""] -= 1
    db.executemany(_UPSERT, [(namespace, term, n) for term, n in delta.items() if n])


def match_query(db: sqlite3.Connection, namespace: str, terms: str, *, limit: int = 32) -> str | None:
    """The FTS5 query for ``terms`` (from :func:`~context_core.memory_store.store.search_terms`):
    its rarest terms, OR'ed, within :data:`KEYWORD_POSTINGS`; ``None`` when
    no term is rare enough, or none is indexed."""
    distinct = list(dict.fromkeys(terms.split()))[:limit]
    if not distinct:
        return None
    marks = ",".join("?" * len(distinct))
    docs = dict(
        db.execute(
            f"SELECT term, docs FROM term_docs WHERE namespace = ? AND term IN ({marks}) AND docs > 0",
            (namespace, *distinct),
        ).fetchall()
    )
    chosen, total = [], 0
    for term in sorted(docs, key=lambda t: (docs[t], t)):
        if total + docs[term] > KEYWORD_POSTINGS:
            break
        chosen.append(term)
        total += docs[term]
    return " OR ".join(f'"{term}"' for term in chosen) or None
