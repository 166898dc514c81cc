"""An agent's long-term memory as files: :class:`MemoryFiles` (MEMORY.md and
its fragments), the fact line format, and the offline extractor and
consolidator used when no model is given."""

from __future__ import annotations

from context_core.memory.consolidate import consolidate_facts, consolidate_items
from context_core.memory.extract import extract_facts
from context_core.memory.facts import KINDS, Fact, Pointer, RawLine, normalize, parse_fact, parse_reply
from context_core.memory.files import AppendResult, ConsolidateResult, MemoryFiles

__all__ = [
    "KINDS",
    "AppendResult",
    "ConsolidateResult",
    "Fact",
    "MemoryFiles",
    "Pointer",
    "RawLine",
    "consolidate_facts",
    "consolidate_items",
    "extract_facts",
    "normalize",
    "parse_fact",
    "parse_reply",
]
