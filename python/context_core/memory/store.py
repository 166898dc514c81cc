"""The files of one memory root, read and written under its lock.

Everything here but :func:`read_lockless` runs while
:class:`~context_core.memory.files.MemoryFiles` holds the root's lock, through
a descriptor of the root (:mod:`~context_core.memory.safety`).

**Appends** (:meth:`Store.append_bytes`) are atomic per batch. Before the one
``os.write`` on an ``O_APPEND`` descriptor, ``.memory.pending`` records the file,
its inode, the offset, the length and a SHA-256 of the batch (synced first
with ``durability="always"``); after the write (and its fsync) the record is
cleared. A writer killed mid-write leaves the record behind: the next lock
holder finds the batch incomplete and cuts the file back to the offset, or
finds it whole and keeps it. A short write (a full disk) is cut back at once.
Only bytes a record covers are ever cut: a last line without its newline that
no record covers (a hand edit) is read as a line like any other, and an append
first ends it with a newline (part of the recorded batch).

**New fragments** (:meth:`Store.place`) are written as ``.new-<name>``
(through a temporary file, synced); then their pointer lines are appended to
``MEMORY.md`` in one recorded append, which is the commit; then they are
renamed to their names. When the pointers would not fit in ``max_lines``,
``MEMORY.md`` is replaced instead, as a consolidation does (below), with its
newest lines moved to a new fragment in their place
(:mod:`~context_core.memory.layout`). A fragment that no pointer names (put
there by hand) gets its pointer at the next lock (or is removed if empty).

**Consolidation** (:meth:`Store.commit`) never mixes states:

1. new fragments (for facts that do not fit in ``MEMORY.md``) are written as
   ``.new-<name>``;
2. each merged fragment is renamed ``.merged-<name>``;
3. a new random generation token is written to ``.memory.generation``
   (synced): a consolidation that read memory before and waited for a model
   sees it changed and writes nothing. It changes before the commit, so a
   crash in between costs at worst such a consolidation, never lets a stale
   one through (an inode number cannot tell: a file system reuses them);
4. the new ``MEMORY.md`` is written to a temporary file, synced and renamed
   over the old one (then the directory is synced): this rename is the commit;
5. ``.new-<name>`` files are renamed to their names, ``.merged-<name>`` files
   removed; ``.memory_gc`` is touched.

Recovery (:meth:`Store.recover`, at every lock) reads the current
``MEMORY.md``: a ``.merged-X`` or ``.new-X`` whose ``X`` it points to (and that
is missing) is renamed back to ``X``, any other is removed, and temporary
files are removed. So a crash before step 4 leaves the old state, after it the
new one. Nothing is lost either way; a crash can at worst leave a fragment's
facts twice (removed by the next consolidation).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

from context_core.errors import MemoryPathError, MemoryStorageError, memory_storage_error
from context_core.memory.facts import FRAGMENT_NAME, Fact, Item, Pointer, parse_line
from context_core.memory.layout import Plan, plan
from context_core.memory.safety import (
    GC_NAME,
    GENERATION_NAME,
    MEMORY_NAME,
    PENDING_NAME,
    check_name,
    fsync_dir,
    open_file,
    read_file,
    read_rest,
    write_all,
)

__all__ = ["Cached", "Store"]


@dataclass
class Cached:
    """One memory file as last read: its lines parsed, up to its last newline."""

    name: str
    ino: int = -1
    size: int = 0  # bytes on disk when read
    mtime_ns: int = 0
    complete: int = 0  # bytes up to and including the last newline
    items: list[Item] = field(default_factory=list)
    signatures: set[str] = field(default_factory=set)
    newest: dict[str, str] = field(default_factory=dict)  # a key (identity) -> its last fact's signature
    tail: bytes = b""  # the last bytes up to ``complete``: a grown file must still end its old part so
    pointer_names: list[str] = field(default_factory=list)
    open_end: bool = False  # the last item was read from a last line without its newline

    def facts(self) -> list[Fact]:
        return [item for item in self.items if isinstance(item, Fact)]

    def pointers(self) -> list[str]:
        return self.pointer_names


TAIL = 64


def _parse(cached: Cached, data: bytes) -> None:
    """Add ``data``'s lines to ``cached``; a last line without its newline too
    (read under the lock, after recovery: no append is under way, so it is a
    hand edit, not a torn batch), marked ``open_end``."""
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1]
    if end < len(data):
        lines.append(data[end:])
        cached.open_end = True
    for raw in lines:
        item = parse_line(raw.decode("utf-8", "surrogateescape").rstrip("\r"))
        cached.items.append(item)
        if isinstance(item, Fact):
            cached.signatures.add(item.signature)
            if item.identity is not None:
                cached.newest[item.identity] = item.signature
        elif isinstance(item, Pointer):
            cached.pointer_names.append(item.name)
    cached.complete += end
    cached.tail = (cached.tail + data[:end])[-TAIL:]


def read_lockless(root: str, dir_fd: int) -> bytes:
    """MEMORY.md's whole lines, read without the lock (for :meth:`MemoryFiles.read`).

    A last line without its newline is included (as if it had one) only when no
    append was under way: ``.memory.pending`` is empty after the read and the
    file's size is still what was read. Otherwise it may be a batch being
    written, or one a killed writer left torn, and is left out."""
    for _ in range(3):
        fd = open_file(root, dir_fd, MEMORY_NAME, os.O_RDONLY)
        if fd is None:
            return b""
        try:
            data = read_rest(fd)
            if not data or data.endswith(b"\n"):
                return data
            if read_file(root, dir_fd, PENDING_NAME):
                break  # an append is under way, or was cut short by a kill
            if os.fstat(fd).st_size == len(data):
                return data + b"\n"
        except OSError as error:
            path = os.path.join(root, MEMORY_NAME)
            raise memory_storage_error(f"cannot read {path}: {error}", error, path) from error
        finally:
            os.close(fd)
    return data[: data.rfind(b"\n") + 1]


def encode(lines: Iterable[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape")


class Store:
    """The files of one root while its lock is held (``dir_fd`` is the root's)."""

    def __init__(
        self, root: str, dir_fd: int, cache: dict[str, Cached], *, durable: bool, max_lines: int
    ) -> None:
        self.root = root
        self.dir_fd = dir_fd
        self.cache = cache
        self.durable = durable
        self.max_lines = max_lines

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def storage_error(self, name: str, error: OSError) -> MemoryStorageError:
        if isinstance(error, MemoryStorageError):
            return error  # already names its own file (a temporary one, say)
        return memory_storage_error(f"{self.path(name)}: {error.strerror or error}", error, self.path(name))

    # -- reading --------------------------------------------------------------------

    def load(self, name: str) -> Cached | None:
        """The file parsed (from the cache when unchanged, reading only what was
        appended since when it grew and still ends its old part as it did);
        ``None`` if it does not exist. An edit in place that keeps the size and
        the modification time, or grows the file keeping its old last bytes,
        goes unseen: edit memory files by replacing them, as editors do."""
        cached = self.cache.get(name)
        if cached is not None:  # unchanged: one lstat, no open
            try:
                info = os.stat(name, dir_fd=self.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                self.cache.pop(name, None)
                return None
            except OSError as error:
                raise self.storage_error(name, error) from error
            if (
                stat.S_ISREG(info.st_mode)
                and info.st_nlink == 1
                and (info.st_ino, info.st_size, info.st_mtime_ns)
                == (cached.ino, cached.size, cached.mtime_ns)
            ):
                return cached
        fd = open_file(self.root, self.dir_fd, name, os.O_RDONLY)
        if fd is None:
            self.cache.pop(name, None)
            return None
        try:
            info = os.fstat(fd)
            if cached is not None and cached.ino == info.st_ino and not cached.open_end:
                start = cached.complete
                if info.st_size >= cached.size and os.pread(
                    fd, len(cached.tail), start - len(cached.tail)
                ) == (cached.tail):  # grew by appends (a file edited in place is read again)
                    data = os.pread(fd, info.st_size - start, start)
                    _parse(cached, data)
                    cached.size, cached.mtime_ns = start + len(data), info.st_mtime_ns
                    return cached
            cached = Cached(name, info.st_ino)
            data = read_rest(fd)
            _parse(cached, data)
            cached.size, cached.mtime_ns = len(data), info.st_mtime_ns
            self.cache[name] = cached
            return cached
        except OSError as error:
            raise self.storage_error(name, error) from error
        finally:
            os.close(fd)

    def listing(self) -> dict[str, str]:
        """Names in the root that memory owns, each with what it is
        (``fragment``, ``tmp``, ``merged``, ``new``); a symlinked fragment raises."""
        out = {}
        try:
            with os.scandir(self.dir_fd) as entries:
                for entry in entries:
                    name = entry.name
                    if FRAGMENT_NAME.fullmatch(name):
                        if entry.is_symlink():
                            raise MemoryPathError(f"{self.path(name)} is a symlink; refused")
                        out[name] = "fragment"
                    elif name.startswith(".tmp-"):
                        out[name] = "tmp"
                    elif name.startswith(".merged-") and FRAGMENT_NAME.fullmatch(name[8:]):
                        out[name] = "merged"
                    elif name.startswith(".new-") and FRAGMENT_NAME.fullmatch(name[5:]):
                        out[name] = "new"
        except OSError as error:
            raise self.storage_error(".", error) from error
        return out

    # -- recovery -------------------------------------------------------------------

    def recover(self) -> tuple[Cached, list[Cached]]:
        """Finish or undo what a killed process left (see the module's
        documentation); ``(MEMORY.md, fragments in pointer order)``."""
        self._undo_pending()
        listing = self.listing()
        memory = self.load(MEMORY_NAME) or Cached(MEMORY_NAME)
        pointed = set(memory.pointers())
        changed = False
        for name, what in list(listing.items()):
            try:
                if what == "tmp":
                    os.unlink(name, dir_fd=self.dir_fd)
                elif what in ("merged", "new"):
                    target = name.split("-", 1)[1]
                    if target in pointed and target not in listing:
                        os.rename(name, target, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                        listing[target] = "fragment"
                    else:
                        os.unlink(name, dir_fd=self.dir_fd)
                else:
                    continue
                changed = True
            except FileNotFoundError:
                continue
            except OSError as error:
                raise self.storage_error(name, error) from error
        orphans = sorted(n for n, what in listing.items() if what == "fragment" and n not in pointed)
        adopt = []
        for name in orphans:
            cached = self.load(name)
            if cached is None:
                continue
            if not cached.items:
                try:
                    os.unlink(name, dir_fd=self.dir_fd)
                except FileNotFoundError:
                    pass
                except OSError as error:
                    raise self.storage_error(name, error) from error
                self.cache.pop(name, None)
                changed = True
            else:
                adopt.append(name)
        if changed and self.durable:
            fsync_dir(self.dir_fd)
        if adopt:
            self.place(memory, (), adopt=adopt)
            memory = self.load(MEMORY_NAME) or Cached(MEMORY_NAME)
        fragments = []
        for name in dict.fromkeys(memory.pointers()):
            cached = self.load(name)
            if cached is not None:
                fragments.append(cached)
        return memory, fragments

    def _undo_pending(self) -> None:
        fd = open_file(self.root, self.dir_fd, PENDING_NAME, os.O_RDWR, create=True)
        assert fd is not None
        try:
            record = os.pread(fd, 512, 0)
            if not record:
                return
            try:
                name, ino, offset, length, digest = record.decode().split()
                check_name(name)
                ino_, offset_, length_ = int(ino), int(offset), int(length)
            except (ValueError, MemoryPathError):
                name = ""  # a record cut short: its append never started
            if name:
                self._check_batch(name, ino_, offset_, length_, digest)
            os.ftruncate(fd, 0)
        except OSError as error:
            raise self.storage_error(PENDING_NAME, error) from error
        finally:
            os.close(fd)

    def _check_batch(self, name: str, ino: int, offset: int, length: int, digest: str) -> None:
        """Keep the recorded batch if it is whole, else cut the file back to
        where the batch began."""
        target = open_file(self.root, self.dir_fd, name, os.O_RDWR)
        if target is None:
            return
        try:
            info = os.fstat(target)
            if info.st_ino != ino or info.st_size <= offset:
                return
            batch = os.pread(target, length, offset)
            if len(batch) == length and hashlib.sha256(batch).hexdigest() == digest:
                return
            os.ftruncate(target, offset)
            os.fsync(target)
            self.cache.pop(name, None)
        finally:
            os.close(target)

    # -- appending ------------------------------------------------------------------

    def append_bytes(self, name: str, data: bytes) -> None:
        """Append ``data`` (whole lines) to ``name``, atomically (see the module's
        documentation); the file is created (``0600``) if missing."""
        fd = open_file(self.root, self.dir_fd, name, os.O_RDWR | os.O_APPEND, create=True)
        assert fd is not None
        pending = None
        try:
            info = os.fstat(fd)
            offset = info.st_size
            if offset and os.pread(fd, 1, offset - 1) != b"\n":
                data = b"\n" + data  # end a hand-written last line first (it is kept)
            pending = open_file(self.root, self.dir_fd, PENDING_NAME, os.O_RDWR, create=True)
            assert pending is not None
            digest = hashlib.sha256(data).hexdigest()
            os.pwrite(pending, f"{name} {info.st_ino} {offset} {len(data)} {digest}\n".encode(), 0)
            if self.durable:
                os.fdatasync(pending)
            try:
                write_all(fd, data)
                if self.durable:
                    os.fsync(fd)
            except OSError:
                os.ftruncate(fd, offset)  # a short write (a full disk): as it was
                raise
            os.ftruncate(pending, 0)
        except OSError as error:
            raise self.storage_error(name, error) from error
        finally:
            os.close(fd)
            if pending is not None:
                os.close(pending)

    def new_fragment_name(self, taken: Iterable[str] = ()) -> str:
        """A fragment name for today (UTC) that nothing in the root uses."""
        listing = set(self.listing()) | set(taken)
        day = time.strftime("%Y-%m-%d", time.gmtime())
        while True:
            name = f"auto-{day}-{secrets.token_hex(2)}.md"
            if not ({name, f".merged-{name}", f".new-{name}"} & listing):
                return name

    def write_new(self, name: str, data: bytes) -> None:
        """Create ``name`` holding ``data`` (synced), through a temporary file."""
        tmp = f".tmp-{secrets.token_hex(8)}"
        fd = open_file(self.root, self.dir_fd, tmp, os.O_WRONLY, create=True)
        assert fd is not None
        try:
            write_all(fd, data)
            if self.durable:
                os.fsync(fd)
            os.close(fd)
            fd = -1
            os.rename(tmp, name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        except OSError as error:
            if fd >= 0:
                os.close(fd)
            with suppress(OSError):
                os.unlink(tmp, dir_fd=self.dir_fd)
            raise self.storage_error(name, error) from error
        if self.durable:
            fsync_dir(self.dir_fd)

    def place(self, memory: Cached, batch: Sequence[Item], *, adopt: Sequence[str] = ()) -> list[str]:
        """Put ``batch`` in new fragments (or point to the existing fragments
        ``adopt``), their pointers in MEMORY.md, keeping MEMORY.md within
        ``max_lines`` lines (see :mod:`~context_core.memory.layout`); the
        fragments that hold the batch, in order. ``memory`` is MEMORY.md as
        recovered under this lock."""
        items = memory.items
        first = next((i for i, item in enumerate(items) if isinstance(item, Pointer)), len(items))
        head, rest = items[:first], items[first:]
        adjacent = not rest and not adopt  # the batch follows the head directly
        tail = len(adopt) if adopt else (0 if adjacent else len(batch))
        layout = plan(
            len(head), len(batch) if adjacent else 0, len(rest), tail, self.max_lines, tail_fixed=bool(adopt)
        )
        if layout is None:  # the lines after the first pointer fill MEMORY.md already
            if adopt:
                layout = Plan(len(head), self.max_lines)  # a hand-placed fragment is pointed to anyway
            else:
                last = memory.pointers()[-1]
                self.append_bytes(last, encode(item.line() for item in batch))
                return [last]
        keep, size = layout
        stream = list(head[keep:]) + (list(batch) if adjacent else [])
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        tail_chunks = [] if adjacent or adopt else [batch[i : i + size] for i in range(0, len(batch), size)]
        names: list[str] = []
        for _ in chunks + tail_chunks:
            names.append(self.new_fragment_name(names))
        new = {
            name: encode(item.line() for item in chunk)
            for name, chunk in zip(names, chunks + tail_chunks, strict=True)
        }
        pointers = [Pointer(name).line() for name in names[len(chunks) :]] + [
            Pointer(n).line() for n in adopt
        ]
        if keep == len(head):  # nothing moves: the new pointers are appended
            pointers = [Pointer(name).line() for name in names[: len(chunks)]] + pointers
            try:
                for name, data in new.items():
                    self.write_new(f".new-{name}", data)
                self.append_bytes(MEMORY_NAME, encode(pointers))  # the commit
                for name in new:
                    os.rename(f".new-{name}", name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            except OSError as error:
                raise self.storage_error(MEMORY_NAME, error) from error
            if new and self.durable:
                fsync_dir(self.dir_fd)
        else:  # the head's newest lines move to a fragment in their place: MEMORY.md is replaced
            lines = [item.line() for item in head[:keep]] + [Pointer(n).line() for n in names[: len(chunks)]]
            lines += [item.line() for item in rest] + pointers
            self.commit(lines, new, (), consolidated=False)
        if adjacent:  # the fragments from the one where the batch starts
            return names[(len(head) - keep) // size :]
        return names[len(chunks) :]

    # -- consolidation --------------------------------------------------------------

    def commit(
        self,
        memory_lines: Sequence[str],
        new: dict[str, bytes],
        merged: Sequence[str],
        *,
        consolidated: bool = True,
    ) -> None:
        """Replace MEMORY.md by ``memory_lines``, create the fragments ``new``
        (name -> content) and remove the ``merged`` ones, crash-safely (see the
        module's documentation); then touch ``.memory_gc`` if this was a
        consolidation (not lines moved out of a full MEMORY.md)."""
        try:
            for name, data in new.items():
                self.write_new(f".new-{name}", data)
            for name in merged:
                try:
                    os.rename(name, f".merged-{name}", src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                except FileNotFoundError:
                    continue
            if self.durable:
                fsync_dir(self.dir_fd)
            self.new_generation()
            self.write_new(MEMORY_NAME, encode(memory_lines))  # the commit: one rename
            for name in new:
                os.rename(f".new-{name}", name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            for name in merged:
                try:
                    os.unlink(f".merged-{name}", dir_fd=self.dir_fd)
                except FileNotFoundError:
                    continue
                self.cache.pop(name, None)
            if self.durable:
                fsync_dir(self.dir_fd)
        except OSError as error:
            raise self.storage_error(MEMORY_NAME, error) from error
        if consolidated:
            self.touch_gc()

    def generation(self) -> str:
        """The token of the last committed consolidation ("" before the first)."""
        return (read_file(self.root, self.dir_fd, GENERATION_NAME) or b"").decode("ascii", "replace")

    def new_generation(self) -> None:
        """Write a new random token to ``.memory.generation`` (synced when durable)."""
        fd = open_file(self.root, self.dir_fd, GENERATION_NAME, os.O_WRONLY, create=True)
        assert fd is not None
        try:
            token = f"{secrets.token_hex(16)}\n".encode()
            os.pwrite(fd, token, 0)  # same length every time: no truncation needed
            os.ftruncate(fd, len(token))
            if self.durable:
                os.fsync(fd)
        except OSError as error:
            raise self.storage_error(GENERATION_NAME, error) from error
        finally:
            os.close(fd)

    def touch_gc(self) -> None:
        fd = open_file(self.root, self.dir_fd, GC_NAME, os.O_WRONLY, create=True)
        assert fd is not None
        try:
            os.utime(fd)
        except OSError as error:
            raise self.storage_error(GC_NAME, error) from error
        finally:
            os.close(fd)

    def gc_age(self) -> float | None:
        """Seconds since ``.memory_gc`` was touched (``None`` if it never was)."""
        fd = open_file(self.root, self.dir_fd, GC_NAME, os.O_RDONLY)
        if fd is None:
            return None
        try:
            return time.time() - os.fstat(fd).st_mtime
        except OSError as error:
            raise self.storage_error(GC_NAME, error) from error
        finally:
            os.close(fd)
