"""The exact facts a session's compaction finds, held until a session
closes.

Compaction sends the exact values of the messages a summary hides (ids,
paths, ports) to memory. MEMORY.md is part of the cached prompt, so a
session writes it at its close only, with its other learnings; and a
session closed with ``persist=False`` learns nothing, these facts included.

They are held in the session directory (``held_facts``, a JSON line a fact),
not in memory: a process killed, a ``with`` block that raised or a close
whose write failed leaves them for the next session that closes, as it
leaves its messages. Each fact keeps where it was found (the last seq of
the messages the summary covers), so the close writes it among the
learnings in the order they were said (the later value of a key is the
newer), and the value its key had in memory when it was held: where
another session has written a value of that key since, the held one is
older and is not written.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from context_core.errors import storage_error
from context_core.memory import MemoryFiles
from context_core.memory.facts import Fact, parse_line, to_facts

__all__ = ["HeldFact", "HeldFacts", "newest_values"]

_NAME = "held_facts"


@dataclass(frozen=True)
class HeldFact:
    """A fact compaction found, ``seq`` the last of the messages it came
    from, ``before`` its key's newest value in memory when it was held."""

    fact: Fact
    seq: int
    before: str | None


def newest_values(files: MemoryFiles) -> dict[str, str]:
    """Each key's newest value in ``files`` (by signature)."""
    return {fact.identity: fact.signature for fact in files.facts() if fact.identity is not None}


class HeldFacts:
    """A compactor's memory (``hold``) for a session: the facts go to the
    session directory ``root`` (kept in this object for a session without
    one), for :meth:`take` at a close. Thread-safe: the compactor holds
    facts on its own thread."""

    def __init__(self, files: MemoryFiles, root: str = "") -> None:
        self.files = files
        self.path = os.path.join(root, _NAME) if root else ""
        self._kept: list[HeldFact] = []
        self._lock = threading.Lock()

    def hold(self, facts: Iterable[Fact | str], seq: int) -> int:
        """Hold ``facts``, found in messages up to ``seq``; how many."""
        batch = to_facts(facts)
        if not batch:
            return 0
        newest = newest_values(self.files)
        held = [HeldFact(fact, seq, newest.get(fact.identity or "")) for fact in batch]
        with self._lock:
            if not self.path:
                self._kept.extend(held)
                return len(held)
            lines = "".join(
                json.dumps({"seq": h.seq, "line": h.fact.line(), "before": h.before}) + "\n" for h in held
            )
            try:
                with open(self.path, "a", encoding="utf-8") as out:
                    out.write(lines)
                    out.flush()
                    os.fsync(out.fileno())
            except OSError as error:
                raise self._storage_error(error) from error
        return len(held)

    def take(self) -> list[HeldFact]:
        """The facts held (a torn last line, a crash's, left out), oldest
        first; still held until :meth:`clear`."""
        with self._lock:
            if not self.path:
                return list(self._kept)
            try:
                with open(self.path, encoding="utf-8", errors="replace") as held:
                    lines = held.read().splitlines()
            except FileNotFoundError:
                return []
            except OSError as error:
                raise self._storage_error(error) from error
        out = []
        for line in lines:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                record = json.loads(line)
                fact = parse_line(record["line"])
                seq, before = record["seq"], record["before"]
                if isinstance(fact, Fact) and isinstance(seq, int) and isinstance(before, (str, type(None))):
                    out.append(HeldFact(fact, seq, before))
        return out

    def _storage_error(self, error: OSError) -> Exception:
        return storage_error(f"{self.path}: {error.strerror or error}", error.errno, self.path)

    def clear(self) -> None:
        """No fact held any more (written, or dropped)."""
        with self._lock:
            self._kept.clear()
            if self.path:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
