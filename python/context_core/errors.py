"""Exceptions raised by context_core.

Every exception derives from :class:`ContextCoreError` *and* from the built-in
that matches the problem, so ``except ValueError`` keeps working for callers who
do not know this library, and ``except ContextCoreError`` catches all of ours.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, TypeVar

__all__ = [
    "BudgetTooSmallError",
    "BudgetWarning",
    "CacheBreakpointsError",
    "ContextCoreError",
    "EmbeddingError",
    "InvalidInputError",
    "InvalidTypeError",
    "LLMCancelledError",
    "LLMConnectionError",
    "LLMError",
    "LLMRateLimitError",
    "LLMResponseError",
    "LLMTimeoutError",
    "LLMTruncatedError",
    "LogClosedError",
    "LogCorruptError",
    "LogForkedError",
    "LogIndexError",
    "LogLockedError",
    "LogNotFoundError",
    "LogStorageError",
    "MemoryFormatError",
    "MemoryLimitError",
    "MemoryLockError",
    "MemoryPathError",
    "MemoryStorageError",
    "ModelEncodingError",
    "NothingToSendError",
    "OverBudgetError",
    "PromptCacheWarning",
    "StoreBusyError",
    "StoreClosedError",
    "StoreStorageError",
    "StoreVersionError",
    "UnknownEncodingError",
    "UnknownModelError",
    "UnknownSkillError",
]


class ContextCoreError(Exception):
    """Base class of every error context_core raises on purpose."""


class _OSFields(OSError):
    """Pickled and copied with its class, ``errno`` and ``filename`` (an
    OSError keeps only its arguments, and the classes made above are not
    names pickle can look up)."""

    def __reduce__(self) -> tuple[Any, ...]:
        base = type(self).__dict__.get("_os_base", type(self))
        return (_with_os_class, (base, str(self), self.errno, self.filename))

    def __str__(self) -> str:  # OSError would rebuild the text from its fields
        return str(self.args[0]) if self.args else ""


class InvalidInputError(ContextCoreError, ValueError):
    """A value the call cannot use: a malformed message, an unknown token id,
    a negative count, a truncation marker longer than the cap."""


class InvalidTypeError(ContextCoreError, TypeError):
    """An argument (or a field inside a message) of the wrong type."""


class UnknownEncodingError(InvalidInputError):
    """An encoding name context_core does not know."""


class UnknownModelError(InvalidInputError, KeyError):
    """A model name the model table does not know.

    Also a ``KeyError``, as ``tiktoken.encoding_for_model`` raises, so code
    written against tiktoken keeps working.
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownSkillError(InvalidInputError, KeyError):
    """A skill name the skill registry does not hold (the message lists the
    known ones). Also a ``KeyError``, as a missing mapping key is."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PromptCacheWarning(ContextCoreError, UserWarning):
    """A prompt-cache problem that does not stop the request: a cache
    breakpoint left out (its prefix is below the model's minimum cacheable
    length, or more than the API's 4 breakpoints were asked for), or the
    stable part of a prompt changed within a session (the cached prefix is
    lost for the next request). A warning (``warnings.warn``), not an error:
    the request is still valid, only dearer. It derives from
    :class:`ContextCoreError` too, so ``except ContextCoreError`` also
    catches it where warnings are turned into errors."""


class BudgetWarning(ContextCoreError, UserWarning):
    """A usage sample :meth:`Budget.observe` did not learn from: its ratio of
    reported to counted tokens is outside the plausible range (most often an
    Anthropic ``input_tokens`` given without the cached tokens). A warning, not
    an error: the turn went through and the budget keeps its ratio. Turn it
    into an error with ``warnings.simplefilter("error", BudgetWarning)``."""


class OverBudgetError(InvalidInputError):
    """What every selection policy must keep (system and pinned messages, the
    turn in progress) does not fit in the budget; the message names the sizes.

    The same sizes as fields, in tokens: ``system``, ``pinned``,
    ``turn_in_progress``, ``priming`` (the reply priming every request
    carries) and ``budget``; ``None`` where an error was made without them."""

    system: int | None = None
    pinned: int | None = None
    turn_in_progress: int | None = None
    priming: int | None = None
    budget: int | None = None


class CacheBreakpointsError(InvalidInputError):
    """The messages and tools given to the Anthropic renderer already carry
    more ``cache_control`` breakpoints than the API accepts. Fields:
    ``breakpoints`` (how many they carry), ``limit`` (how many may be).
    A :class:`~context_core.Session` meets it by keeping the newest marks
    of its history only."""

    breakpoints: int | None = None
    limit: int | None = None


class NothingToSendError(InvalidInputError):
    """A selection policy given messages would send none, and both APIs
    refuse a request without messages: no message fit in the budget and
    none had to be kept (no system or pinned message, no turn in
    progress), or sanitize took out every message the policy kept (for
    Anthropic, system messages go to ``system``; empty messages and tool
    results without their calls are dropped). The message says which. An
    empty history is not refused: its selection is empty.

    ``kept``: the keys (indices, or a log's seqs) of the messages the
    policy kept before sanitize took them out, ``()`` where the budget
    held none; ``budget``: the budget, in tokens. ``None`` / ``()`` where
    an error was made without them."""

    kept: tuple[int, ...] = ()
    budget: int | None = None


class ModelEncodingError(InvalidInputError):
    """A session's log, reopened for a model that counts tokens in another
    encoding than the one the log counts in. Fields: ``encoding`` (the
    log's) and ``model_encoding`` (the model's)."""

    encoding: str | None = None
    model_encoding: str | None = None


class BudgetTooSmallError(InvalidInputError):
    """A :class:`~context_core.Budget` whose reserves leave no room for
    history, refused when it is made. The sizes as fields, in tokens:
    ``window``, ``soft_limit``, ``system_reserve``, ``pinned_reserve``,
    ``input_reserve``, and ``ratio`` (provider tokens per counted token)."""

    window: int | None = None
    soft_limit: int | None = None
    system_reserve: int | None = None
    pinned_reserve: int | None = None
    input_reserve: int | None = None
    ratio: float | None = None


class LogCorruptError(ContextCoreError, OSError):
    """A message log's file is damaged (bad magic or version, a checksum that
    does not match, a file shorter than its records say, a file truncated
    under a reader, intact records past a damaged one). The message names
    the file and the byte offset; ``MessageLog.repair`` salvages every intact
    record.

    ``file`` (the file's name in the log directory: ``"index"``, ``"data"``,
    ``"meta"``), ``offset`` (bytes into it) and ``reason`` say the same as
    fields; they are ``None`` where the error is not about one place."""

    file: str | None = None
    offset: int | None = None
    reason: str | None = None


class LogLockedError(ContextCoreError, BlockingIOError):
    """Another writer holds the message log (and the lock timeout ran out)."""


class LogClosedError(ContextCoreError, ValueError):
    """An operation on a message log that was closed (or opened read-only,
    for a write)."""


class LogForkedError(LogClosedError):
    """A write through a message log opened for writing by another process:
    a handle inherited across ``fork()`` (a forked server worker, a
    ``multiprocessing`` child). The parent still holds the log; the child
    may read through the handle, or open the log itself once the parent has
    closed it. ``opened_by`` and ``process`` are the two process ids."""

    opened_by: int | None = None
    process: int | None = None


class LogNotFoundError(ContextCoreError, _OSFields, FileNotFoundError):
    """No message log at the path (and ``create`` was not asked for).
    ``filename`` is that path, ``errno`` is ``errno.ENOENT`` and ``strerror``
    its text."""


class LogIndexError(ContextCoreError, IndexError):
    """A node sequence number the message log does not hold."""


class LogStorageError(ContextCoreError, _OSFields):
    """Reading or writing a message log's files failed (a full disk,
    permissions...); the message names the file and the OS error.

    The error is also of the OS error's own class, so ``except
    PermissionError`` (or ``IsADirectoryError``...) still matches:
    :func:`storage_error` makes it. ``errno`` and ``strerror`` are the OS's
    (``None`` where it gave none) and ``filename`` is the file's path."""


def storage_error(message: str, errno: int | None, filename: str | None) -> LogStorageError:
    """A :class:`LogStorageError` saying ``message``, also of the built-in
    class Python gives ``errno`` (``PermissionError`` for ``EACCES``...),
    with ``errno``, ``strerror`` and ``filename`` set."""
    return _with_os_class(LogStorageError, message, errno, filename)


_E = TypeVar("_E", bound=OSError)
#: The class for each (error class, built-in OS error class), made once.
_OS_CLASSES: dict[tuple[type, type], Any] = {}


def _with_os_class(base: type[_E], message: str, errno: int | None, filename: str | None) -> _E:
    if not isinstance(errno, int):
        errno = None
    builtin = type(OSError(errno, "")) if errno is not None else OSError
    cls: type[_E] = base
    # BlockingIOError is left out: ``except BlockingIOError`` means a held lock
    # (LogLockedError, MemoryLockError), not a failed read or write.
    if builtin is not OSError and builtin is not BlockingIOError and not issubclass(base, builtin):
        known: type[_E] | None = _OS_CLASSES.get((base, builtin))
        if known is not None:
            cls = known
        else:
            # Named as the class it extends: ``type(error).__name__`` stays the base's.
            made = type(base.__name__, (base, builtin), {"__module__": __name__, "_os_base": base})
            made.__qualname__ = f"{base.__name__}[{builtin.__name__}]"
            cls = _OS_CLASSES.setdefault((base, builtin), made)  # one class, whichever thread made it
    error = cls(message)
    error.errno = errno
    error.strerror = os.strerror(errno) if errno is not None else None
    error.filename = filename
    return error


class LLMError(ContextCoreError, RuntimeError):
    """A call to a language model failed (see the subclasses); also raised when
    an async-only model is called synchronously from inside a running event loop.

    ``attempts`` is how many times the request was sent before giving up;
    ``status_code`` the last HTTP status (``None`` if none came back) and
    ``retry_after`` the server's last ``Retry-After``, in seconds, if it sent one.
    """

    attempts: int = 1
    status_code: int | None = None
    retry_after: float | None = None


class LLMTimeoutError(LLMError, TimeoutError):
    """The model did not answer within the per-attempt timeout."""


class LLMConnectionError(LLMError, ConnectionError):
    """The model's server could not be reached (after the retries ran out)."""


class LLMRateLimitError(LLMError):
    """The server kept answering 429 Too Many Requests until the retries ran
    out, or asked (``Retry-After``) for a longer wait than the retry policy allows."""

    status_code: int | None = 429

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMResponseError(LLMError):
    """The server refused the request (an HTTP error other than 429: 4xx at
    once, 5xx after the retries ran out) or answered with no usable text (a
    malformed body, an empty completion). ``status_code`` is the HTTP status,
    ``None`` when the status was fine but the body was not."""

    def __init__(
        self, message: str, *, status_code: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after


class LLMTruncatedError(LLMResponseError):
    """The model stopped at the reply's token limit (OpenAI's ``finish_reason``
    ``"length"``, Anthropic's ``stop_reason`` ``"max_tokens"``): what it wrote is
    cut short, so no caller here may take it for an answer. ``text`` is what
    came back, ``finish_reason`` the server's word for why it stopped."""

    def __init__(self, message: str, *, text: str = "", finish_reason: str | None = None) -> None:
        super().__init__(message)
        self.text = text
        self.finish_reason = finish_reason


class LLMCancelledError(LLMError):
    """A synchronous call was cancelled through its cancel token (async calls
    raise :class:`asyncio.CancelledError` instead, as asyncio expects)."""


class MemoryLockError(ContextCoreError, TimeoutError):
    """Another process held a memory root's lock (``.memory.lock``) for longer
    than the lock timeout; nothing was read or written."""


class MemoryPathError(InvalidInputError):
    """A memory file name or path that is refused: a name that is not
    ``MEMORY.md`` or ``auto-YYYY-MM-DD-xxxx.md`` (``..``, ``/``...), a symlink,
    a hard-linked or non-regular file where a memory file or lock should be."""


class MemoryLimitError(InvalidInputError):
    """Input over a size limit (a fact line over ``max_line_bytes``, a batch or
    a transcript over ``max_batch_bytes``); refused whole, nothing written."""


class MemoryFormatError(InvalidInputError):
    """A fact line, or a model's reply, not in the memory fact format
    (``- [kind] text`` or ``- [kind: key] text``, one fact a line); nothing was
    written. ``line`` is the 1-based line number of the first bad line (0 for
    the reply as a whole) and ``text`` the reply or line that was refused."""

    def __init__(self, message: str, *, line: int = 0, text: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.text = text


class EmbeddingError(InvalidInputError):
    """An embedder that raised or returned something that is not one finite
    float vector per text of the store's width (NaN, the wrong shape, the
    wrong dimension); nothing was written. ``expected`` is the width the
    store holds (``None`` before its first vector) and ``got`` the shape it
    was given (``None`` when the embedder raised)."""

    def __init__(
        self, message: str, *, expected: int | None = None, got: tuple[int, ...] | None = None
    ) -> None:
        super().__init__(message)
        self.expected = expected
        self.got = got


class StoreBusyError(ContextCoreError, TimeoutError):
    """Other processes held the memory store's database for longer than its
    busy timeout; the call changed nothing. ``path`` is the database."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class StoreClosedError(ContextCoreError, ValueError):
    """An operation on a memory store that was closed. ``path`` is the database."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class StoreStorageError(ContextCoreError, sqlite3.DatabaseError):
    """The memory store's database could not be opened, read or written:
    not a database, a directory, a damaged file, a full disk, an I/O
    error. A failed write changed nothing (its transaction rolled back).
    ``path`` is the database; the SQLite error is the cause."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class StoreVersionError(ContextCoreError, sqlite3.DatabaseError):
    """The memory store's database was written by a newer version of this
    library (schema ``found``, this one knows up to ``supported``): it is
    refused, never written, so nothing a newer version keeps is lost."""

    def __init__(self, message: str, *, found: int, supported: int) -> None:
        super().__init__(message)
        self.found = found
        self.supported = supported


class MemoryStorageError(ContextCoreError, _OSFields):
    """Reading or writing a memory file failed (a full disk, permissions...);
    the message names the file and the OS error. A failed append leaves the
    file as it was.

    As :class:`LogStorageError`, it is also of the OS error's own class
    (``except PermissionError`` matches), with ``errno``, ``strerror`` and
    ``filename`` (``None`` where no OS error was behind it)."""


def memory_storage_error(
    message: str, error: OSError | None = None, filename: Any = None
) -> MemoryStorageError:
    """A :class:`MemoryStorageError` saying ``message``, of the class and
    with the fields of the OS error ``error`` (if any)."""
    errno = error.errno if error is not None else None
    return _with_os_class(MemoryStorageError, message, errno, None if filename is None else str(filename))
