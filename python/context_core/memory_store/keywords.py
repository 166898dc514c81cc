"""Keyword search that stays fast however many memories share a word.

BM25 scores every document a query term matches, so ``refund OR order``
over 100,000 memories would score most of them. The store counts, per
namespace, how many memories hold each term, and a query keeps only its
rarest terms, in rising order, while the documents they match add up to
at most :data:`KEYWORD_POSTINGS`. A word most memories share tells BM25
little anyway (its IDF is near zero); the vector still sees it.

A search asks the namespace's keyword index, held in memory beside its
vectors (:mod:`~context_core.memory_store.vectors`), which keeps the same
rule with counts of its own. Writes ask the database: the FTS5 table
``terms`` holds each memory's words (and is what that index is loaded
from), and ``term_docs`` the counts, moved in the same transaction as the
words, so a write's near-duplicate check sees every other writer's.

Each indexed word starts with its namespace's tag (:func:`space_token`), so
the postings of ``refund`` in one tenant are a term of their own: a query
never reads, let alone scores, another tenant's memories with the same
words. ``term_docs`` counts the words themselves.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Iterable
from itertools import chain

from context_core.memory_store.namespaces import space_token

__all__ = [
    "KEYWORD_POSTINGS",
    "QUERY_TERMS",
    "RANK",
    "count_terms",
    "indexed_words",
    "match_query",
    "plain_words",
    "query_terms",
    "search_terms",
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

#: The distinct terms of a query's text (its first) a keyword query weighs.
QUERY_TERMS = 32

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


# Runs of the scripts written without spaces between words: Chinese
# characters, and Japanese hiragana and katakana (full and half width).
_PAIRED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]+")
_WORDS = re.compile(r"[^\W_]+")
# ASCII letters and digits lowered, every other byte a space.
_ASCII_WORDS = bytes(c if chr(c).isalnum() and c < 128 else 32 for c in range(256)).lower()


def search_terms(text: str) -> str:
    """The words the keyword index holds for ``text``: lowered words, with
    each run of Chinese characters or Japanese kana as its overlapping pairs
    (so ``日志轮转`` matches ``日志``, and ``ログのローテーション`` matches
    ``ローテーション``: those scripts put no space between words)."""
    if text.isascii():  # the same words, three times faster than the regex
        return " ".join(text.encode().translate(_ASCII_WORDS).decode().split())
    lowered = text.lower()
    if _PAIRED.search(lowered) is not None:
        lowered = _PAIRED.sub(_pairs, lowered)
    return " ".join(_WORDS.findall(lowered))


def _pairs(run: re.Match[str]) -> str:
    # Each word-character stretch of the run on its own, as a word of text
    # would split it; a lone character stays whole.
    out = []
    for stretch in _WORDS.findall(run.group()):
        out += [stretch] if len(stretch) == 1 else [stretch[i : i + 2] for i in range(len(stretch) - 1)]
    return f" {' '.join(out)} "


def query_terms(terms: str) -> list[str]:
    """The terms of ``terms`` (space-separated) a keyword query weighs: its
    first :data:`QUERY_TERMS` distinct ones, in order."""
    return list(dict.fromkeys(t for t in terms.split(" ") if t))[:QUERY_TERMS]


def match_query(db: sqlite3.Connection, namespace: str, terms: str) -> str | None:
    """The FTS5 query for ``terms`` (from :func:`search_terms`)
    in ``namespace``: its rarest terms, OR'ed, within :data:`KEYWORD_POSTINGS`;
    ``None`` when no term is rare enough, or none is indexed."""
    distinct = query_terms(terms)
    if not distinct:
        return None
    marks = ",".join("?" * len(distinct))
    read = dict(
        db.execute(
            f"SELECT term, docs FROM term_docs WHERE namespace = ? AND term IN ({marks})",
            (namespace, *distinct),
        ).fetchall()
    )
    docs = {term: int(read[term]) for term in distinct if int(read.get(term, 0)) > 0}
    chosen, total = [], 0
    for term in sorted(docs, key=lambda t: (docs[t], t)):
        if total + docs[term] > KEYWORD_POSTINGS:
            break
        chosen.append(term)
        total += docs[term]
    tag = space_token(namespace)
    return " OR ".join(f'"{tag}{term}"' for term in chosen) or None
