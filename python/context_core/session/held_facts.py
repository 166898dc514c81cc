"""The exact facts a session's compaction finds, held until the session
closes.

Compaction sends the exact values of the messages a summary hides (ids,
paths, ports) to memory. MEMORY.md is part of the cached prompt, so a
session writes it at its close only, with its other learnings; and a
session closed with ``persist=False`` learns nothing, these facts
included. A process killed before its close loses them (its messages stay
in the log, and the next session that closes learns from them as usual).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from context_core.memory.facts import Fact, to_facts
from context_core.memory.files import AppendResult

__all__ = ["HeldFacts"]


class HeldFacts:
    """Takes a compactor's facts (as :meth:`MemoryFiles.append` does) and
    holds them for the session's close. Thread-safe: the compactor runs on
    its own thread."""

    def __init__(self) -> None:
        self._facts: list[Fact] = []
        self._lock = threading.Lock()

    def append(self, facts: Iterable[Fact | str]) -> AppendResult:
        batch = to_facts(facts)
        with self._lock:
            self._facts.extend(batch)
        return AppendResult(tuple(batch), (), None)

    def take(self) -> list[Fact]:
        """The facts held, now no longer held."""
        with self._lock:
            taken, self._facts = self._facts, []
        return taken
