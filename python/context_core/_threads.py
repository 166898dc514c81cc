"""Waiting for background work: a wait's timeout checked, and waiting from
asyncio for a thread to end."""

from __future__ import annotations

import asyncio
import numbers
import threading
from typing import Any

from context_core.errors import InvalidInputError, InvalidTypeError

__all__ = ["thread_end", "wait_timeout"]


def wait_timeout(timeout: Any) -> float | None:
    """``timeout`` for a wait: ``None`` or seconds >= 0; one longer than a
    lock can wait (infinity included) is ``None`` too, for ever, where it
    would overflow the deadline."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise InvalidTypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    seconds = float(timeout)
    if not seconds >= 0:
        raise InvalidInputError(f"timeout must be >= 0 seconds, got {timeout!r}")
    return None if seconds > threading.TIMEOUT_MAX else seconds


#: The first and the longest pause between two looks at the thread.
_FIRST_PAUSE, _LONGEST_PAUSE = 0.001, 0.05


async def thread_end(thread: threading.Thread, timeout: float | None = None) -> None:
    """Returns once ``thread`` has ended, or ``timeout`` seconds passed.

    It looks, pausing 1 ms and then twice as long each time (at most 50 ms),
    rather than joining in the loop's executor: a join there cannot be
    called off, so a cancelled wait would leave an executor thread blocked
    until ``thread`` ends, and ``asyncio.run`` waits for that thread at its
    shutdown (a close given up by a timeout would still hold the program up
    for as long as, say, a model call in flight takes)."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    pause = _FIRST_PAUSE
    while thread.is_alive():
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            return
        await asyncio.sleep(pause if left is None else min(pause, left))
        pause = min(2 * pause, _LONGEST_PAUSE)
