"""The rich console the commands print their tables on.

rich handles a closed pipe (``| head``) itself by exiting with status 1;
the commands report it as a ``BrokenPipeError`` instead, which ends the
command quietly with the status a shell gives a writer killed by SIGPIPE.
Imported only by commands that print a table (rich costs its import).
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

__all__ = ["console"]


class _PipeConsole(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written to the closed pipe
        raise BrokenPipeError


def console(file: TextIO, width: int | None) -> Console:
    """A console writing to ``file``, ``width`` columns wide (``None``: the
    terminal's), no highlighting and no markup: what it prints holds the
    user's own text (messages, paths, model names), where ``[/x]`` is text,
    not a closing tag (rich raised on it, and ``x[i]`` lost its ``[i]``)."""
    return _PipeConsole(file=file, width=width, highlight=False, markup=False)
