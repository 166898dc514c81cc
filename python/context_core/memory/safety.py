"""Keeping every memory file inside its root: names, symlinks, modes.

Every file operation of memory's own goes through a descriptor of the root
directory (``dir_fd``) with a name checked against the few names a memory root
holds, and opens with ``O_NOFOLLOW``: a symlink where a memory file, a fragment
or a bookkeeping file should be is refused
(:class:`~context_core.MemoryPathError`), and so is a file with another hard
link or one that is not a regular file (a FIFO cannot hang an open either:
``O_NONBLOCK``). Files are created ``0600``, the root directory ``0700``. The
root itself may be reached through a symlink (it is the caller's choice of
path); nothing below it is.

One file is opened otherwise: ``filelock`` opens the lock file,
``.memory.lock``, by its path. It is created and checked here first (through
the root's descriptor, as above), and ``filelock`` 3.20.1 and later open it
with ``O_NOFOLLOW`` too, so a symlink swapped in between is refused, never
followed (:class:`~context_core.MemoryFiles` turns the ``ELOOP`` into a
:class:`~context_core.MemoryPathError`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from context_core.errors import MemoryPathError, memory_storage_error
from context_core.memory.facts import FRAGMENT_NAME

__all__ = [
    "GC_NAME",
    "GENERATION_NAME",
    "LOCK_NAME",
    "MEMORY_NAME",
    "PENDING_NAME",
    "check_name",
    "ensure_root",
    "fsync_dir",
    "fsync_dir_of",
    "open_file",
    "open_root",
    "read_file",
    "write_all",
]

MEMORY_NAME = "MEMORY.md"
LOCK_NAME = ".memory.lock"
GC_NAME = ".memory_gc"
PENDING_NAME = ".memory.pending"
GENERATION_NAME = ".memory.generation"
FILE_MODE = 0o600
DIR_MODE = 0o700

_SPECIAL = re.compile(r"\.tmp-[0-9a-f]{8,32}|\.(?:merged|new)-" + FRAGMENT_NAME.pattern)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def check_name(name: str) -> str:
    """``name`` if a memory root may hold it (``MEMORY.md``, a fragment, the
    lock, ``.memory_gc``, the pending-append record, the generation token, a
    temporary file); else
    :class:`~context_core.MemoryPathError` (so ``..``, ``/`` and anything
    else never reach the file system)."""
    if not isinstance(name, str):
        raise MemoryPathError(f"a memory file name must be a str, got {type(name).__name__}")
    if name in (MEMORY_NAME, LOCK_NAME, GC_NAME, PENDING_NAME, GENERATION_NAME):
        return name
    if FRAGMENT_NAME.fullmatch(name) or _SPECIAL.fullmatch(name):
        return name
    raise MemoryPathError(
        f"{name!r} is not a memory file name (MEMORY.md or auto-YYYY-MM-DD-xxxx.md, inside the root)"
    )


def ensure_root(path: str, *, create: bool) -> str:
    """The root's absolute path; created ``0700`` (with missing parents) when
    ``create``. :class:`~context_core.MemoryPathError` if it is not a
    directory (or a path component is not one),
    :class:`~context_core.MemoryStorageError` if it cannot be created or
    read (permissions, a read-only or full file system)."""
    root = os.path.abspath(path)
    try:
        if create and not os.path.lexists(root):
            with suppress(FileExistsError):
                os.makedirs(root, mode=DIR_MODE)
                os.chmod(root, DIR_MODE)  # whatever the umask
        info = os.stat(root)
    except FileNotFoundError:
        raise MemoryPathError(f"memory root {root} does not exist") from None
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG):
            raise MemoryPathError(f"memory root {root}: {error.strerror or error}") from error
        raise memory_storage_error(f"memory root {root}: {error.strerror or error}", error, root) from error
    if not stat.S_ISDIR(info.st_mode):
        raise MemoryPathError(f"memory root {root} is not a directory")
    return root


@contextmanager
def open_root(root: str) -> Iterator[int]:
    """A descriptor of the root directory, closed on exit."""
    try:
        fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError as error:
        raise memory_storage_error(f"cannot open memory root {root}: {error}", error, root) from error
    try:
        yield fd
    finally:
        os.close(fd)


def _refuse(root: str, name: str, why: str) -> MemoryPathError:
    return MemoryPathError(f"{os.path.join(root, name)} {why}; refused")


def open_file(root: str, dir_fd: int, name: str, flags: int, *, create: bool = False) -> int | None:
    """Open ``name`` in the root without following a symlink. ``create``: make
    it (``0600``) if missing. ``None`` if it is missing and not ``create``.
    A symlink, a hard-linked file or a non-regular file raises
    :class:`~context_core.MemoryPathError`."""
    check_name(name)
    flags |= _NOFOLLOW | _CLOEXEC | _NONBLOCK
    created = False
    try:
        if create:
            try:
                fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=dir_fd)
                created = True
            except FileExistsError:
                fd = os.open(name, flags, dir_fd=dir_fd)
        else:
            fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError as error:
        if create:
            path = os.path.join(root, name)
            raise memory_storage_error(f"cannot create {path}", error, path) from None
        return None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK):
            raise _refuse(root, name, "is a symlink") from None
        if error.errno == errno.EISDIR:
            raise _refuse(root, name, "is a directory") from None
        path = os.path.join(root, name)
        raise memory_storage_error(f"cannot open {path}: {error}", error, path) from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(root, name, "is not a regular file")
        if info.st_nlink > 1:
            raise _refuse(root, name, "has another hard link")
        if created:
            os.fchmod(fd, FILE_MODE)  # whatever the umask
        if flags & _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException as error:
        os.close(fd)
        if isinstance(error, OSError) and not isinstance(error, MemoryPathError):
            path = os.path.join(root, name)
            raise memory_storage_error(f"{path}: {error.strerror or error}", error, path) from error
        raise
    return fd


def read_file(root: str, dir_fd: int, name: str) -> bytes | None:
    """The whole file, or ``None`` if it does not exist."""
    fd = open_file(root, dir_fd, name, os.O_RDONLY)
    if fd is None:
        return None
    try:
        return read_rest(fd)
    except OSError as error:
        path = os.path.join(root, name)
        raise memory_storage_error(f"cannot read {path}: {error}", error, path) from error
    finally:
        os.close(fd)


def read_rest(fd: int) -> bytes:
    """Everything from ``fd``'s position to the end of its file."""
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (one ``os.write`` unless the kernel writes short)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - write returns > 0 or raises
            raise OSError(errno.EIO, "write wrote nothing")
        view = view[written:]


def fsync_dir(dir_fd: int) -> None:
    """Make renames, creations and deletions in the root durable."""
    with suppress(OSError):  # some file systems refuse fsync on a directory
        os.fsync(dir_fd)


def fsync_dir_of(path: str) -> None:
    """:func:`fsync_dir` of the directory holding ``path``: a file made or
    renamed there keeps its name through a power loss."""
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        fsync_dir(directory)
    finally:
        os.close(directory)
