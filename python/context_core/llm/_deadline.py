"""Wall-clock deadlines for one try of an SDK request.

httpx's timeouts are per operation (connect, each read, each write): a server
that sends a byte just before each read would time out can hold a request for
as long as it likes. A try is bounded by wall clock here instead:

- async (:func:`await_within`): the request is awaited under an asyncio
  timeout; the cancellation it delivers makes the SDK drop the connection.
- sync (:func:`call_within`): the request runs in a worker thread and the
  caller waits for it no longer than the deadline. A blocking read cannot be
  interrupted from another thread, so the worker's own reads stop at the
  deadline too: the HTTP/1.1 connections an adapter's requests open have their
  network stream's ``read`` and ``write`` clamped to the deadline of the try
  using them (:func:`trace_connections`), and httpcore, seeing the read fail,
  closes the connection itself. A connection the adapter did not open (an idle
  one left by the client's other requests) is not clamped: the caller still
  gets its error at the deadline, and the abandoned request ends in the
  background when the server finishes or falls silent for a whole timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from context_core.errors import LLMCancelledError

__all__ = ["DeadlinePassed", "await_within", "call_within", "trace_connections"]

T = TypeVar("T")

# How often a caller waiting for a try looks at its cancel token.
_CANCEL_POLL = 0.02
# The longest one Event.wait takes (longer overflows).
_WAIT_MAX = threading.TIMEOUT_MAX

_local = threading.local()  # .deadline: the time.monotonic() the try running in this thread must end by


class DeadlinePassed(Exception):
    """A try ran out of time; the adapter raises :class:`~context_core.LLMTimeoutError`.

    A plain ``Exception`` on purpose: raised from a clamped read, it passes
    through httpcore, httpx and the SDK untranslated (each closes its
    connection or response on the way out)."""


def _left(timeout: float | None) -> float | None:
    """``timeout`` cut to what is left of this thread's deadline, if it has one."""
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlinePassed
    return left if timeout is None else min(timeout, left)


_clamped_classes: dict[type, type] = {}


def _clamp(stream: Any) -> None:
    """Make ``stream`` (an httpcore network stream) cut each read and write at
    the deadline of the thread doing it. The connection outlives the request,
    so the deadline is looked up per call (threads without one are unaffected).
    The stream's class is swapped for a subclass rather than its methods
    patched, so no reference cycle keeps a socket alive."""
    cls = type(stream)
    if getattr(cls, "_context_core_clamped", False):
        return
    clamped = _clamped_classes.get(cls)
    if clamped is None:

        def read(self: Any, max_bytes: int, timeout: float | None = None) -> Any:
            return cls.read(self, max_bytes, _left(timeout))

        def write(self: Any, buffer: Any, timeout: float | None = None) -> Any:
            return cls.write(self, buffer, _left(timeout))

        clamped = type(
            cls.__name__,
            (cls,),
            {"__slots__": (), "read": read, "write": write, "_context_core_clamped": True},
        )
        clamped = _clamped_classes.setdefault(cls, clamped)
    with contextlib.suppress(TypeError):  # not a plain Python class: left as is (the caller is still bounded)
        stream.__class__ = clamped


class _Tracer:
    """httpcore's ``trace`` extension for one request: remembers the stream a
    connection it opens ends up with, and clamps it once the request turns out
    to speak HTTP/1.1 (an HTTP/2 connection is shared by concurrent requests,
    which one request's deadline must not fail). Events go on to the request's
    own trace, if it had one."""

    _OPENED = (".connect_tcp.complete", ".connect_unix_socket.complete", ".start_tls.complete")

    def __init__(self, chained: Callable[[str, dict[str, Any]], Any] | None) -> None:
        self.chained = chained
        self.opened: Any = None

    def __call__(self, event: str, info: dict[str, Any]) -> Any:
        if event.endswith(self._OPENED):
            self.opened = info.get("return_value")
        elif self.opened is not None and event == "http11.send_request_headers.started":
            _clamp(self.opened)
            self.opened = None
        return self.chained(event, info) if self.chained is not None else None


def trace_connections(client: Any) -> None:
    """Give every request the sync SDK ``client`` (the adapter's own copy,
    from ``with_options``) sends a :class:`_Tracer`, through the SDK's
    per-request hook ``_prepare_request``. Without that hook nothing is
    clamped; :func:`call_within` still bounds the caller."""
    prepare = getattr(type(client), "_prepare_request", None)
    if prepare is None or inspect.iscoroutinefunction(prepare):
        return
    ref = weakref.ref(client)  # the hook lives on the client: a strong reference would be a cycle

    def _prepare_request(request: Any) -> Any:
        owner = ref()
        result = prepare(owner, request) if owner is not None else None
        extensions = getattr(request, "extensions", None)
        if isinstance(extensions, dict):
            extensions["trace"] = _Tracer(extensions.get("trace"))
        return result

    client._prepare_request = _prepare_request


def call_within(fn: Callable[[], T], seconds: float, cancel: Any = None) -> T:
    """``fn()`` run in a worker thread whose reads stop at the deadline
    (``seconds`` from now); raises :class:`DeadlinePassed` once it passes
    without waiting for the worker, whose late result is dropped. ``cancel``
    (a token with ``is_set()``), once set, ends the wait too
    (:class:`~context_core.LLMCancelledError`): the caller's thread is free
    at once, the worker ends at its deadline."""
    deadline = time.monotonic() + seconds
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()
    context = contextvars.copy_context()  # as asyncio.to_thread: context variables reach fn

    def work() -> None:
        _local.deadline = deadline
        try:
            outcome.append((True, context.run(fn)))
        except BaseException as exc:  # handed to the caller, or dropped once it gave up
            outcome.append((False, exc))
        finally:
            _local.deadline = None
            done.set()

    try:
        threading.Thread(target=work, name="context_core.llm try", daemon=True).start()
    except RuntimeError:  # no new thread (at interpreter shutdown, a thread limit): run it here
        work()
    # With nothing to cancel the wait, one wait to the deadline: polling would
    # wake this thread (and take the interpreter) 50 times a second.
    poll = _CANCEL_POLL if cancel is not None else _WAIT_MAX
    while not done.wait(max(0.0, min(poll, deadline - time.monotonic(), _WAIT_MAX))):
        if cancel is not None and cancel.is_set():
            raise LLMCancelledError("LLM call cancelled during a try")
        if time.monotonic() >= deadline:
            raise DeadlinePassed
    ok, value = outcome.pop()
    if ok:
        return cast(T, value)
    try:
        raise value
    finally:
        del value  # the traceback holds this frame: no cycle through the error


async def await_within(awaitable: Awaitable[T], seconds: float) -> T:
    """``await awaitable``, cancelled after ``seconds`` with :class:`DeadlinePassed`.
    A ``TimeoutError`` the awaitable raises itself passes through unchanged."""
    if sys.version_info >= (3, 11):
        scope = asyncio.timeout(seconds)
        try:
            async with scope:
                return await awaitable
        except TimeoutError:
            if scope.expired():
                raise DeadlinePassed from None
            raise
    try:  # pragma: no cover - Python 3.10, where asyncio.TimeoutError is its own class
        return await asyncio.wait_for(awaitable, seconds)
    except asyncio.TimeoutError:  # pragma: no cover
        raise DeadlinePassed from None
