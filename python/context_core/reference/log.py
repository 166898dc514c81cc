"""The message log in plain Python, written from docs/log-format.md (the files)
and the shared MessageLog API: the twin of the Rust-backed ``context_core.MessageLog``.

Each file written here is readable by the Rust implementation and the other way
round. The writer stores payloads raw (codec 0); the reader also decodes LZ4
blocks (codec 1). Not thread-safe: one log object belongs to one thread at a time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import operator
import os
import secrets
import stat
import struct
import time
import weakref
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from context_core.errors import (
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    LogClosedError,
    LogCorruptError,
    LogForkedError,
    LogIndexError,
    LogLockedError,
    LogNotFoundError,
    LogStorageError,
)
from context_core.errors import storage_error as make_storage_error
from context_core.reference.select import Analysis, MessageInfo, _shared_backend
from context_core.reference.tokenizer import MAX_DEPTH

__all__ = ["HEADER_DTYPE", "MessageLog", "RepairReport", "decode_lz4_block"]

# -- the format (docs/log-format.md) ---------------------------------------------

VERSION = 1
NONE = 2**64 - 1  # "no seq": the parent of a root, an empty head
INDEX_MAGIC, DATA_MAGIC, META_MAGIC = b"CCLOGIDX", b"CCLOGDAT", b"CCLOGMET"
FRAME_MAGIC = b"CCFRAME1"
FILE_HEADER_SIZE = RECORD_SIZE = 64
FRAME_PREFIX = 8 + RECORD_SIZE  # magic, then the header copy
FILE_HEADER = struct.Struct("<8sIIQ16s16s")  # the 56 bytes the header's crc covers
NODE = struct.Struct("<QQdQIIIffIBBBB")  # the 60 bytes the record's check covers
META = struct.Struct("<QQQQQ16s")  # the 56 bytes after the file header the meta crc covers
U32 = struct.Struct("<I")
F32 = struct.Struct("<f")
U32_MAX = 2**32 - 1

HEADER_DTYPE = np.dtype(
    [
        ("seq", "<u8"),
        ("parent", "<u8"),
        ("timestamp", "<f8"),
        ("offset", "<u8"),
        ("stored_len", "<u4"),
        ("raw_len", "<u4"),
        ("tokens", "<u4"),
        ("weight", "<f4"),
        ("priority", "<f4"),
        ("hash", "<u4"),
        ("role", "u1"),
        ("kind", "u1"),
        ("tags", "u1"),
        ("flags", "u1"),
        ("check", "<u4"),
    ]
)
assert HEADER_DTYPE.itemsize == RECORD_SIZE

ROLES = {"system": 0, "user": 1, "assistant": 2, "tool": 3, "other": 4}
SYSTEM, OTHER = ROLES["system"], ROLES["other"]
MESSAGE, SUMMARY, BRANCH, LOST = 0, 1, 2, 3
PINNED, CALLS, RESULTS, HAS_TEXT = 1, 2, 4, 8
CODEC_SHIFT, LEVEL_SHIFT = 4, 6
RAW, LZ4 = 0, 1
LZ4_MAX_EXPANSION = 255  # an LZ4 block yields at most 255 bytes per byte it holds
SUMMARY_PREFIX = {
    3: "Summary of the conversation so far:\n",
    2: "Summary of an earlier part of the conversation:\n",
}
NEWEST_LEVEL_2 = 3  # level-2 summaries context_view keeps

# Space is reserved ahead in steps that double, so a full disk fails before a write.
INDEX_FIRST_STEP, DATA_FIRST_STEP, MAX_STEP = 64 << 10, 1 << 20, 64 << 20
DEFAULT_ENCODING = "o200k_base"
DURABILITIES = ("always", "batch", "never")
BATCH_APPENDS, BATCH_SECONDS = 64, 0.02
LOCK_POLL_SECONDS = 0.01
READER_GRACE_SECONDS = 0.05
SCAN_CHUNK = 1 << 20
SECTOR = 512  # a disk writes a sector whole or not at all: a torn frame has a blank one


def crc(data: bytes) -> int:
    return zlib.crc32(data)


def align8(n: int) -> int:
    return (n + 7) & ~7


def corrupt(path: str, offset: int, what: str) -> LogCorruptError:
    error = LogCorruptError(f"{path}: offset {offset}: {what}")
    error.file, error.offset, error.reason = os.path.basename(path), offset, what
    return error


@contextlib.contextmanager
def storage(path: str, action: str) -> Iterator[None]:
    """Turn an OSError that is not ours (a full disk, a file too large, permissions...)
    into LogStorageError naming the file, what was being done and the OS error."""
    try:
        yield
    except ContextCoreError:
        raise
    except OSError as error:
        raise storage_error(path, action, error) from error


def not_found(directory: Any) -> LogNotFoundError:
    error = LogNotFoundError(f"{directory}: no message log")
    error.errno, error.filename = errno.ENOENT, str(directory)
    error.strerror = os.strerror(errno.ENOENT)
    return error


def storage_error(path: str, action: str, error: OSError) -> LogStorageError:
    return make_storage_error(f"{path}: could not {action}: {error.strerror or error}", error.errno, path)


# -- node headers -------------------------------------------------------------------


class Node(NamedTuple):
    """One node header (64 bytes on disk: these fields, then ``check``)."""

    seq: int
    parent: int
    timestamp: float
    offset: int
    stored_len: int
    raw_len: int
    tokens: int
    weight: float
    priority: float
    hash: int
    role: int
    kind: int
    tags: int
    flags: int

    def pack(self) -> bytes:
        body = NODE.pack(*self)
        return body + U32.pack(crc(body))

    @property
    def codec(self) -> int:
        return (self.flags >> CODEC_SHIFT) & 3

    @property
    def level(self) -> int:
        return self.flags >> LEVEL_SHIFT

    @property
    def frame_end(self) -> int:
        return self.offset + align8(FRAME_PREFIX + self.stored_len)

    @property
    def parent_seq(self) -> int | None:
        return None if self.parent == NONE else self.parent


def unpack_node(record: bytes) -> Node | None:
    """The header in a 64-byte record, or None when its check does not match."""
    body = record[: NODE.size]
    if len(record) < RECORD_SIZE or crc(body) != U32.unpack_from(record, NODE.size)[0]:
        return None
    return Node(*NODE.unpack(body))


def node_problem(node: Node, expected_offset: int | None) -> str | None:
    """What is wrong with a header whose check matches (a bug or a crafted file,
    not a torn write): refused before a parent link is followed or a length read."""
    if node.parent != NONE and node.parent >= node.seq:
        return f"node {node.seq} has parent {node.parent}, not an earlier node"
    if node.kind > LOST:
        return f"node {node.seq} has unknown kind {node.kind}"
    if node.codec > LZ4:
        return f"node {node.seq} has unknown codec {node.codec}"
    if node.level not in ((2, 3) if node.kind == SUMMARY else (0,)):
        return f"node {node.seq} has summary level {node.level} for kind {node.kind}"
    if expected_offset is not None and node.offset != expected_offset:
        return f"node {node.seq} has its frame at {node.offset}, not at {expected_offset}"
    if node.offset < FILE_HEADER_SIZE or node.offset % 8:
        return f"node {node.seq} has its frame at {node.offset}"
    if node.seq > (node.offset - FILE_HEADER_SIZE) // FRAME_PREFIX:  # frames of >= 72 bytes from byte 64
        return f"node {node.seq} cannot have its frame at {node.offset}"
    if node.codec == RAW and node.stored_len != node.raw_len:
        return f"node {node.seq} is stored raw but its lengths differ"
    if node.raw_len > LZ4_MAX_EXPANSION * node.stored_len:  # what no LZ4 block decodes to
        return f"node {node.seq} claims {node.raw_len} bytes from {node.stored_len} stored"
    return None


#: The latest timestamp a node may have, in seconds since the epoch (the
#: year 5138): a time in milliseconds is refused, not taken as the far future.
MAX_TIMESTAMP = 1e11


def f32(value: float, what: str) -> float:
    """The value as the header stores it (refusing one that is not finite,
    or that f32 cannot hold)."""
    try:
        stored: float = F32.unpack(F32.pack(value))[0]
    except OverflowError:
        stored = math.inf
    if not math.isfinite(stored):
        raise InvalidInputError(f"{what}: must be a finite number within the f32 range, not {value}")
    return stored


def number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{what}: expected a number, got {type(value).__name__}")
    if isinstance(value, float):
        return float.__float__(value)  # its own value, as the extension reads a float (a subclass's too)
    try:
        return float(value)
    except OverflowError:  # an int past a float's range: as far out as infinity
        return -math.inf if value < 0 else math.inf
    except Exception:  # a subclass whose own conversion fails
        raise InvalidTypeError(f"{what}: expected a number, got {type(value).__name__}") from None


def seconds(value: Any) -> float:
    """``lock_timeout``: a finite number of seconds >= 0 (as the extension takes it)."""
    given = number(value, "lock_timeout")
    if not (math.isfinite(given) and given >= 0):
        raise InvalidInputError(f"lock_timeout must be a number of seconds >= 0, not {given}")
    return given


# -- file headers and the checkpoint ----------------------------------------------


def file_header(magic: bytes, log_id: int, encoding: str = "") -> bytes:
    record_size = RECORD_SIZE if magic == INDEX_MAGIC else 0
    body = FILE_HEADER.pack(magic, VERSION, record_size, log_id, encoding.encode("ascii"), b"")
    return body + U32.pack(crc(body)) + bytes(4)


def parse_file_header(raw: bytes, path: str, magic: bytes, log_id: int | None) -> tuple[int, str]:
    """The log id and encoding of a file header, or LogCorruptError."""
    if len(raw) < FILE_HEADER_SIZE:
        raise corrupt(path, len(raw), "file shorter than its 64-byte header")
    found, version, record_size, found_id, encoding, _ = FILE_HEADER.unpack_from(raw)
    if found != magic:
        raise corrupt(path, 0, f"bad magic {found!r}, expected {magic!r}")
    if crc(raw[: FILE_HEADER.size]) != U32.unpack_from(raw, FILE_HEADER.size)[0]:
        raise corrupt(path, FILE_HEADER.size, "file header checksum does not match")
    if version != VERSION:
        raise corrupt(path, 8, f"format version {version}, this reader knows {VERSION}")
    if record_size != (RECORD_SIZE if magic == INDEX_MAGIC else 0):
        raise corrupt(path, 12, f"record size {record_size}")
    if log_id is not None and found_id != log_id:
        raise corrupt(path, 16, f"log id {found_id:016x} is not the index's {log_id:016x}")
    try:
        name = encoding.rstrip(b"\0").decode("ascii")
    except UnicodeDecodeError:
        raise corrupt(path, 24, "encoding name is not ASCII") from None
    return found_id, name


class Checkpoint(NamedTuple):
    """The body of ``meta``; NONE stands for "no seq"."""

    # The field shadows tuple.count, which typing cannot express for a NamedTuple field.
    count: int  # type: ignore[assignment]
    head: int
    summary: int
    summary_last: int
    data_end: int

    def pack(self, log_id: int) -> bytes:
        body = META.pack(*self, b"")
        return file_header(META_MAGIC, log_id) + body + U32.pack(crc(body)) + bytes(4)


def read_checkpoint(path: str, log_id: int) -> Checkpoint | None:
    """The checkpoint in ``meta`` if it is intact (a cache: anything wrong just means no checkpoint)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # never hang on a FIFO
        try:
            raw = read_at(fd, 2 * FILE_HEADER_SIZE, 0) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        parse_file_header(raw, path, META_MAGIC, log_id)
    except (OSError, LogCorruptError):
        return None
    body = raw[FILE_HEADER_SIZE : FILE_HEADER_SIZE + META.size]
    if len(raw) < 2 * FILE_HEADER_SIZE or crc(body) != U32.unpack_from(raw, FILE_HEADER_SIZE + META.size)[0]:
        return None
    return Checkpoint(*META.unpack(body)[:5])


def write_checkpoint(directory: str, log_id: int, checkpoint: Checkpoint) -> None:
    """Replace ``meta`` atomically: written to ``meta.tmp``, then renamed."""
    temporary = os.path.join(directory, "meta.tmp")
    with storage(temporary, "write the checkpoint"):
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, checkpoint.pack(log_id), 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, os.path.join(directory, "meta"))


def forget_checkpoint(directory: str) -> None:
    """Remove ``meta`` before records it counts may change."""
    path = os.path.join(directory, "meta")
    with storage(path, "remove"), contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# -- file helpers ----------------------------------------------------------------------


def read_at(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes (fewer only at the end of the file)."""
    parts, got = [], 0
    while got < size:
        part = os.pread(fd, size - got, offset + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def read_exact(fd: int, size: int, offset: int, path: str, what: str) -> bytes:
    data = read_at(fd, size, offset)
    if len(data) < size:
        raise corrupt(path, offset + len(data), f"file ends inside {what}")
    return data


def write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def file_size(fd: int, path: str) -> int:
    with storage(path, "stat"):
        return os.fstat(fd).st_size


def all_zero(data: bytes) -> bool:
    return not data.lstrip(b"\0")


def first_nonzero(fd: int, start: int) -> int | None:
    """The offset of the first non-zero byte at or after ``start``, if any."""
    position, size = start, os.fstat(fd).st_size
    while position < size:
        chunk = read_at(fd, min(SCAN_CHUNK, size - position), position)
        if not chunk:
            break
        if rest := chunk.lstrip(b"\0"):
            return position + len(chunk) - len(rest)
        position += len(chunk)
    return None


def zero_from(fd: int, start: int) -> bool:
    """Zero every non-zero byte from ``start`` on (a torn tail); True if there were any."""
    changed, position, size = False, start, os.fstat(fd).st_size
    while position < size:
        chunk = read_at(fd, min(SCAN_CHUNK, size - position), position)
        if not chunk:
            break
        if not all_zero(chunk):
            write_all(fd, bytes(len(chunk)), position)
            changed = True
        position += len(chunk)
    return changed


def grow(fd: int, size: int, needed: int, first_step: int) -> int:
    """Reserve zero-filled space up to at least ``needed`` bytes; the new file size."""
    if needed <= size:
        return size
    target = size
    while target < needed:
        target += min(max(target, first_step), MAX_STEP)  # steps double, up to MAX_STEP
    try:
        os.posix_fallocate(fd, size, target - size)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise  # a full disk fails here, before anything is written
        os.ftruncate(fd, target)  # a file system without fallocate
    return target


def sync_directory(directory: str) -> None:
    with storage(directory, "sync the directory"):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def take_lock(directory: str, timeout: float) -> int:
    """flock(LOCK_EX) on ``<dir>/lock``, polled until ``timeout`` seconds
    pass, and taken again if the file locked is no longer the one at the
    path (removed with its directory, or replaced, while this waited);
    :class:`LogNotFoundError` if the directory is gone."""
    path = os.path.join(directory, "lock")
    # At least READER_GRACE: a reader checking bytes past the end holds the lock
    # shared for that long, and is not another writer.
    deadline = time.monotonic() + max(timeout, READER_GRACE_SECONDS)
    while True:
        fd = _lock_on(directory, path, deadline)
        try:
            now = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        except OSError as error:
            os.close(fd)
            raise storage_error(path, "stat", error) from error
        held = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)


def _lock_on(directory: str, path: str, deadline: float) -> int:
    """The lock file at ``path``, opened (made if missing) and locked by the ``deadline``."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except FileNotFoundError:
        raise not_found(directory) from None
    except OSError as error:
        raise storage_error(path, "open", error) from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidInputError(f"{path}: is not a regular file (a log's files are its own)")
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                os.close(fd)
                raise LogLockedError(f"{directory}: another writer holds the message log") from None
            time.sleep(min(LOCK_POLL_SECONDS, remaining))
        except OSError as error:
            os.close(fd)
            raise storage_error(path, "lock", error) from error


# -- payloads ----------------------------------------------------------------------------


#: The roles a chat message may have, in either provider's format.
MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def check_role(message: dict[str, Any]) -> None:
    """A message the log keeps must name a known role: a typo such as
    ``"assitant"`` would otherwise be stored and sent, for the API to refuse."""
    if "role" not in message:
        raise InvalidInputError("role: missing field")
    role = message["role"]
    if not isinstance(role, str):
        raise InvalidTypeError(f"role: expected a str, got {type(role).__name__}")
    if role not in MESSAGE_ROLES:
        known = ", ".join(MESSAGE_ROLES)
        raise InvalidInputError(f"role: unknown role {role!r}; a role is one of {known}")


def check_json(value: Any, depth: int = 0) -> None:
    """Refuse what is not JSON (tuples, sets, bytes, non-str keys, objects)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return
    if depth >= MAX_DEPTH:  # also stops reference cycles
        raise InvalidInputError(f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, list):
        for item in value:
            check_json(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidTypeError(f"a JSON object key must be str, not {type(key).__name__}")
            check_json(item, depth + 1)
    else:
        raise InvalidTypeError(f"not a JSON value: {type(value).__name__}")


def encode_json(value: Any) -> bytes:
    check_json(value)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("a string holds a lone surrogate (not valid Unicode)") from None


def decode_lz4_block(block: bytes, size: int) -> bytes:
    """Decompress one LZ4 block (the block format: no frame, no size prefix) of
    ``size`` bytes; ValueError if the block is malformed or not that size."""
    out = bytearray()
    position, end = 0, len(block)
    while position < end:
        token = block[position]
        literals, position = _lz4_length(block, position + 1, token >> 4)
        if position + literals > end or len(out) + literals > size:
            raise ValueError("LZ4 block: literals run past the block or the output")
        out += block[position : position + literals]
        position += literals
        if position == end:  # the last sequence holds literals only
            break
        if position + 2 > end:
            raise ValueError("LZ4 block: a match offset is cut off")
        distance = block[position] | block[position + 1] << 8
        length, position = _lz4_length(block, position + 2, token & 15)
        length += 4  # the minimum match
        if not 0 < distance <= len(out):
            raise ValueError(f"LZ4 block: match offset {distance} outside the output")
        if len(out) + length > size:
            raise ValueError("LZ4 block: a match runs past the output")
        start = len(out) - distance
        if distance >= length:
            out += out[start : start + length]
        else:  # the match overlaps what it writes: it repeats the last `distance` bytes
            out += (out[start:] * (length // distance + 1))[:length]
    if len(out) != size:
        raise ValueError(f"LZ4 block: the block decodes to {len(out)} bytes, not {size}")
    return bytes(out)


def _lz4_length(block: bytes, position: int, nibble: int) -> tuple[int, int]:
    """A length from its token nibble and, at 15, the extension bytes after it."""
    length = nibble
    if nibble == 15:
        while True:
            if position >= len(block):
                raise ValueError("LZ4 block: a length is cut off")
            byte = block[position]
            position += 1
            length += byte
            if byte != 255:
                break
    return length, position


def decode_payload(stored: bytes, node: Node) -> bytes:
    if node.codec == LZ4:
        return decode_lz4_block(stored, node.raw_len)
    if len(stored) != node.raw_len:
        raise ValueError(f"{len(stored)} raw bytes, the header says {node.raw_len}")
    return stored


def check_frame(frame: bytes, node: Node, record: bytes | None) -> tuple[bytes, int, str | None]:
    """The raw payload of a frame, or (b"", where, why): its first problem and where in the frame."""
    if frame[:8] != FRAME_MAGIC:
        return b"", 0, f"bad frame magic for node {node.seq}"
    if record is not None and frame[8:FRAME_PREFIX] != record:
        return b"", 8, f"the frame of node {node.seq} holds another header than its index record"
    try:
        raw = decode_payload(frame[FRAME_PREFIX : FRAME_PREFIX + node.stored_len], node)
    except ValueError as error:
        return b"", FRAME_PREFIX, f"payload of node {node.seq}: {error}"
    if crc(raw) != node.hash:
        return b"", FRAME_PREFIX, f"payload checksum of node {node.seq} does not match"
    return raw, 0, None


def read_frame(fd: int, path: str, node: Node, record: bytes) -> bytes:
    """The raw payload of a node, its frame checked against its index record."""
    size, what = FRAME_PREFIX + node.stored_len, f"the frame of node {node.seq}"
    if problem := node_problem(node, None):
        raise corrupt(path, node.offset, problem)
    if node.offset + size > file_size(fd, path):  # never a read sized by a length the file cannot hold
        raise corrupt(path, node.offset, f"file ends inside {what}")
    with storage(path, "read"):
        frame = read_exact(fd, size, node.offset, path, what)
    raw, where, why = check_frame(frame, node, record)
    if why is not None:
        raise corrupt(path, node.offset + where, why)
    return raw


def frame_at(
    read: Callable[[int, int], bytes], position: int, seq: int, *, at_least: bool = False
) -> tuple[Node | None, bytes, str | None]:
    """The valid frame of node ``seq`` (``at_least``: of any node from ``seq`` on) at
    ``position`` as (node, frame, None), or (None, b"", why) where why is None at a
    clean end (zeros or the end of the file). ``read(size, offset)`` reads the data
    file (fewer bytes only at its end)."""
    prefix = read(FRAME_PREFIX, position)
    if not prefix or all_zero(prefix[:8]):
        return None, b"", None
    if len(prefix) < FRAME_PREFIX:
        return None, b"", "the file ends inside a frame"
    if prefix[:8] != FRAME_MAGIC:
        return None, b"", "bad frame magic"
    node = unpack_node(prefix[8:])
    if node is None:
        return None, b"", "frame header checksum does not match"
    if node.seq != seq and not (at_least and node.seq > seq):
        expected = f"node {seq} or a later one" if at_least else f"node {seq}"
        return None, b"", f"the frame holds node {node.seq} where {expected} was expected"
    if problem := node_problem(node, position):
        return None, b"", problem
    frame = read(FRAME_PREFIX + node.stored_len, position)
    if len(frame) < FRAME_PREFIX + node.stored_len:
        return None, b"", "the file ends inside a frame"
    raw, _, why = check_frame(frame, node, None)
    if why is None and not payload_fits_kind(node, raw):
        why = f"the payload of node {node.seq} is not what a node of kind {node.kind} holds"
    return (None, b"", why) if why is not None else (node, frame, None)


def payload_fits_kind(node: Node, raw: bytes) -> bool:
    """What opening reads of a payload is there: nothing for a branch marker or
    a lost node, a summary's ``covers`` of earlier nodes (so a log rebuilt from
    intact frames opens)."""
    try:
        value = decode_value(raw, node)
    except (ValueError, RecursionError):
        return node.kind == MESSAGE  # a message's payload is read on demand
    if node.kind != SUMMARY:
        return True
    first: int
    last: int
    first, last = value["covers"]  # two ints: decode_value checked the summary's shape
    return 0 <= first <= last < node.seq


def decode_value(raw: bytes, node: Node) -> Any:
    """The value a payload holds: a dict, or None for a branch marker or a lost node."""
    if node.kind in (BRANCH, LOST):
        if raw:
            raise ValueError(f"a {'branch marker' if node.kind == BRANCH else 'lost node'} with a payload")
        return None
    value = json.loads(raw.decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError("the payload is not a JSON object")
    if node.kind == SUMMARY and not summary_shape_ok(value):
        raise ValueError("not a summary payload")
    return value


def summary_shape_ok(value: dict[str, Any]) -> bool:
    covers = value.get("covers")
    return (
        isinstance(value.get("summary"), str)
        and isinstance(covers, list)
        and len(covers) == 2
        and all(isinstance(c, int) and not isinstance(c, bool) for c in covers)
        and value.get("level") in (2, 3)
    )


def intact_frame_in(rest: bytes, base: int) -> tuple[int, int] | None:
    """(offset, seq) of the first intact frame in ``rest``, the data file's bytes
    from offset ``base`` (a multiple of 8) on, if any."""

    def read(size: int, offset: int) -> bytes:
        return rest[offset - base : offset - base + size]

    position = next_frame_magic(rest, 0)
    while position < len(rest):
        node, _, _ = frame_at(read, base + position, 0, at_least=True)
        if node is not None:
            return base + position, node.seq
        position = next_frame_magic(rest, position + 8)
    return None


class Tail(NamedTuple):
    """What follows a log's valid records (``MessageLog._past_the_end``)."""

    kept: int  # records whose frames hold (a writer drops the ones after)
    cut: bool
    unindexed: list[tuple[Node, bytes]]  # frames the index missed, with their records
    torn: bool  # non-zero bytes past all of that
    stranded: LogCorruptError | None  # an intact record or frame past the damage


# -- the log -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepairReport:
    """What ``MessageLog.repair`` kept and what it could not."""

    kept: int  # intact records kept
    lost: int  # records left as lost placeholders, so later seqs keep their numbers
    dropped_bytes: int  # bytes written (to the last non-zero one) that no intact frame holds
    problems: list[str]  # each naming the file and offset


_WRITERS: weakref.WeakSet[MessageLog] = weakref.WeakSet()  # open writers, for the fork hook


def _after_fork_in_child() -> None:
    for log in list(_WRITERS):
        log._forget_inherited_lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _not_before(now: float, before: float) -> float:
    """``now``, or ``before`` where that is a later (finite) time."""
    return before if math.isfinite(before) and now < before else now


class MessageLog:
    """An append-only tree of messages in a directory (open it with ``MessageLog.open``)."""

    def __init__(
        self,
        directory: str,
        *,
        readonly: bool,
        durability: str,
        lock_fd: int | None,
        encoding: str | None = None,
    ) -> None:
        """Open the files of an existing log (owning ``lock_fd`` from here on)."""
        self._directory = directory
        self._index_path = os.path.join(directory, "index")
        self._data_path = os.path.join(directory, "data")
        self._readonly, self._durability = readonly, durability
        self._lock_fd: int | None = lock_fd
        self._index_fd: int | None = None
        self._data_fd: int | None = None
        self._closed = False
        self._nodes: list[Node] = []
        self._records = bytearray()  # the index records 0..n, as on disk
        self._data_end = FILE_HEADER_SIZE
        self._head: int | None = None
        self._summary: int | None = None
        self._summary_last: int | None = None
        self._analysis: Analysis | None = None
        self._unsynced, self._last_sync = 0, time.monotonic()
        self._pid = os.getpid()  # only the process that opened a writer writes through it
        if lock_fd is not None:
            _WRITERS.add(self)
        try:
            self._index_fd = open_log_file(self._index_path, readonly)
            self._data_fd = open_log_file(self._data_path, readonly)
            self._log_id, self._encoding = self._read_file_headers()
            if encoding is not None and encoding != self._encoding:
                raise InvalidInputError(
                    f"{directory}: the log counts tokens in {self._encoding}, not {encoding}"
                )
            self._scan_index()
            if readonly:
                self._refuse_hidden_damage()
            else:
                self._recover()
            self._index_size = file_size(self._index_fd, self._index_path)
            self._data_size = file_size(self._data_fd, self._data_path)
            self._load_state()
        except BaseException:
            self._release()
            raise

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        readonly: bool = False,
        encoding: str | None = None,
        new_encoding: str | None = None,
        durability: str = "batch",
        lock_timeout: float = 0.0,
    ) -> MessageLog:
        directory = log_directory(path)
        for name, value in (("create", create), ("readonly", readonly)):
            if not isinstance(value, bool):
                raise InvalidTypeError(f"{name} must be bool, not {type(value).__name__}")
        for name, named in (("encoding", encoding), ("new_encoding", new_encoding)):
            if named is not None:
                if not isinstance(named, str):
                    raise InvalidTypeError(f"{name} must be str or None, not {type(named).__name__}")
                _shared_backend(named)  # refuses an unknown encoding
        if not isinstance(durability, str):
            raise InvalidTypeError(f"durability must be str, not {type(durability).__name__}")
        if durability not in DURABILITIES:
            raise InvalidInputError(
                f"durability must be one of {', '.join(DURABILITIES)}, not {durability!r}"
            )
        lock_timeout = seconds(lock_timeout)
        if encoding is not None and new_encoding is not None:
            raise InvalidInputError(
                "new_encoding: give encoding (the log must count in it) or new_encoding"
                " (a log this open makes counts in it), not both"
            )
        if (readonly or not create) and never_made_whole(directory):
            raise not_found(directory)
        lock_fd = None
        while not readonly:
            with storage(directory, "create the directory"):
                os.makedirs(directory, mode=0o700, exist_ok=True)
            try:
                lock_fd = take_lock(directory, lock_timeout)
                break
            except LogNotFoundError:
                if not create:
                    raise  # removed while this waited for its writer: made again only if asked
        if lock_fd is not None:
            try:
                if never_made_whole(directory):  # looked at again under the lock
                    create_log(directory, encoding or new_encoding or DEFAULT_ENCODING)
            except BaseException:
                os.close(lock_fd)
                raise
        return cls(directory, readonly=readonly, durability=durability, lock_fd=lock_fd, encoding=encoding)

    def __enter__(self) -> MessageLog:
        self._check_open()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._nodes)} nodes"
        return f"reference.MessageLog({self._directory!r}, {state})"

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._release()

    @property
    def _open_index_fd(self) -> int:
        """The index file's descriptor: open from ``__init__`` on until ``_release``,
        and read only in between (every operation runs ``_check_open`` first)."""
        assert self._index_fd is not None, "the index file is open"
        return self._index_fd

    @property
    def _open_data_fd(self) -> int:
        """The data file's descriptor (open as long as the index file's)."""
        assert self._data_fd is not None, "the data file is open"
        return self._data_fd

    # -- opening ---------------------------------------------------------------------

    def _read_file_headers(self) -> tuple[int, str]:
        with storage(self._index_path, "read"):
            raw = read_at(self._open_index_fd, FILE_HEADER_SIZE, 0)
        log_id, encoding = parse_file_header(raw, self._index_path, INDEX_MAGIC, None)
        try:
            _shared_backend(encoding)
        except InvalidInputError:
            raise corrupt(self._index_path, 24, f"unknown encoding {encoding!r}") from None
        with storage(self._data_path, "read"):
            raw = read_at(self._open_data_fd, FILE_HEADER_SIZE, 0)
        parse_file_header(raw, self._data_path, DATA_MAGIC, log_id)
        return log_id, encoding

    def _scan_index(self) -> list[Node]:
        """Take in the valid records after the known ones; the first invalid slot ends the log."""
        found: list[Node] = []
        size = 16 * RECORD_SIZE  # small first: a reader looks for new records before each operation
        while True:
            position = FILE_HEADER_SIZE + len(self._records)
            with storage(self._index_path, "read"):
                chunk = read_at(self._open_index_fd, size, position)
            for start in range(0, len(chunk) - RECORD_SIZE + 1, RECORD_SIZE):
                record = chunk[start : start + RECORD_SIZE]
                node = unpack_node(record)
                if node is None or node.seq != len(self._nodes):
                    return found
                if problem := node_problem(node, self._data_end):
                    raise corrupt(self._index_path, position + start, problem)
                self._add(node, record)
                found.append(node)
            if len(chunk) < size:
                return found
            size = min(2 * size, SCAN_CHUNK)

    def _add(self, node: Node, record: bytes) -> None:
        self._nodes.append(node)
        self._records += record
        self._data_end = node.frame_end

    def _drop_last(self) -> None:
        self._nodes.pop()
        del self._records[-RECORD_SIZE:]
        self._data_end = self._nodes[-1].frame_end if self._nodes else FILE_HEADER_SIZE

    def _recover(self) -> None:
        """docs/log-format.md, "Recovery": cut records ahead of the data, index the
        frames behind it, zero the torn tail; refuse (changing nothing intact) when
        intact records or frames lie past the damage."""
        tail = self._past_the_end(settle=True)
        if tail.stranded is not None:
            raise tail.stranded
        changed = tail.cut or tail.torn or bool(tail.unindexed)
        if tail.cut:
            forget_checkpoint(self._directory)
            while len(self._nodes) > tail.kept:
                self._drop_last()
        for node, record in tail.unindexed:  # written to the index already
            self._add(node, record)
        with storage(self._index_path, "zero its torn tail"):
            zero_from(self._open_index_fd, FILE_HEADER_SIZE + len(self._records))
        with storage(self._data_path, "zero its torn tail"):
            zero_from(self._open_data_fd, self._data_end)
            if os.fstat(self._open_data_fd).st_size < self._data_end:  # the last frame lost its padding
                os.ftruncate(self._open_data_fd, self._data_end)
                changed = True
        if changed:
            self._sync()

    def _past_the_end(self, *, settle: bool) -> Tail:
        """What follows the valid records. ``settle`` (a writer's open) drops the last
        records whose frames are not intact and writes the records of frames the
        index missed (neither loses anything intact); readers and ``verify`` change
        nothing. ``stranded`` is an intact record or frame past all of that."""
        prefix = len(self._nodes)
        kept = prefix
        while settle and kept and not self._frame_holds(kept - 1):
            last = self._nodes[kept - 1]
            if not self._never_written(last):  # written once and damaged since: repair's to rebuild
                raise corrupt(
                    self._data_path,
                    last.offset,
                    f"record {last.seq}'s frame is damaged, not torn (no sector of it is blank); "
                    "nothing is cut: run repair, which rebuilds it from the index record "
                    "if its payload is intact",
                )
            kept -= 1
        position = self._nodes[kept - 1].frame_end if kept else FILE_HEADER_SIZE
        with storage(self._index_path, "read"):
            index = read_at(self._open_index_fd, file_size(self._open_index_fd, self._index_path), 0)

        def record_at(seq: int) -> bytes:
            return index[FILE_HEADER_SIZE + seq * RECORD_SIZE : FILE_HEADER_SIZE + (seq + 1) * RECORD_SIZE]

        def valid(seq: int) -> bool:
            node = unpack_node(record_at(seq))
            return node is not None and node.seq == seq

        unindexed: list[tuple[Node, bytes]] = []
        while True:
            seq = kept + len(unindexed)
            with storage(self._data_path, "read"):
                node, frame, _ = frame_at(self._read_data, position, seq)
            if node is None or (valid(seq) and record_at(seq) != frame[8:FRAME_PREFIX]):
                break
            if settle:
                forget_checkpoint(self._directory)
                with storage(self._index_path, "write"):
                    write_all(
                        self._open_index_fd, frame[8:FRAME_PREFIX], FILE_HEADER_SIZE + seq * RECORD_SIZE
                    )
            unindexed.append((node, frame[8:FRAME_PREFIX]))
            position = node.frame_end
        # Readers stop at the first invalid slot; a writer's open stops past the frames it indexed.
        visible = kept + len(unindexed) if settle else prefix
        first = max(prefix, visible)
        slots = range(first, (len(index) - FILE_HEADER_SIZE) // RECORD_SIZE)
        stranded_records = [seq for seq in slots if valid(seq)]
        with storage(self._data_path, "read"):
            rest = read_at(
                self._open_data_fd,
                max(0, file_size(self._open_data_fd, self._data_path) - position),
                position,
            )
        torn = not all_zero(index[FILE_HEADER_SIZE + first * RECORD_SIZE :]) or not all_zero(rest)
        stranded = None
        if stranded_records:
            later = stranded_records[0]
            fix = (
                "opening it for writing indexes them again from their intact frames"
                if later < kept + len(unindexed)
                else "nothing intact is cut: run repair to salvage them"
            )
            stranded = corrupt(
                self._index_path,
                FILE_HEADER_SIZE + prefix * RECORD_SIZE,
                f"record {prefix} is damaged, yet {len(stranded_records)} later records are intact "
                f"(the first is record {later}); {fix}",
            )
        else:
            found = intact_frame_in(rest, position)
            if found is not None:
                offset, seq = found
                stranded = corrupt(
                    self._data_path,
                    position,
                    f"no intact frame where the next record's must start, yet the frame of node {seq} "
                    f"at offset {offset} is intact; nothing intact is cut: run repair to salvage it",
                )
        return Tail(kept=kept, cut=kept < prefix, unindexed=unindexed, torn=torn, stranded=stranded)

    def _refuse_hidden_damage(self) -> None:
        """A reader stops at the first invalid slot, as it must while a writer
        appends; intact records past it with no writer to blame are damage, not
        to be hidden. Confirmed under a shared hold of the lock."""
        if self._past_the_end(settle=False).stranded is None:
            return
        with hold_if_no_writer(self._directory) as held:
            if held:
                self._scan_index()
                stranded = self._past_the_end(settle=False).stranded
                if stranded is not None:
                    raise stranded

    def _read_data(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes, never more than the file holds (a crafted length
        must not size the buffer)."""
        available = file_size(self._open_data_fd, self._data_path) - offset
        return read_at(self._open_data_fd, max(0, min(size, available)), offset)

    def _never_written(self, node: Node) -> bool:
        """A torn write, not damage: the file ends before the frame does, or one of
        the frame's 512-byte sectors (at least 8 of its bytes) is all zeros."""
        end = node.offset + FRAME_PREFIX + node.stored_len
        if node_problem(node, None) is not None:
            return False
        if end > file_size(self._open_data_fd, self._data_path):
            return True
        frame = read_at(self._open_data_fd, end - node.offset, node.offset)
        starts = [node.offset, *range((node.offset // SECTOR + 1) * SECTOR, end, SECTOR)]
        for start, stop in zip(starts, [*starts[1:], end], strict=True):
            part = frame[start - node.offset : stop - node.offset]
            if (len(part) >= 8 or len(part) == len(frame)) and all_zero(part):
                return True
        return False

    def _frame_holds(self, seq: int) -> bool:
        try:
            read_frame(self._open_data_fd, self._data_path, self._nodes[seq], self._record(seq))
        except LogCorruptError:
            return False
        return True

    def _load_state(self) -> None:
        """Head and newest summary: from the checkpoint, then replaying the records after it."""
        start = 0
        checkpoint = read_checkpoint(os.path.join(self._directory, "meta"), self._log_id)
        if checkpoint is not None and self._checkpoint_fits(checkpoint):
            start = checkpoint.count
            self._head = None if checkpoint.head == NONE else checkpoint.head
            self._summary = None if checkpoint.summary == NONE else checkpoint.summary
            self._summary_last = None if self._summary is None else checkpoint.summary_last
        for node in self._nodes[start:]:
            self._apply(node)

    def _checkpoint_fits(self, checkpoint: Checkpoint) -> bool:
        """Whether a checkpoint can describe these records (else it is stale: replay all)."""
        count, head, summary, _, data_end = checkpoint
        if count > len(self._nodes):
            return False
        expected_end = self._nodes[count - 1].frame_end if count else FILE_HEADER_SIZE
        if data_end != expected_end or (count == 0) != (head == NONE):
            return False
        if head != NONE and (head >= count or self._nodes[head].kind == BRANCH):
            return False
        return summary == NONE or (summary < count and self._nodes[summary].kind == SUMMARY)

    def _apply(self, node: Node) -> None:
        """Move the head and the newest summary past one more node (the replay rules)."""
        if node.kind == BRANCH:
            self._head = node.parent_seq
            self._find_summary()
        elif node.kind == SUMMARY:
            self._head = self._summary = node.seq
            self._summary_last = self._value(node.seq)["covers"][1]
        else:
            moved = node.parent_seq != self._head  # a child of another node than the head
            self._head = node.seq
            if moved:
                self._find_summary()

    def _find_summary(self) -> None:
        self._summary = self._summary_last = None
        for seq in reversed(self._path(self._head)):
            if self._nodes[seq].kind == SUMMARY:
                self._summary = seq
                self._summary_last = self._value(seq)["covers"][1]
                return

    # -- checks before each operation ------------------------------------------------

    def _forget_inherited_lock(self) -> None:
        """In a child of fork(): close this copy of the parent's writer lock, so the
        parent's close releases it (writes are refused here anyway)."""
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self._directory}: the message log is closed")

    def _refresh(self) -> None:
        """Refuse files truncated under us; a reader takes in the writer's new records."""
        self._check_open()
        index_end = FILE_HEADER_SIZE + len(self._records)
        if (size := file_size(self._open_index_fd, self._index_path)) < index_end:
            raise corrupt(self._index_path, size, f"file truncated (its records run to {index_end})")
        last = self._nodes[-1] if self._nodes else None
        data_end = last.offset + FRAME_PREFIX + last.stored_len if last else FILE_HEADER_SIZE
        if (size := file_size(self._open_data_fd, self._data_path)) < data_end:
            raise corrupt(self._data_path, size, f"file truncated (its frames run to {data_end})")
        if self._readonly:
            for node in self._scan_index():
                self._apply(node)

    def _check_writable(self) -> None:
        self._check_open()
        if self._readonly:
            raise LogClosedError(f"{self._directory}: the message log is open read-only")
        if os.getpid() != self._pid:  # a copy inherited across fork(): the parent still writes
            error = LogForkedError(
                f"{self._directory}: opened for writing by process {self._pid}; "
                f"process {os.getpid()} cannot write through it"
            )
            error.opened_by, error.process = self._pid, os.getpid()
            raise error
        self._refresh()

    def _position(self, seq: Any, *, negative: bool = False) -> int:
        """A node's seq from an argument (counting from the end if ``negative`` allows)."""
        if isinstance(seq, bool) or not hasattr(type(seq), "__index__"):
            raise InvalidTypeError(f"a seq must be int, not {type(seq).__name__}")
        position = operator.index(seq)
        n = len(self._nodes)
        if negative and position < 0:
            position += n
        if not 0 <= position < n:
            raise LogIndexError(f"no node {seq} in a log of {n}")
        return position

    # -- reading ------------------------------------------------------------------------

    def __len__(self) -> int:
        self._refresh()
        return len(self._nodes)

    def __getitem__(self, seq: int) -> Any:
        self._refresh()
        return self._value(self._position(seq, negative=True))

    def __iter__(self) -> Iterator[Any]:
        count = len(self)
        return (self._checked_value(seq) for seq in range(count))

    def _checked_value(self, seq: int) -> Any:
        self._refresh()
        return self._value(seq)

    def read(self, seqs: Iterable[int]) -> list[Any]:
        if isinstance(seqs, (str, bytes, dict)) or not isinstance(seqs, Iterable):
            raise InvalidTypeError(f"seqs must be an iterable of ints, not {type(seqs).__name__}")
        self._refresh()
        return [self._value(self._position(seq, negative=True)) for seq in seqs]

    def _record(self, seq: int) -> bytes:
        return bytes(self._records[seq * RECORD_SIZE : (seq + 1) * RECORD_SIZE])

    def _value(self, seq: int) -> Any:
        node = self._nodes[seq]
        raw = read_frame(self._open_data_fd, self._data_path, node, self._record(seq))
        try:
            return decode_value(raw, node)
        except (ValueError, RecursionError) as error:  # json's errors are ValueErrors too
            raise corrupt(self._data_path, node.offset + FRAME_PREFIX, f"node {seq}: {error}") from None

    def headers(self) -> np.ndarray:
        self._refresh()
        return np.frombuffer(bytes(self._records), dtype=HEADER_DTYPE)  # read-only: over bytes

    def node_id(self, seq: int) -> str:
        self._refresh()
        node = self._nodes[self._position(seq, negative=True)]
        return f"{round(node.timestamp * 1e6):x}-{node.hash:08x}"

    @property
    def head(self) -> int | None:
        self._refresh()
        return self._head

    @property
    def last_summary_index(self) -> int | None:
        self._refresh()
        return self._summary_last

    @property
    def encoding(self) -> str:
        self._check_open()
        return self._encoding

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def closed(self) -> bool:
        return self._closed

    def path(self, head: int | None = None) -> list[int]:
        self._refresh()
        return self._path(self._head if head is None else self._position(head, negative=True))

    def _turns(self) -> int:
        """How many turns the active path holds: its user messages that are
        not tool results alone (results with no text of their own)."""
        self._refresh()
        nodes = [self._nodes[seq] for seq in self._path(self._head)]
        return sum(
            node.kind == MESSAGE
            and node.role == ROLES["user"]
            and (node.flags & HAS_TEXT != 0 or node.flags & RESULTS == 0)
            for node in nodes
        )

    def _path(self, head: int | None) -> list[int]:
        """The message and summary nodes from the root to ``head`` (branch markers and
        lost nodes are passed through, never listed)."""
        seqs: list[int] = []
        while head is not None:
            node = self._nodes[head]
            if node.kind in (MESSAGE, SUMMARY):
                seqs.append(head)
            head = node.parent_seq
        return seqs[::-1]

    def context_view(self) -> list[dict[str, Any]]:
        self._refresh()
        path = [self._nodes[seq] for seq in self._path(self._head)]
        pointer = -1 if self._summary_last is None else self._summary_last
        view = [
            self._value(node.seq)
            for node in path
            if node.kind == MESSAGE and node.seq <= pointer and (node.role == SYSTEM or node.flags & PINNED)
        ]
        level_3 = [node.seq for node in path if node.kind == SUMMARY and node.level == 3]
        after = level_3[-1] if level_3 else -1
        if level_3:
            view.append(self._rendered_summary(after))
        level_2 = [node.seq for node in path if node.kind == SUMMARY and node.level == 2 and node.seq > after]
        view += [self._rendered_summary(seq) for seq in level_2[-NEWEST_LEVEL_2:]]
        view += [self._value(node.seq) for node in path if node.kind == MESSAGE and node.seq > pointer]
        return view

    def _rendered_summary(self, seq: int) -> dict[str, str]:
        summary = self._value(seq)
        return render_summary(summary["summary"], summary["level"])

    def verify(self) -> None:
        """Check the file headers, every record and frame, and that nothing follows
        them; LogCorruptError names the file and offset of the first problem."""
        self._refresh()
        self._read_file_headers()
        with storage(self._index_path, "read"):
            on_disk = read_at(self._open_index_fd, len(self._records), FILE_HEADER_SIZE)
        expected_offset = FILE_HEADER_SIZE
        for seq, node in enumerate(self._nodes):
            where = FILE_HEADER_SIZE + seq * RECORD_SIZE
            if on_disk[seq * RECORD_SIZE : (seq + 1) * RECORD_SIZE] != self._record(seq):
                raise corrupt(self._index_path, where, f"record {seq} changed on disk")
            if problem := node_problem(node, expected_offset):
                raise corrupt(self._index_path, where, problem)
            self._value(seq)
            expected_offset = node.frame_end
        # Past the last record: settled, unless a writer may be appending now (the
        # lock is asked only when something there needs judging).
        tail = self._past_the_end(settle=False)
        suspect = tail.stranded is not None or tail.torn or bool(tail.unindexed)
        if not suspect:
            return
        with hold_if_no_writer(self._directory) if self._readonly else contextlib.nullcontext(True) as held:
            if not held:
                return
            self._refresh()
            tail = self._past_the_end(settle=False)
            if tail.stranded is not None:
                raise tail.stranded
            if tail.torn or tail.unindexed:
                index_end = FILE_HEADER_SIZE + len(self._records)
                raise corrupt(
                    self._index_path,
                    index_end,
                    "a torn tail follows the last record (opening the log for writing cuts it)",
                )

    # -- writing -------------------------------------------------------------------------

    def append(
        self,
        message: dict[str, Any],
        *,
        tags: Iterable[str] | None = None,
        weight: float | None = None,
        pinned: bool | None = False,
        priority: float | None = None,
        parent: int | None = None,
        timestamp: float | None = None,
    ) -> int:
        self._check_writable()
        if parent is None:
            parent_seq = self._head
        else:
            parent_seq = self._position(parent)
            if self._nodes[parent_seq].kind == BRANCH:
                raise InvalidInputError(f"node {parent_seq} is a branch marker, not a message")
        draft = self._message_node(
            len(self._nodes),
            parent_seq,
            message,
            tags=tags,
            weight=weight,
            pinned=pinned,
            priority=priority,
            timestamp=timestamp,
        )
        return self._commit([draft])[0]

    def append_many(self, messages: Iterable[dict[str, Any]]) -> list[int]:
        self._check_writable()
        if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Iterable):
            raise InvalidTypeError(f"messages must be an iterable of dicts, not {type(messages).__name__}")
        drafts: list[tuple[Node, bytes]] = []
        parent, seq = self._head, len(self._nodes)
        now = time.time()  # one clock reading for the batch
        for i, message in enumerate(messages):
            before = drafts[-1][0].timestamp if drafts else self._last_stamp()
            try:
                drafts.append(self._message_node(seq, parent, message, stamp=_not_before(now, before)))
            except (InvalidInputError, InvalidTypeError) as error:
                raise type(error)(f"messages[{i}]: {error}") from None
            parent, seq = seq, seq + 1
        return self._commit(drafts)

    def add_summary(self, text: str, covers: tuple[int, int], level: int = 2) -> int:
        self._check_writable()
        if not isinstance(text, str):
            raise InvalidTypeError(f"text must be str, not {type(text).__name__}")
        if isinstance(level, bool) or not isinstance(level, int):
            raise InvalidTypeError(f"level must be int, not {type(level).__name__}")
        if level not in SUMMARY_PREFIX:
            raise InvalidInputError(f"level must be 2 or 3, not {level}")
        first, last = summary_covers(covers)
        if not 0 <= first <= last < len(self._nodes):
            raise InvalidInputError(
                f"covers ({first}, {last}) is not 0 <= first <= last < {len(self._nodes)}"
            )
        payload = encode_json({"summary": text, "covers": [first, last], "level": level})
        # Its header facts are those of the message context_view shows for it.
        facts = self._read_message(render_summary(text, level))
        node = self._node(
            len(self._nodes),
            self._head,
            SUMMARY,
            payload,
            tokens=facts["tokens"],
            role=SYSTEM,
            tags=facts["tags"],
            flags=(HAS_TEXT if facts["has_text"] else 0) | level << LEVEL_SHIFT,
            timestamp=self._stamp(),
        )
        return self._commit([(node, payload)])[0]

    def rewind(self, seq: int) -> None:
        self._check_writable()
        target = self._position(seq, negative=True)
        if self._nodes[target].kind == BRANCH:
            raise InvalidInputError(f"node {target} is a branch marker, not a message")
        marker = self._node(len(self._nodes), target, BRANCH, b"", timestamp=self._stamp())
        self._commit([(marker, b"")])

    def _stamp(self) -> float:
        """The time of a node appended without one: the clock, but never
        before the last node's, so the log's times do not go back."""
        return _not_before(time.time(), self._last_stamp())

    def _last_stamp(self) -> float:
        return self._nodes[-1].timestamp if self._nodes else math.nan

    def _read_message(self, message: dict[str, Any]) -> MessageInfo:
        """The facts selection reads from one message (reference.select, no tool-result cap)."""
        if self._analysis is None:
            self._analysis = _shared_backend(self._encoding).analyze([], cap=None)
        return self._analysis.read(0, message)

    def _message_node(
        self,
        seq: int,
        parent: int | None,
        message: Any,
        *,
        tags: Iterable[str] | None = None,
        weight: float | None = None,
        pinned: bool | None = False,
        priority: float | None = None,
        timestamp: float | None = None,
        stamp: float | None = None,
    ) -> tuple[Node, bytes]:
        if not isinstance(message, dict):
            raise InvalidTypeError(f"a message must be a dict, not {type(message).__name__}")
        check_role(message)
        if pinned is None:  # as not given
            pinned = False
        if not isinstance(pinned, bool):
            raise InvalidTypeError(f"pinned must be bool, not {type(pinned).__name__}")
        if tags is not None:
            if isinstance(tags, (str, bytes, dict)) or not isinstance(tags, Iterable):
                raise InvalidTypeError("tags: expected a list of tag names")
            facts = self._read_message({**message, "tags": list(tags)})  # the keyword wins
        else:
            facts = self._read_message(message)
        payload = encode_json(message)
        given = number(timestamp, "timestamp") if timestamp is not None else facts["timestamp"]
        if given is not None and not 0 <= given < MAX_TIMESTAMP:
            # Checked as given: a default stamp follows the last node's,
            # which a log written before this check may hold out of range.
            raise InvalidInputError(
                f"timestamp: must be seconds since the epoch, from 0 to {MAX_TIMESTAMP:e}, not {given}"
            )
        if given is None:
            given = self._stamp() if stamp is None else stamp
        flags = (
            (PINNED if pinned or facts["pinned"] else 0)
            | (CALLS if facts["calls"] else 0)
            | (RESULTS if facts["results"] else 0)
            | (HAS_TEXT if facts["has_text"] else 0)
        )
        node = self._node(
            seq,
            parent,
            MESSAGE,
            payload,
            tokens=facts["tokens"],
            role=ROLES[facts["role"]],
            tags=facts["tags"],
            flags=flags,
            weight=facts["weight"] if weight is None else number(weight, "weight"),
            priority=facts["priority"] if priority is None else number(priority, "priority"),
            timestamp=given,
        )
        return node, payload

    @staticmethod
    def _node(
        seq: int,
        parent: int | None,
        kind: int,
        payload: bytes,
        *,
        tokens: int = 0,
        role: int = OTHER,
        tags: int = 0,
        flags: int = 0,
        weight: float | None = None,
        priority: float = 0.0,
        timestamp: float | None = None,
    ) -> Node:
        """A header for the payload, stored raw (its offset is set on commit)."""
        if timestamp is None:
            timestamp = time.time()
        if not math.isfinite(timestamp):
            raise InvalidInputError(f"timestamp must be finite, not {timestamp}")
        if len(payload) > U32_MAX or tokens > U32_MAX:
            raise InvalidInputError("the message is too large for the log (4 GiB or 2^32 tokens)")
        return Node(
            seq=seq,
            parent=NONE if parent is None else parent,
            timestamp=timestamp,
            offset=0,
            stored_len=len(payload),
            raw_len=len(payload),
            tokens=tokens,
            weight=math.nan if weight is None else f32(weight, "weight"),
            priority=f32(priority, "priority"),
            hash=crc(payload),
            role=role,
            kind=kind,
            tags=tags,
            flags=flags | RAW << CODEC_SHIFT,
        )

    def _commit(self, drafts: list[tuple[Node, bytes]]) -> list[int]:
        """Write the frames (one pwrite), then the headers that commit them (one pwrite)."""
        if not drafts:
            return []
        frames: list[bytes] = []
        records: list[bytes] = []
        nodes: list[Node] = []
        offset = self._data_end
        for draft, payload in drafts:
            node = draft._replace(offset=offset)
            record = node.pack()
            padding = bytes(align8(FRAME_PREFIX + len(payload)) - FRAME_PREFIX - len(payload))
            frames += [FRAME_MAGIC, record, payload, padding]
            records.append(record)
            nodes.append(node)
            offset = node.frame_end
        index_start = FILE_HEADER_SIZE + len(self._records)
        index_end = index_start + RECORD_SIZE * len(records)
        with storage(self._data_path, "reserve space in"):
            self._data_size = grow(self._open_data_fd, self._data_size, offset, DATA_FIRST_STEP)
        with storage(self._index_path, "reserve space in"):
            self._index_size = grow(self._open_index_fd, self._index_size, index_end, INDEX_FIRST_STEP)
        data, index = b"".join(frames), b"".join(records)
        try:
            with storage(self._data_path, "write"):
                write_all(self._open_data_fd, data, self._data_end)
            if self._durability == "always":
                with storage(self._data_path, "sync"):
                    os.fdatasync(self._open_data_fd)
            with storage(self._index_path, "write"):
                write_all(self._open_index_fd, index, index_start)
            if self._durability == "always":
                with storage(self._index_path, "sync"):
                    os.fdatasync(self._open_index_fd)
        except LogStorageError:
            # Failed: nothing of it may stay for a later open or repair to take up.
            with contextlib.suppress(OSError):
                write_all(self._open_index_fd, bytes(len(index)), index_start)
                write_all(self._open_data_fd, bytes(len(data)), self._data_end)
            raise
        for node, record in zip(nodes, records, strict=True):
            self._add(node, record)
            self._apply(node)
        self._after_write(len(nodes))
        return [node.seq for node in nodes]

    def _after_write(self, count: int) -> None:
        self._unsynced += count
        due = self._unsynced >= BATCH_APPENDS or time.monotonic() - self._last_sync >= BATCH_SECONDS
        if self._durability == "batch" and due:  # "always" synced in _commit
            self._sync()

    def _sync(self) -> None:
        with storage(self._data_path, "sync"):
            os.fdatasync(self._open_data_fd)
        with storage(self._index_path, "sync"):
            os.fdatasync(self._open_index_fd)
        self._unsynced, self._last_sync = 0, time.monotonic()

    def flush(self) -> None:
        self._check_open()
        if not self._readonly:
            self._sync()

    def close(self) -> None:
        if self._closed:
            return
        try:
            if not self._readonly and os.getpid() == self._pid:  # a forked child leaves the parent's log be
                self._sync()
                write_checkpoint(self._directory, self._log_id, self._checkpoint())
        finally:
            self._release()

    def _checkpoint(self) -> Checkpoint:
        def seq_or_none(seq: int | None) -> int:
            return NONE if seq is None else seq

        return Checkpoint(
            count=len(self._nodes),
            head=seq_or_none(self._head),
            summary=seq_or_none(self._summary),
            summary_last=seq_or_none(self._summary_last),
            data_end=self._data_end,
        )

    def _release(self) -> None:
        """Close the files and drop the lock (closing its descriptor releases the flock)."""
        self._closed = True
        for fd in (self._index_fd, self._data_fd, self._lock_fd):
            if fd is not None:
                os.close(fd)
        self._index_fd = self._data_fd = self._lock_fd = None

    # -- repair -------------------------------------------------------------------------

    @staticmethod
    def repair(path: str | os.PathLike[str], *, lock_timeout: float = 0.0) -> RepairReport:
        """Rebuild the log from every intact frame of its data file, scanning past damage
        for the next one; a record between intact ones that could not be salvaged becomes
        a lost node. New files (with a new log id) are written beside the old ones and
        renamed in, data first; ``meta`` is removed."""
        directory = log_directory(path)
        timeout = seconds(lock_timeout)  # checked first, as the extension does
        data_path = os.path.join(directory, "data")
        if not os.path.exists(data_path):
            raise not_found(directory)
        lock_fd = take_lock(directory, timeout)
        try:
            return repair_locked(directory)
        finally:
            os.close(lock_fd)


def repair_locked(directory: str) -> RepairReport:
    index_path, data_path = os.path.join(directory, "index"), os.path.join(directory, "data")
    problems: list[str] = []
    log_id, encoding = None, DEFAULT_ENCODING
    try:
        header = read_whole(index_path, FILE_HEADER_SIZE)
        log_id, encoding = parse_file_header(header, index_path, INDEX_MAGIC, None)
        _shared_backend(encoding)  # a log that opens names an encoding it can count in
    except (LogStorageError, LogCorruptError, InvalidInputError) as error:
        encoding = DEFAULT_ENCODING
        problems.append(f"{index_path}: unreadable header ({error}); counting tokens in {encoding}")
    data = read_whole(data_path)  # the reference reads it whole; the Rust core scans it
    try:
        parse_file_header(data, data_path, DATA_MAGIC, log_id)
    except LogCorruptError as error:
        problems.append(str(error))
    try:
        old_index = read_whole(index_path)
    except (ContextCoreError, OSError):
        old_index = b""
    salvage = salvage_frames(data, data_path, problems, old_index)
    compare_index(index_path, salvage.found, len(salvage.nodes), problems)
    new_id = secrets.randbits(64)
    while new_id == log_id:  # an old index must never pass for one of the new data
        new_id = secrets.randbits(64)
    frames, records = [file_header(DATA_MAGIC, new_id)], [file_header(INDEX_MAGIC, new_id, encoding)]
    offset = FILE_HEADER_SIZE
    for node, stored in salvage.nodes:
        node = node._replace(offset=offset)
        record = node.pack()
        frames += [FRAME_MAGIC, record, stored, bytes(node.frame_end - offset - FRAME_PREFIX - len(stored))]
        records.append(record)
        offset = node.frame_end
    replacement = {"data": b"".join(frames), "index": b"".join(records)}
    try:
        for name, content in replacement.items():
            write_new_file(os.path.join(directory, name + ".repair"), content, os.O_TRUNC)
    except BaseException:
        # Left behind, they would hold the space a full disk lacks and fail the next repair too.
        for name in replacement:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name + ".repair"))
        raise
    for name in replacement:  # data first: a crash between the renames leaves two log ids
        with storage(os.path.join(directory, name), "replace"):
            os.replace(os.path.join(directory, name + ".repair"), os.path.join(directory, name))
    forget_checkpoint(directory)  # it described the old files
    sync_directory(directory)
    return RepairReport(
        kept=len(salvage.nodes) - salvage.lost,
        lost=salvage.lost,
        dropped_bytes=salvage.dropped_bytes,
        problems=problems,
    )


class Salvage(NamedTuple):
    nodes: list[tuple[Node, bytes]]  # every record from seq 0, as (header, stored payload)
    found: dict[int, bytes]  # the header of each intact frame, as found, by seq
    lost: int
    dropped_bytes: int


def salvage_frames(data: bytes, data_path: str, problems: list[str], old_index: bytes = b"") -> Salvage:
    """Every intact frame of the data file (whose seq is not below the records so far),
    each seq skipped between two of them standing in as a lost node. A frame whose
    own header copy (or magic) is damaged is rebuilt from ``old_index``'s record for
    the seq expected there, when its payload is that record's."""

    def read(size: int, offset: int) -> bytes:
        return data[offset : offset + size]

    def from_index(position: int, seq: int) -> tuple[Node | None, bytes]:
        record = old_index[FILE_HEADER_SIZE + seq * RECORD_SIZE : FILE_HEADER_SIZE + (seq + 1) * RECORD_SIZE]
        node = unpack_node(record)
        if node is None or node.seq != seq or node_problem(node, position) is not None:
            return None, b""
        if position + FRAME_PREFIX + node.stored_len > len(data):  # the frame must be there, whole
            return None, b""
        stored = data[position + FRAME_PREFIX : position + FRAME_PREFIX + node.stored_len]
        try:
            raw = decode_payload(stored, node)
        except ValueError:
            return None, b""
        if crc(raw) != node.hash or not payload_fits_kind(node, raw):
            return None, b""
        return node, FRAME_MAGIC + record + stored

    nodes: list[tuple[Node, bytes]] = []
    found: dict[int, bytes] = {}
    lost = covered = 0
    # What was written ends at the last non-zero byte; past it is reserved space.
    content_end = max(FILE_HEADER_SIZE, align8(len(data.rstrip(b"\0"))))
    position = FILE_HEADER_SIZE
    damaged: tuple[int, str] | None = None  # where the damage being skipped began, and why
    while position < content_end:
        node, frame, why = frame_at(read, position, len(nodes), at_least=True)
        if node is None:
            node, frame = from_index(position, len(nodes))
            if node is not None:
                problems.append(
                    f"{data_path}: offset {position}: the frame header of node {node.seq} is damaged; "
                    "rebuilt from its index record"
                )
        if node is None:
            if damaged is None:
                damaged = (position, why or "no frame magic")
            following = next_frame_magic(data, position + 8)
            position = following if following < min(len(data), content_end) else content_end
            continue
        if damaged is not None:
            start, why = damaged
            problems.append(
                f"{data_path}: offset {start}: {why}; {position - start} bytes without an intact frame"
            )
            damaged = None
        while len(nodes) < node.seq:
            nodes.append((lost_node(len(nodes)), b""))
            lost += 1
        found[node.seq] = frame[8:FRAME_PREFIX]
        nodes.append((node, frame[FRAME_PREFIX:]))
        covered += node.frame_end - position
        position = node.frame_end
    if damaged is not None:
        start, why = damaged
        problems.append(f"{data_path}: offset {start}: {why}; no intact frame after it")
    # Bytes written that no intact frame holds (the last frame may end in zeros past the last non-zero byte).
    dropped = max(content_end, position) - FILE_HEADER_SIZE - covered
    return Salvage(nodes, found, lost, dropped)


def next_frame_magic(data: bytes, start: int) -> int:
    """The first 8-aligned offset from ``start`` (8-aligned) holding a frame's magic, else
    the end: where scanning 8 bytes at a time would find the next candidate frame."""
    found = data.find(FRAME_MAGIC, start)
    while found != -1 and found % 8:
        found = data.find(FRAME_MAGIC, found + 1)
    return len(data) if found == -1 else found


def lost_node(seq: int) -> Node:
    """The placeholder for a record repair could not salvage: no payload, the seq before as parent."""
    return Node(
        seq=seq,
        parent=NONE if seq == 0 else seq - 1,
        timestamp=0.0,
        offset=0,
        stored_len=0,
        raw_len=0,
        tokens=0,
        weight=math.nan,
        priority=0.0,
        hash=crc(b""),
        role=OTHER,
        kind=LOST,
        tags=0,
        flags=0,
    )


def compare_index(index_path: str, found: dict[int, bytes], count: int, problems: list[str]) -> None:
    """Report where the old index disagrees with the frames salvaged."""
    try:
        old = read_whole(index_path)[FILE_HEADER_SIZE:]
    except (ContextCoreError, OSError):
        return
    for seq in range(len(old) // RECORD_SIZE):
        record = old[seq * RECORD_SIZE : (seq + 1) * RECORD_SIZE]
        offset = FILE_HEADER_SIZE + seq * RECORD_SIZE
        if seq >= count:
            if not all_zero(record):
                problems.append(f"{index_path}: offset {offset}: record {seq} and after have no intact frame")
            return
        if seq not in found:
            problems.append(f"{index_path}: offset {offset}: record {seq} has no intact frame (lost)")
        elif record != found[seq]:
            problems.append(f"{index_path}: offset {offset}: record {seq} differs from its frame")


def summary_covers(covers: Any) -> tuple[int, int]:
    try:
        first, last = covers
    except (TypeError, ValueError):
        raise InvalidTypeError("covers must be a pair (first, last) of seqs") from None
    for seq in (first, last):
        if isinstance(seq, bool) or not hasattr(type(seq), "__index__"):
            raise InvalidTypeError(f"covers must hold ints, not {type(seq).__name__}")
    return operator.index(first), operator.index(last)


def render_summary(text: str, level: int) -> dict[str, str]:
    return {"role": "system", "content": SUMMARY_PREFIX[level] + text}


def log_directory(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidTypeError(f"path must be str or os.PathLike, not {type(path).__name__}")
    directory = os.fspath(path)
    if not isinstance(directory, str):
        raise InvalidTypeError("path must name a directory as str")
    return os.path.abspath(directory)


def open_log_file(path: str, readonly: bool) -> int:
    """A log file, never through a link, never a FIFO or device in its place
    (O_NONBLOCK: opening one cannot hang)."""
    flags = (os.O_RDONLY if readonly else os.O_RDWR) | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise corrupt(path, 0, "the file is missing (the log has only some of its files)") from None
    except OSError as error:
        raise storage_error(path, "open", error) from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidInputError(f"{path}: is not a regular file (a log's files are its own)")
    os.set_blocking(fd, True)
    return fd


def read_whole(path: str, size: int | None = None) -> bytes:
    """A log file's bytes (the first ``size`` of them), opened as every log file is."""
    fd = open_log_file(path, True)
    try:
        with storage(path, "read"):
            return read_at(fd, os.fstat(fd).st_size if size is None else size, 0)
    finally:
        os.close(fd)


@contextlib.contextmanager
def hold_if_no_writer(directory: str) -> Iterator[bool]:
    """A shared hold on the writer lock while no writer has it (yields False while
    one does): what lies past the last record is then settled, not in flight."""
    try:
        fd = os.open(os.path.join(directory, "lock"), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:  # no writer ever opened the log
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def never_made_whole(directory: str) -> bool:
    """docs/log-format.md, "Making a log": no ``index``, or one shorter than
    its header, beside a ``data`` of a header at most (more is damage).
    Anything but a regular file in a file's place is opened, and refused,
    as it is."""

    def status(name: str) -> os.stat_result | None:
        path = os.path.join(directory, name)
        try:
            return os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            raise storage_error(path, "stat", error) from error

    # data first: index is renamed in before any record is written, so a
    # data seen with records had its index already.
    data = status("data")
    index = status("index")
    if index is not None and (not stat.S_ISREG(index.st_mode) or index.st_size >= FILE_HEADER_SIZE):
        return False
    if data is None or data.st_size <= FILE_HEADER_SIZE:
        return data is None or stat.S_ISREG(data.st_mode)
    if not stat.S_ISREG(data.st_mode):
        return False
    raise corrupt(
        os.path.join(directory, "index"),
        0,
        f"missing or cut short, beside {data.st_size} bytes of data (repair rebuilds it from them)",
    )


def create_log(directory: str, encoding: str) -> None:
    """A new, empty log: both files written beside their names (0600) and
    renamed in, the data file first, so ``index`` appears last."""
    log_id = secrets.randbits(64)
    made = (("data", file_header(DATA_MAGIC, log_id)), ("index", file_header(INDEX_MAGIC, log_id, encoding)))
    for name, header in made:
        write_new_file(os.path.join(directory, name + ".tmp"), header, os.O_TRUNC)
    for name, _ in made:
        with storage(os.path.join(directory, name), "make the log"):
            os.replace(os.path.join(directory, name + ".tmp"), os.path.join(directory, name))
    sync_directory(directory)


def write_new_file(path: str, content: bytes, mode: int) -> None:
    """Create ``path`` (0600; ``mode``: O_EXCL or O_TRUNC) holding ``content``, synced."""
    with storage(path, "write"):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode, 0o600)
        try:
            write_all(fd, content, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
