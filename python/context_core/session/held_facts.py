"""The exact facts a session's compaction finds, held until a session
closes.

Compaction sends the exact values of the messages a summary hides (ids,
paths, ports) to memory. MEMORY.md is part of the cached prompt, so a
session writes it at its close only, with its other learnings; and a
session closed with ``persist=False`` learns nothing, these facts included.

They are held in the session directory (``held_facts``, a JSON line a fact),
not in memory: a process killed, a ``with`` block that raised or a close
whose write failed leaves them for the next session that closes, as it
leaves its messages. Each fact keeps the seq of the newest message it was
found in: the close writes it among the learnings in the order they were
said (see ``Session._in_order``), so the later value of a key is the
newer. Like the learnings, they
are written when a session closes: of two sessions on one memory, the one
that closes last writes last.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from context_core.errors import storage_error
from context_core.memory.facts import Fact, parse_line, to_facts
from context_core.memory.safety import fsync_dir_of

__all__ = ["HeldFact", "HeldFacts"]

_NAME = "held_facts"


@dataclass(frozen=True)
class HeldFact:
    """A fact compaction found, ``seq`` the newest message it was found in."""

    fact: Fact
    seq: int


class HeldFacts:
    """A compactor's memory (``hold``) for a session: the facts go to the
    session directory ``root``, for :meth:`take` at a close. Thread-safe:
    the compactor holds facts on its own thread."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, _NAME)
        self._lock = threading.Lock()
        self._closed = False

    def hold(self, facts: Iterable[Fact | str], seq: int) -> int:
        """Hold ``facts``, found in message ``seq``; how many (none once
        closed: a compaction that outlived its session's close)."""
        held = [HeldFact(fact, seq) for fact in to_facts(facts)]
        if not held:
            return 0
        with self._lock:
            if self._closed:
                return 0
            lines = "".join(json.dumps({"seq": h.seq, "line": h.fact.line()}) + "\n" for h in held)
            try:
                created = not os.path.exists(self.path)
                with open(self.path, "a+b") as out:
                    out.seek(0, os.SEEK_END)
                    if out.tell():
                        out.seek(-1, os.SEEK_END)
                        if out.read(1) != b"\n":
                            lines = "\n" + lines  # a torn last line (a crash's) ends before these
                    out.write(lines.encode("utf-8"))
                    out.flush()
                    os.fsync(out.fileno())
                if created:  # the file's name too, or a power loss could drop the file
                    fsync_dir_of(self.path)
            except OSError as error:
                raise self._storage_error(error) from error
        return len(held)

    def take(self) -> list[HeldFact]:
        """The facts held (a torn last line, a crash's, left out), oldest
        first; still held until :meth:`clear`."""
        with self._lock:
            try:
                with open(self.path, encoding="utf-8", errors="replace") as held:
                    lines = held.read().splitlines()
            except FileNotFoundError:
                return []
            except OSError as error:
                raise self._storage_error(error) from error
        out = []
        for line in lines:
            record = None
            with contextlib.suppress(ValueError, RecursionError):  # a torn line (a crash's), an edit
                record = json.loads(line)
            if not isinstance(record, dict):
                continue
            text, seq = record.get("line"), record.get("seq")
            if isinstance(text, str) and type(seq) is int:
                fact = parse_line(text)
                if isinstance(fact, Fact):
                    out.append(HeldFact(fact, seq))
        return out

    def _storage_error(self, error: OSError) -> Exception:
        return storage_error(f"{self.path}: {error.strerror or error}", error.errno, self.path)

    def clear(self) -> None:
        """No fact held any more (written, or dropped)."""
        with self._lock, contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        """Hold nothing more: the session closed."""
        with self._lock:
            self._closed = True
