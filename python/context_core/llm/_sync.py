"""Running an async-only model from synchronous code, and a synchronous one
from async code."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from context_core.errors import LLMError

__all__ = ["run_coroutine_sync", "run_in_thread"]

T = TypeVar("T")


def run_coroutine_sync(coro: Coroutine[Any, Any, T], llm: object) -> T:
    """Run ``coro`` on a fresh event loop in this thread.

    Refuses (closing ``coro``, so nothing is left un-awaited) when this thread
    already runs an event loop: blocking it until the reply comes would stall
    every other task on it, and the coroutine may need that very loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    error = LLMError(
        f"{llm!r} is async-only and complete() was called from inside a running event loop; "
        "await acomplete() instead"
    )
    error.attempts = 0  # nothing was sent
    raise error


async def run_in_thread(complete: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``await complete(*args, cancel=token, **kwargs)`` run in a worker thread
    (:func:`asyncio.to_thread`), so the event loop never blocks. Cancelling
    the awaiting task returns at once and sets ``token`` (a
    :class:`threading.Event`), so the thread stops before its next try or in
    its backoff wait; a request already sent ends in the background (an SDK
    adapter's at its try's deadline, on a connection the adapter opened)."""
    token = threading.Event()
    try:
        return await asyncio.to_thread(complete, *args, cancel=token, **kwargs)
    except asyncio.CancelledError:
        token.set()
        raise
