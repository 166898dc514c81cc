"""A message log named on the command line: its own directory, or a
Session's directory (which holds it as ``log/``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from context_core.cli.count import InputError

if TYPE_CHECKING:
    from context_core.log import MessageLog

__all__ = ["open_log", "unreadable"]


def open_log(path: str) -> MessageLog:
    """The log at ``path`` (or at ``path/log``), opened read-only."""
    from context_core import LogCorruptError, LogNotFoundError
    from context_core.log import MessageLog

    for where in (Path(path), Path(path) / "log"):
        try:
            return MessageLog.open(where, readonly=True)
        except LogNotFoundError:
            continue
        except LogCorruptError as error:
            raise unreadable(where, error) from None
    raise InputError(f"{path}: no message log there (a log's directory, or a Session's that holds one)")


def unreadable(where: Path | str, error: Exception) -> InputError:
    """A log too damaged to read, and how to repair it."""
    return InputError(
        f"{where}: {error}; MessageLog.repair({str(where)!r}) keeps every intact record"
        " (on a copy, if the log is in use)"
    )
