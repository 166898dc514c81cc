"""Running an async-only model from synchronous code."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from context_core.errors import LLMError

__all__ = ["run_coroutine_sync"]

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
    raise LLMError(
        f"{llm!r} is async-only and complete() was called from inside a running event loop; "
        "await acomplete() instead"
    )
