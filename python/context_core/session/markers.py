"""A session directory's small marker files, each written whole: to a
temporary file, then renamed over the old one, so a reader (or a process
killed mid-write) sees the old text or the new, never half of it."""

from __future__ import annotations

import contextlib
import os

from context_core.memory.safety import fsync_dir_of

__all__ = ["write_by_rename"]


def write_by_rename(where: str, text: str, *, durable: bool = False) -> None:
    """``where`` holds ``text`` (ASCII) once this returns; an ``OSError``
    leaves it as it was, and no temporary file behind. ``durable``: synced
    to disk, file and directory, so a power loss keeps it too."""
    temporary = f"{where}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="ascii") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, where)
        if durable:
            fsync_dir_of(where)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
