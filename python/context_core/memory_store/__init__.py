"""The memory store: what the agent learns (preferences, past tasks, tool
lessons), kept in SQLite and found again when it matters.

:class:`MemoryStore` holds typed memories (:data:`KINDS`) per namespace (a
:class:`Namespace`: a tenant, a user of it, an agent of that user), searched
entity first (an id, a path or a name the query shares is never lost), then
by vector and keyword, then reranked by importance, recency and use
(:mod:`~context_core.memory_store.ranking`). Entities and the offline
hashing embedder run in Rust (:func:`entities`).
"""

from __future__ import annotations

from context_core._core import _entities
from context_core.memory_store.embedders import (
    CallableEmbedder,
    Embedder,
    HashingEmbedder,
    OpenAIEmbedder,
    WordLlamaEmbedder,
    aembed,
    default_embedder,
)
from context_core.memory_store.extract import Extracted, aextract_memories, extract_memories
from context_core.memory_store.namespaces import Namespace
from context_core.memory_store.store import KINDS, ForgetReport, Hit, Memory, MemoryStore, search_terms

__all__ = [
    "KINDS",
    "CallableEmbedder",
    "Embedder",
    "Extracted",
    "ForgetReport",
    "HashingEmbedder",
    "Hit",
    "Memory",
    "MemoryStore",
    "Namespace",
    "OpenAIEmbedder",
    "WordLlamaEmbedder",
    "aembed",
    "aextract_memories",
    "default_embedder",
    "entities",
    "extract_memories",
    "search_terms",
]


def entities(text: str) -> list[tuple[str, str]]:
    """``(kind, value)`` of every entity ``text`` names, each value once, in
    order of first appearance: ids (``A-8812``, ``order_123``, ``PAY-42``),
    UUIDs, hex hashes, paths (and their file names), file names, URLs,
    e-mails, @handles, dates, times, numbers with units (``200 ms``; bare
    numbers of three digits or more), versions, ``snake_case`` and
    ``CamelCase`` identifiers, capitalised names (``Alice Chen``, ``AWS``;
    not a lone capitalised word that starts a sentence) and quoted strings.
    Values are in normal form (ASCII lowered, full-width read as ASCII, a
    path without ``./``) so that ``Services/Payments/retry.go`` and
    ``services/payments/retry.go`` meet. In Rust; the twin is
    ``context_core.reference.entities``."""
    return _entities(text)
