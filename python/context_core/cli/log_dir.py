"""A message log named on the command line: its own directory, or a
Session's directory (which holds it as ``log/``), read as far as it can be."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from context_core.cli.count import InputError

if TYPE_CHECKING:
    from context_core.log import MessageLog

__all__ = ["open_log", "readable", "unreadable"]


def open_log(path: str) -> tuple[MessageLog, Path]:
    """The log at ``path`` (or at ``path/log``), opened read-only, and the
    directory it is in."""
    from context_core import LogCorruptError, LogNotFoundError
    from context_core.log import MessageLog

    for where in (Path(path), Path(path) / "log"):
        try:
            return MessageLog.open(where, readonly=True), where
        except LogNotFoundError:
            continue
        except LogCorruptError as error:
            raise unreadable(where, error) from None
    raise InputError(f"{path}: no message log there (a log's directory, or a Session's that holds one)")


def readable(log: MessageLog, seqs: list[int]) -> list[tuple[int, Any]]:
    """``(seq, payload)`` of the nodes that read, one at a time once a
    batch does not: a damaged record is left out, not the whole read."""
    from context_core import LogCorruptError

    try:
        return list(zip(seqs, log.read(seqs), strict=True))
    except LogCorruptError:
        found = []
        for seq in seqs:
            with contextlib.suppress(LogCorruptError):
                found.append((seq, log.read([seq])[0]))
        return found


def unreadable(where: Path | str, error: Exception) -> InputError:
    """A log too damaged to read, and how to repair it."""
    return InputError(
        f"{where}: {error}; MessageLog.repair({str(where)!r}) keeps every intact record"
        " (on a copy, if the log is in use)"
    )
