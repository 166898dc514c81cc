"""How far a session directory's log has been learned from: the ``learned``
file holds the number of log nodes (seqs ``0..n-1``) whose messages went to
MEMORY.md and the store. A session learns from there on when it closes, so
the messages of a process that died before its close are learned by the
next session that closes, not lost. Written after the learning it records
(a lost write means learning again, which both memories take as near
duplicates), by rename, so it is never half-written.
"""

from __future__ import annotations

import os

from context_core._logging import library_logger
from context_core.errors import ContextCoreError, storage_error
from context_core.session.markers import write_by_rename

logger = library_logger()

__all__ = ["read_learned", "write_learned"]

_NAME = "learned"


def read_learned(root: str, length: int) -> int:
    """The number of nodes learned from, at most ``length`` (the log's);
    a directory without the file (a new session, or one made before it was
    kept) starts at ``length``, and records it if it can (a directory it
    cannot write to still opens: its close says so if it learns)."""
    where = os.path.join(root, _NAME)
    try:
        with open(where, encoding="ascii") as handle:
            text = handle.read().strip()
    except FileNotFoundError:
        try:
            write_learned(root, length)
        except ContextCoreError as error:
            logger.warning("context_core: %s; a crash before this session's close loses its learnings", error)
        return length
    except (OSError, UnicodeDecodeError):
        return length  # unreadable: nothing older is learned again, nothing newer is lost
    return min(int(text), length) if text.isdigit() else length


def write_learned(root: str, length: int) -> None:
    """Record that the first ``length`` nodes have been learned from."""
    where = os.path.join(root, _NAME)
    try:
        write_by_rename(where, f"{length}\n")
    except OSError as error:
        raise storage_error(f"{where}: {error.strerror or error}", error.errno, where) from error
