"""A message log named on the command line: its own directory, or a
Session's directory (which holds it as ``log/``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from context_core.cli.count import InputError

if TYPE_CHECKING:
    from context_core.log import MessageLog

__all__ = ["open_log"]


def open_log(path: str) -> MessageLog:
    """The log at ``path`` (or at ``path/log``), opened read-only."""
    from context_core import LogNotFoundError
    from context_core.log import MessageLog

    try:
        return MessageLog.open(path, readonly=True)
    except LogNotFoundError:
        inner = Path(path) / "log"
        if inner.is_dir():
            try:
                return MessageLog.open(inner, readonly=True)
            except LogNotFoundError:
                pass
    raise InputError(f"{path}: no message log there (a log's directory, or a Session's that holds one)")
