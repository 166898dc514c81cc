"""Any plain function as an :class:`~context_core.llm.LLM`: :class:`CallableLLM`."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Union

from context_core.errors import ContextCoreError, InvalidTypeError, LLMError, LLMTimeoutError
from context_core.llm._sync import run_coroutine_sync, run_in_thread
from context_core.llm.protocol import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, check_options
from context_core.llm.reply import check_reply
from context_core.llm.retry import CancelToken, RetryPolicy, arun_with_retry, run_with_retry
from context_core.types import OpenAIMessage

__all__ = ["CallableLLM", "CompleteFn"]

CompleteFn = Callable[..., Union[str, Awaitable[str]]]
"""``f(messages) -> str`` or ``async def f(messages) -> str``; it is also given
``max_tokens=`` and ``temperature=`` when its signature accepts them."""


def _accepts_options(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature
        return False
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return any(p.kind is p.VAR_KEYWORD for p in params) or {"max_tokens", "temperature"} <= names


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isfunction(fn) and call is not None and inspect.iscoroutinefunction(call)
    )


class CallableLLM:
    """Wraps ``f(messages) -> str`` (or ``async def f``) as an LLM.

    ``f`` receives the messages as a list of OpenAI-style dicts, plus
    ``max_tokens=`` and ``temperature=`` keywords when its signature takes them
    (both names, or ``**kwargs``). An async ``f`` runs on the caller's event
    loop in :meth:`acomplete`; a sync ``f`` runs in a worker thread there
    (:func:`asyncio.to_thread`), so the loop never blocks.

    ``max_tokens`` and ``temperature`` are checked as the SDK adapters check
    them (:class:`~context_core.InvalidInputError`, ``f`` not called).

    Errors: a ``context_core`` error from ``f`` passes through, a
    ``TimeoutError`` (or ``asyncio.TimeoutError``, a distinct class before
    Python 3.11) becomes :class:`~context_core.LLMTimeoutError`, any other
    exception :class:`~context_core.LLMError` (with the original as
    ``__cause__``); a reply that is not a non-empty ``str`` raises
    :class:`~context_core.LLMResponseError`. ``f`` is called once per call
    unless ``retry`` says otherwise (then the errors :class:`RetryPolicy`
    retries, e.g. an :class:`~context_core.LLMRateLimitError` that ``f``
    raises, are retried).
    """

    def __init__(self, fn: CompleteFn, *, retry: RetryPolicy | None = None) -> None:
        if not callable(fn) or isinstance(fn, type):
            raise InvalidTypeError(f"CallableLLM needs a function, got {type(fn).__name__}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidTypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        self.fn = fn
        self.retry = retry if retry is not None else RetryPolicy(attempts=1)
        self.is_async = _is_async(fn)
        self._pass_options = _accepts_options(fn)

    def __repr__(self) -> str:
        return f"CallableLLM({self.fn!r})"

    def _invoke(self, messages: Sequence[OpenAIMessage], max_tokens: int, temperature: float) -> Any:
        msgs = list(messages)
        try:
            if self._pass_options:
                return self.fn(msgs, max_tokens=max_tokens, temperature=temperature)
            return self.fn(msgs)
        except Exception as exc:
            raise _wrap(exc) from exc

    def _once(self, messages: Sequence[OpenAIMessage], max_tokens: int, temperature: float) -> str:
        result = self._invoke(messages, max_tokens, temperature)
        if inspect.isawaitable(result):  # a sync function that returned an awaitable
            result = run_coroutine_sync(_await_reply(result), self)
        return check_reply(result, repr(self))

    async def _aonce(self, messages: Sequence[OpenAIMessage], max_tokens: int, temperature: float) -> str:
        result = self._invoke(messages, max_tokens, temperature)
        if inspect.isawaitable(result):
            result = await _await_reply(result)
        return check_reply(result, repr(self))

    def complete(
        self,
        messages: Sequence[OpenAIMessage],
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float = DEFAULT_TEMPERATURE,
        cancel: CancelToken | None = None,
    ) -> str:
        """Call ``f``. An async ``f`` runs to completion on a fresh event loop
        (raises :class:`~context_core.LLMError` if this thread already runs
        one: ``await acomplete()`` there instead). ``cancel`` (a
        :class:`threading.Event`...) stops retries and backoff waits; it cannot
        interrupt ``f`` itself (and is not consulted for an async ``f``)."""
        check_options(max_tokens, temperature)
        if self.is_async:
            return run_coroutine_sync(
                self.acomplete(messages, max_tokens=max_tokens, temperature=temperature), self
            )
        return run_with_retry(lambda: self._once(messages, max_tokens, temperature), self.retry, cancel)

    async def acomplete(
        self,
        messages: Sequence[OpenAIMessage],
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float = DEFAULT_TEMPERATURE,
    ) -> str:
        """Await ``f``, or run a sync ``f`` in a worker thread. Cancelling the
        task returns at once; a sync ``f`` already running finishes in its
        thread (its result is dropped) and is not retried."""
        check_options(max_tokens, temperature)
        if self.is_async:
            return await arun_with_retry(lambda: self._aonce(messages, max_tokens, temperature), self.retry)
        return await run_in_thread(self.complete, messages, max_tokens=max_tokens, temperature=temperature)


async def _await_reply(awaitable: Awaitable[Any]) -> Any:
    try:
        return await awaitable
    except Exception as exc:
        raise _wrap(exc) from exc


def _wrap(exc: Exception) -> ContextCoreError:
    if isinstance(exc, ContextCoreError):
        return exc
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):  # distinct classes before 3.11
        return LLMTimeoutError(f"the LLM callable timed out: {exc}")
    return LLMError(f"the LLM callable raised {type(exc).__name__}: {exc}")
