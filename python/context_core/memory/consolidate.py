"""The deterministic consolidator: what ``consolidate()`` does with no model.

Given memory lines oldest first (``MEMORY.md``'s, then each fragment's in
pointer order), :func:`consolidate_items`:

* removes exact and near duplicates (same key and text after
  :func:`~context_core.memory.facts.normalize`; kind ignored): one line stays,
  written as its newest occurrence;
* keeps only the newest value of each key: a fact with the same key as an
  older one (whatever their kinds) replaces it;
* keeps every other line (headings, prose) where it was, drops pointer lines
  (the caller writes its own), blank lines at the start and the end, and
  blank lines beyond one in a row.

The survivor of a group takes the place of the group's oldest line, so a
section of ``MEMORY.md`` keeps its facts under its heading. The result is
never longer than the input, and consolidating it again changes nothing.

What it does not do: it does not understand meaning. Two facts that say the
same thing in different words both stay ("use Postgres" / "the database is
PostgreSQL"); a fact without a key is never retired by a newer one that
contradicts it; a stale fact stays until a newer fact with its key arrives.
That is what a model (``consolidate(llm=...)``) is for.
"""

from __future__ import annotations

from collections.abc import Iterable

from context_core.memory.facts import Fact, Item, Pointer, RawLine

__all__ = ["consolidate_facts", "consolidate_items"]


def consolidate_items(items: Iterable[Item]) -> list[Item]:
    """Facts deduplicated, each key's newest value kept, other lines in place
    (pointer lines dropped); see the module's documentation."""
    slots: list[Item | None] = []
    by_signature: dict[str, int] = {}
    by_identity: dict[str, int] = {}
    for item in items:
        if isinstance(item, Pointer):
            continue
        if isinstance(item, RawLine):
            slots.append(item)
            continue
        signature, identity = item.signature, item.identity
        found = {
            s
            for s in (by_signature.get(signature), by_identity.get(identity) if identity else None)
            if s is not None
        }
        if not found:
            slot = len(slots)
            slots.append(item)
        else:
            slot = min(found)
            for old_slot in found:
                old = slots[old_slot]
                assert isinstance(old, Fact)
                _forget(old, old_slot, by_signature, by_identity)
                if old_slot != slot:
                    slots[old_slot] = None
            slots[slot] = item
        by_signature[signature] = slot
        if identity is not None:
            by_identity[identity] = slot
    kept: list[Item] = []
    for slotted in slots:
        if slotted is None:
            continue
        if _blank(slotted) and (not kept or _blank(kept[-1])):
            continue  # no blank line first, none twice
        kept.append(slotted)
    while kept and _blank(kept[-1]):
        kept.pop()
    return kept


def _blank(item: Item) -> bool:
    return isinstance(item, RawLine) and not item.text.strip()


def _forget(fact: Fact, slot: int, by_signature: dict[str, int], by_identity: dict[str, int]) -> None:
    if by_signature.get(fact.signature) == slot:
        del by_signature[fact.signature]
    identity = fact.identity
    if identity is not None and by_identity.get(identity) == slot:
        del by_identity[identity]


def consolidate_facts(facts: Iterable[Fact]) -> list[Fact]:
    """:func:`consolidate_items` on facts alone (oldest first): duplicates
    removed, each key's newest value kept, in the order of each group's oldest
    fact."""
    return [item for item in consolidate_items(facts) if isinstance(item, Fact)]
