"""The memory layer: MEMORY.md, read through :class:`~context_core.MemoryFiles`,
re-read only when the file changed.

A turn checks the file with one ``stat`` (about 1 µs) and reuses the text it
read before when the file's identity, size and change times are the same;
:class:`~context_core.MemoryFiles` writes by appending (the size changes) or
by an atomic rename (a new inode), so either shows. A root given as a path
must exist (a missing one is refused, never silently an empty memory); it is
never created here.
"""

from __future__ import annotations

import os
from typing import Union

from context_core.errors import InvalidTypeError, MemoryPathError
from context_core.memory import MemoryFiles

__all__ = ["MemoryLayer", "MemorySource"]

MemorySource = Union[MemoryFiles, str, "os.PathLike[str]"]
"""A :class:`~context_core.MemoryFiles`, or the path of a memory root."""


class MemoryLayer:
    """MEMORY.md's text, cached by the file's ``stat``."""

    __slots__ = ("_path", "_signature", "_text", "files")

    def __init__(self, source: MemorySource) -> None:
        if isinstance(source, MemoryFiles):
            self._attach(source)
        elif isinstance(source, (str, os.PathLike)):
            root = os.fspath(source)
            if not os.path.isdir(root):
                # A typo here would otherwise mean a prompt with no memory, silently.
                raise MemoryPathError(
                    f"memory root {root!r} is not a directory; create it with "
                    "MemoryFiles(path), or pass memory=None for no memory section"
                )
            self._attach(MemoryFiles(root, create=False))
        else:
            raise InvalidTypeError(f"memory must be a MemoryFiles or a path, got {type(source).__name__}")
        self._signature: tuple[int, ...] | None = None
        self._text = ""

    def _attach(self, files: MemoryFiles) -> None:
        self.files: MemoryFiles = files
        self._path = files.memory_path

    def read(self) -> str:
        """MEMORY.md's text now ("" while there is none)."""
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            self._signature, self._text = None, ""
            return ""
        signature = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if signature != self._signature:
            self._text = self.files.read()
            self._signature = signature
        return self._text
