"""Keyword search that stays fast however many memories share a word.

FTS5 scores every document a query term matches, so ``"refund" OR "order"``
over 100,000 memories costs hundreds of milliseconds. The store counts, per
namespace, how many memories hold each term (``term_docs``; the empty term
counts the memories), and a query keeps only its rarest terms, in rising
order, while the documents they match add up to at most
:data:`KEYWORD_POSTINGS`. A word most memories share tells BM25 little
anyway (its IDF is near zero); the vector still sees it.

Each indexed word starts with its namespace's tag (:func:`space_token`), so
the postings of ``refund`` in one tenant are a term of their own: a query
never reads, let alone scores, another tenant's memories with the same
words. ``term_docs`` counts the words themselves.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable
from itertools import chain

from context_core.memory_store.namespaces import space_token

__all__ = [
    "HELD_TERMS",
    "KEYWORD_POSTINGS",
    "RANK",
    "TermDocs",
    "count_terms",
    "indexed_words",
    "match_query",
    "plain_words",
]

#: A keyword match's score (BM25; lower is better, as FTS5 ranks).
RANK = "bm25(terms)"

_TAG = len(space_token(""))


def indexed_words(namespace: str, words: str) -> str:
    """``words`` (space-separated terms) as the index holds them for ``namespace``."""
    tag = space_token(namespace)
    return " ".join(tag + word for word in words.split())


def plain_words(indexed: str) -> str:
    """The terms of an indexed ``words`` value, without their namespace tag."""
    return " ".join(word[_TAG:] for word in indexed.split())


#: The most documents a keyword query's terms may match together.
KEYWORD_POSTINGS = 1000

_UPSERT = (
    "INSERT INTO term_docs (namespace, term, docs) VALUES (?, ?, ?)"
    " ON CONFLICT (namespace, term) DO UPDATE SET docs = docs + excluded.docs"
)


def count_terms(
    db: sqlite3.Connection, namespace: str, added: Iterable[str], removed: Iterable[str]
) -> Counter[str]:
    """Moves ``term_docs`` by the memories indexed (``added``) and no longer
    indexed (``removed``), each given as its space-separated terms; returns
    the move, term by term."""
    added = list(added)
    delta = Counter(chain.from_iterable(set(words.split()) for words in added))
    delta[""] += len(added)
    for words in removed:
        delta.subtract(set(words.split()))
        delta[""] -= 1
    db.executemany(_UPSERT, [(namespace, term, n) for term, n in delta.items() if n])
    return delta


#: Terms a namespace's :class:`TermDocs` holds before it starts again.
HELD_TERMS = 100_000


class TermDocs(dict[str, int]):
    """How many memories of one namespace hold each term a search asked
    for (0: none), as read from ``term_docs``. The store moves it by its own
    writes (:meth:`moved`, as they commit) and drops it when a memory of the
    namespace was written or removed by anyone else, so what it holds is
    what the database would say; a search then reads only terms it has not
    seen, where most of a conversation's words come back turn after turn."""

    def moved(self, delta: Counter[str]) -> None:
        """The counts after a write that moved ``term_docs`` by ``delta``
        (:func:`count_terms`'s answer); a term not held stays unread."""
        for term, n in delta.items():
            held = self.get(term)
            if held is not None:
                self[term] = max(0, held + n)


def match_query(
    db: sqlite3.Connection, namespace: str, terms: str, *, limit: int = 32, known: TermDocs | None = None
) -> str | None:
    """The FTS5 query for ``terms`` (from :func:`~context_core.memory_store.store.search_terms`)
    in ``namespace``: its rarest terms, OR'ed, within :data:`KEYWORD_POSTINGS`;
    ``None`` when no term is rare enough, or none is indexed. ``known``:
    the counts already read, kept in step by the caller (see :class:`TermDocs`)."""
    distinct = list(dict.fromkeys(terms.split()))[:limit]
    if not distinct:
        return None
    if known is None:
        known = TermDocs()
    unread = [term for term in distinct if term not in known]
    if len(known) + len(unread) > HELD_TERMS:
        known.clear()
        unread = distinct
    if unread:
        marks = ",".join("?" * len(unread))
        read = dict(
            db.execute(
                f"SELECT term, docs FROM term_docs WHERE namespace = ? AND term IN ({marks})",
                (namespace, *unread),
            ).fetchall()
        )
        known.update((term, max(0, int(read.get(term, 0)))) for term in unread)
    docs = {term: known[term] for term in distinct if known[term] > 0}
    chosen, total = [], 0
    for term in sorted(docs, key=lambda t: (docs[t], t)):
        if total + docs[term] > KEYWORD_POSTINGS:
            break
        chosen.append(term)
        total += docs[term]
    tag = space_token(namespace)
    return " OR ".join(f'"{tag}{term}"' for term in chosen) or None
