"""When to send a failed request again, and how long to wait first: :class:`RetryPolicy`.

Retried: 429, 5xx and connection failures (and timeouts, if asked). Not
retried: other 4xx (the same request would fail the same way), malformed
replies, cancellation. The wait is exponential backoff with "equal jitter"
(half the step fixed, half random), so a fleet of clients hit by the same
outage spreads out, yet every wait is at least half its step; a server's
``Retry-After`` replaces the computed wait when present.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from context_core._logging import library_logger
from context_core.errors import (
    InvalidInputError,
    LLMCancelledError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMTimeoutError,
)

__all__ = ["CancelToken", "RetryPolicy", "arun_with_retry", "run_with_retry"]

logger = library_logger("context_core.llm")

T = TypeVar("T")


class CancelToken(Protocol):
    """What a synchronous call polls to learn it should stop; a
    :class:`threading.Event` is one."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass(frozen=True)
class RetryPolicy:
    """How many times to try a request, and how long to wait between tries.

    ``attempts`` counts every try (1 = never retry). The wait before retry
    ``n`` (1-based) is ``d/2 + uniform(0, d/2)`` with
    ``d = min(max_delay, base_delay * 2**(n-1))``; with the defaults, about
    0.4, 0.8 and 1.6 s. A server's ``Retry-After`` (or ``retry-after-ms``)
    replaces that wait when it is at most ``max_retry_after`` seconds; a longer
    one ends the retries at once, since retrying sooner than asked is
    pointless. Timeouts are retried only with ``retry_timeouts=True`` (by
    default a call takes at most one timeout when the server hangs). An
    adapter's ``total_timeout`` also ends the retries: a wait that would
    reach it is not made, and the last error is raised.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    retry_timeouts: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise InvalidInputError(f"RetryPolicy.attempts must be an int >= 1, got {self.attempts!r}")
        for name in ("base_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InvalidInputError(f"RetryPolicy.{name} must be a finite number >= 0, got {value!r}")

    def retryable(self, error: LLMError) -> bool:
        """Whether ``error`` is worth another try (whatever the attempts left)."""
        if isinstance(error, LLMTimeoutError):
            return self.retry_timeouts
        if isinstance(error, (LLMRateLimitError, LLMConnectionError)):
            return True
        return isinstance(error, LLMResponseError) and (error.status_code or 0) >= 500

    def backoff(self, retry: int) -> float:
        """The computed wait before retry number ``retry`` (1-based)."""
        step = min(self.max_delay, self.base_delay * 2.0 ** min(retry - 1, 64))
        return step / 2 + random.uniform(0, step / 2)

    def delay(self, error: LLMError, attempt: int) -> float | None:
        """Seconds to wait before trying again after ``error`` ended try number
        ``attempt``; ``None`` means raise ``error`` now."""
        if attempt >= self.attempts or not self.retryable(error):
            return None
        if error.retry_after is not None:
            if error.retry_after > self.max_retry_after:
                return None
            return max(0.0, error.retry_after)
        return self.backoff(attempt)


def _give_up_or_wait(policy: RetryPolicy, error: LLMError, attempt: int, deadline: float | None) -> float:
    error.attempts = attempt
    wait = policy.delay(error, attempt)
    if wait is None:
        raise error
    if deadline is not None and time.monotonic() + wait >= deadline:
        raise error  # no time left for another try: the last error says more than a timeout would
    logger.info("LLM call failed (%s); try %d of %d in %.2fs", error, attempt + 1, policy.attempts, wait)
    return wait


def _cancelled(attempts: int) -> LLMCancelledError:
    error = LLMCancelledError(f"LLM call cancelled after {attempts} tries")
    error.attempts = attempts
    return error


def run_with_retry(
    call: Callable[[], T],
    policy: RetryPolicy,
    cancel: CancelToken | None = None,
    deadline: float | None = None,
) -> T:
    """Call ``call()`` until it returns, retrying the :class:`LLMError` s the
    policy allows. ``cancel``, when set, stops before the next try and cuts a
    backoff wait short with :class:`LLMCancelledError` (a request already sent
    runs on until it answers or times out); its ``attempts`` is the number of
    tries made, 0 if none was. ``deadline`` (a :func:`time.monotonic` time)
    ends the retries when the wait before the next try would reach it: the
    last error is raised then (``call`` bounds its own tries by it)."""
    attempt = 0
    while True:
        if cancel is not None and cancel.is_set():
            raise _cancelled(attempt)
        attempt += 1
        try:
            return call()
        except LLMError as error:
            wait = _give_up_or_wait(policy, error, attempt, deadline)
        if cancel is None:
            time.sleep(wait)
        elif cancel.wait(wait):
            raise _cancelled(attempt)


async def arun_with_retry(
    call: Callable[[], Awaitable[T]], policy: RetryPolicy, deadline: float | None = None
) -> T:
    """The async twin of :func:`run_with_retry`; cancel it by cancelling its
    task (:class:`asyncio.CancelledError` is never caught, so it ends a request
    in flight or a backoff wait at once)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call()
        except LLMError as error:
            wait = _give_up_or_wait(policy, error, attempt, deadline)
        await asyncio.sleep(wait)
