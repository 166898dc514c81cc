"""The twin of the store's keyword index (``context_core._core._KeywordIndex``),
written from its contract in plain Python, for the differential tests.

A document is a memory's words (split on spaces): each that starts
with the index's prefix is a term (without it); every word counts in the
document's length; a term is counted at most 65,535 times in one. A
query takes the first ``max_terms`` distinct terms of its text, keeps
those some document holds, sorts them by how many
documents hold them (ties by the term) and keeps them while those counts
add up to at most ``max_postings``. Each document holding a kept term
scores, term by term in that order, BM25's
``idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * length / average))`` with
``idf = ln(1 + (n - held + 0.5) / (held + 0.5))``, ``n``
the documents held and ``average`` their mean length. The ``limit`` best
come back, highest score first, ties by the smaller key. Given a corpus
(documents, words, documents holding each term) of several namespaces,
``n``, ``average`` and ``held`` are its (never below this index's own).
The sums run in the Rust order, so the two agree bit for bit.
"""

from __future__ import annotations

import math
from collections import Counter

__all__ = ["KeywordIndex"]

K1 = 1.2
B = 0.75
ALL_TAGS = 0xFF
MAX_COUNT = 65_535  # how often a term is counted in one document, at most


class KeywordIndex:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.docs: dict[int, tuple[int, int, Counter[str]]] = {}  # key: (length, tag, term counts)
        self.holding_docs: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self.docs)

    def __contains__(self, key: int) -> bool:
        return key in self.docs

    def set_many(self, keys: list[int], words: list[str], tags: bytes | None = None) -> None:
        tags = bytes(len(keys)) if tags is None else tags
        for key, text, tag in zip(keys, words, tags, strict=True):
            self.remove(key)
            split = [w for w in text.split(" ") if w]
            counts = Counter(
                w[len(self.prefix) :] for w in split if w.startswith(self.prefix) and w != self.prefix
            )
            for term, n in counts.items():
                counts[term] = min(n, MAX_COUNT)
            self.docs[key] = (len(split), tag, counts)
            self.holding_docs.update(counts.keys())

    def shrink_to_fit(self) -> None:
        pass  # nothing to give back

    def remove(self, key: int) -> bool:
        doc = self.docs.pop(key, None)
        if doc is None:
            return False
        self.holding_docs.subtract(doc[2].keys())
        return True

    @property
    def words(self) -> int:
        return sum(length for length, _, _ in self.docs.values())

    def holding(self, term: str) -> int:
        return self.holding_docs[term]

    def chosen(self, terms: str, max_terms: int, max_postings: int) -> list[str]:
        distinct = list(dict.fromkeys(t for t in terms.split(" ") if t))[:max_terms]
        held = sorted((self.holding(t), t) for t in distinct if self.holding(t) > 0)
        chosen, total = [], 0
        for docs, term in held:
            if total + docs > max_postings:
                break
            total += docs
            chosen.append(term)
        return chosen

    def top(
        self,
        terms: str,
        limit: int,
        max_terms: int,
        max_postings: int,
        mask: int | None = None,
        corpus: tuple[int, int, dict[str, int]] | None = None,
    ) -> list[tuple[int, float]]:
        mask = ALL_TAGS if mask is None else mask
        chosen = self.chosen(terms, max_terms, max_postings)
        if not chosen or limit == 0:
            return []
        docs, words, holding = (len(self.docs), self.words, {}) if corpus is None else corpus
        # A corpus counts this index's own documents too: never fewer.
        n = float(max(docs, len(self.docs)))
        average = float(max(words, self.words)) / n
        scores: dict[int, float] = {}
        for term in chosen:
            own = self.holding(term)
            held = float(own if corpus is None else max(holding.get(term, 0), own))
            idf = math.log(1.0 + (n - held + 0.5) / (held + 0.5))
            for key, (length, tag, counts) in self.docs.items():
                freq = counts.get(term)
                if not freq or not mask & (1 << tag):
                    continue
                f = float(freq)
                part = idf * (f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * float(length) / average))
                scores[key] = scores.get(key, 0.0) + part
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]
