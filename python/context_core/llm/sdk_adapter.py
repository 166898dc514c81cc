"""What the OpenAI and Anthropic adapters share: holding a sync and/or async
SDK client, the wall-clock deadlines (per try and per call), retries,
cancellation and error translation. Each subclass only builds the request and
reads the reply."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any, ClassVar

from context_core.errors import InvalidInputError, InvalidTypeError, LLMError, LLMResponseError
from context_core.llm._deadline import DeadlinePassed, await_within, call_within, trace_connections
from context_core.llm._sync import run_in_thread
from context_core.llm.protocol import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, check_options
from context_core.llm.retry import CancelToken, RetryPolicy, arun_with_retry, run_with_retry
from context_core.llm.sdk_errors import timeout_error, translate_sdk_error
from context_core.types import OpenAIMessage

__all__ = ["DEFAULT_TIMEOUT", "SDKChat", "client_kind"]

DEFAULT_TIMEOUT = 60.0
"""Seconds one try may take, by wall clock, before :class:`~context_core.LLMTimeoutError`."""


def _check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not 0 < value < math.inf:
        raise InvalidInputError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def client_kind(client: object) -> tuple[str, bool] | None:
    """``(sdk, is_async)`` for an ``openai`` or ``anthropic`` client (sync
    clients derive from the SDK's ``SyncAPIClient``, async ones from its
    ``AsyncAPIClient``), ``None`` for anything else. Reads class names only,
    so neither SDK is imported."""
    if isinstance(client, type):
        return None
    for cls in type(client).__mro__:
        sdk = cls.__module__.partition(".")[0]
        if sdk in ("openai", "anthropic") and cls.__name__ in ("SyncAPIClient", "AsyncAPIClient"):
            return sdk, cls.__name__ == "AsyncAPIClient"
    return None


class SDKChat:
    """Base of :class:`OpenAIChat` and :class:`AnthropicChat`."""

    sdk_name: ClassVar[str]

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        timeout: float = DEFAULT_TIMEOUT,
        total_timeout: float | None = None,
        retry: RetryPolicy | None = None,
        async_client: Any = None,
        extra_params: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidInputError(f"{type(self).__name__} needs model= (a model name), got {model!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidTypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        self.model = model
        self.timeout = _check_seconds("timeout", timeout)
        self.total_timeout = None if total_timeout is None else _check_seconds("total_timeout", total_timeout)
        self.retry = retry if retry is not None else RetryPolicy()
        self.extra_params: dict[str, Any] = dict(extra_params or {})
        self._sync: Any = None
        self._async: Any = None
        self._adopt(client)
        if async_client is not None:
            kind = client_kind(async_client)
            if kind is None or not kind[1]:
                raise InvalidTypeError(
                    f"async_client must be an async {self.sdk_name} client, got {type(async_client).__name__}"
                )
            self._adopt(async_client)
        self._sdk: ModuleType = importlib.import_module(self.sdk_name)
        self._check_extra_params()

    def _check_extra_params(self) -> None:
        """Refuse ``extra_params`` the SDK's endpoint does not take (it would
        raise a ``TypeError`` at every call), when its signature can be read."""
        if not self.extra_params:
            return
        try:
            endpoint = self._endpoint(self._sync if self._sync is not None else self._async)
            params = inspect.signature(endpoint).parameters
        except (TypeError, ValueError):  # no signature to read: the call will tell
            return
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return
        unknown = sorted(set(self.extra_params) - set(params))
        if unknown:
            raise InvalidInputError(
                f"{type(self).__name__}: extra_params {unknown} are not parameters of the installed"
                f" {self.sdk_name} SDK's {endpoint.__qualname__}(); send what the SDK does not know"
                " as extra_params={'extra_body': {...}}"
            )

    def _adopt(self, client: Any) -> None:
        kind = client_kind(client)
        if kind is None or kind[0] != self.sdk_name:
            raise InvalidTypeError(
                f"{type(self).__name__} needs an {self.sdk_name} SDK client, got {type(client).__name__}"
            )
        # The SDK's own retries are switched off: RetryPolicy is the only one.
        configured = client.with_options(timeout=self.timeout, max_retries=0)
        if kind[1]:
            if self._async is not None:
                raise InvalidInputError(f"{type(self).__name__} got two async clients")
            self._async = configured
        else:
            if self._sync is not None:
                raise InvalidInputError(f"{type(self).__name__} got two sync clients")
            trace_connections(configured)
            self._sync = configured

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    # --- what a subclass provides ---------------------------------------------------------------

    def _request(
        self, messages: Sequence[OpenAIMessage], max_tokens: int, temperature: float
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _endpoint(self, client: Any) -> Any:
        """``client.<endpoint>.create``."""
        raise NotImplementedError

    def _reply_text(self, response: Any) -> str:
        raise NotImplementedError

    # --- the calls ------------------------------------------------------------------------------

    def _checked_request(
        self, messages: Sequence[OpenAIMessage], max_tokens: int, temperature: float
    ) -> dict[str, Any]:
        check_options(max_tokens, temperature)
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise InvalidTypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise InvalidTypeError(f"messages[{i}] must be a dict, got {type(message).__name__}")
            if "role" not in message:
                raise InvalidInputError(f"messages[{i}] has no 'role'")
        request = {**self._request(messages, max_tokens, temperature), **self.extra_params}
        # What the SDK would fail to encode is refused here, as bad input, not
        # later as if the reply were at fault (its RecursionError and Unicode
        # errors are read as the reply's below).
        try:
            json.dumps(request, ensure_ascii=False, default=str).encode()
        except RecursionError:
            raise InvalidInputError(f"{self!r}: the request is nested too deep to send") from None
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"{self!r}: the request holds text that is not Unicode ({exc})") from None
        except ValueError as exc:  # a circular reference
            raise InvalidInputError(f"{self!r}: the request cannot be sent as JSON ({exc})") from None
        return request

    def _budget(self, deadline: float | None) -> tuple[float, str]:
        """Seconds the next try may take, and the setting that says so: the
        timeout, or what is left of the total timeout when that is shorter."""
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < self.timeout:
                if left <= 0:
                    raise self._timed_out(0.0, "total_timeout")
                return left, "total_timeout"
        return self.timeout, "timeout"

    def _timed_out(self, seconds: float, limit: str) -> LLMError:
        if limit == "total_timeout" and self.total_timeout is not None:
            seconds = self.total_timeout  # name the setting, not what was left of it
        return timeout_error(repr(self), seconds, limit)

    def _read(self, response: Any) -> str:
        try:
            return self._reply_text(response)
        except LLMError:
            raise
        except (AttributeError, IndexError, KeyError, TypeError) as exc:
            raise LLMResponseError(f"{self!r}: malformed reply ({type(exc).__name__}: {exc})") from exc

    @contextmanager
    def _sdk_errors(self, seconds: float, limit: str) -> Iterator[None]:
        """The SDK's errors as ``context_core`` ones: its API errors (and a body
        that is not JSON, not UTF-8, or nested past the recursion limit) as
        :class:`~context_core.LLMError` subclasses, a ``TypeError``
        (arguments it does not take: ``extra_params``) as
        :class:`~context_core.InvalidInputError`, the try's deadline passing
        as :class:`~context_core.LLMTimeoutError`."""
        try:
            yield
        except (self._sdk.APIError, json.JSONDecodeError) as exc:
            if isinstance(exc, self._sdk.APITimeoutError) or _caused_by(exc, DeadlinePassed):
                # Anthropic's SDK re-raises any error of a request, the
                # deadline's included, as a connection error.
                raise self._timed_out(seconds, limit) from exc
            error = translate_sdk_error(exc, self._sdk, repr(self))
            if error is None:  # pragma: no cover - both kinds are translated
                raise
            raise error from exc
        except DeadlinePassed:
            raise self._timed_out(seconds, limit) from None
        # The SDKs decode a reply with json.loads on its bytes, and let these through.
        except UnicodeDecodeError as exc:
            raise LLMResponseError(f"{self!r}: the reply is not valid UTF-8 ({exc})") from exc
        except RecursionError as exc:
            raise LLMResponseError(f"{self!r}: the reply is nested too deep to decode") from exc
        except TypeError as exc:
            raise InvalidInputError(f"{self!r}: the {self.sdk_name} SDK refused the request: {exc}") from exc

    def _try_sync(self, request: dict[str, Any], deadline: float | None, cancel: CancelToken | None) -> str:
        seconds, limit = self._budget(deadline)
        # The SDK's own timeout is per operation; the worker thread and the
        # clamped reads (see _deadline) bound the try as a whole.
        sized = {**request, "timeout": seconds}
        with self._sdk_errors(seconds, limit):
            response = call_within(lambda: self._endpoint(self._sync)(**sized), seconds, cancel)
        return self._read(response)

    async def _try_async(self, request: dict[str, Any], deadline: float | None) -> str:
        seconds, limit = self._budget(deadline)
        sized = {**request, "timeout": seconds}
        with self._sdk_errors(seconds, limit):
            response = await await_within(self._endpoint(self._async)(**sized), seconds)
        return self._read(response)

    def _deadline(self) -> float | None:
        return None if self.total_timeout is None else time.monotonic() + self.total_timeout

    def complete(
        self,
        messages: Sequence[OpenAIMessage],
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float = DEFAULT_TEMPERATURE,
        cancel: CancelToken | None = None,
    ) -> str:
        """Send ``messages`` through the sync client, retrying per
        :attr:`retry`; block until the reply, at most :attr:`timeout` seconds
        a try and :attr:`total_timeout` in all (by wall clock).

        ``cancel`` (e.g. a :class:`threading.Event`), once set, stops the call
        before its next try and cuts a backoff wait short, raising
        :class:`~context_core.LLMCancelledError`; a request already sent runs
        until it answers or its try's deadline passes. With only an async
        client this raises
        :class:`~context_core.LLMError`: the SDK's connection pool belongs to
        one event loop, so it cannot be driven from a fresh one.
        """
        if self._sync is None:
            error = LLMError(
                f"{self!r} has only an async {self.sdk_name} client: await acomplete(), "
                "or pass a sync client too"
            )
            error.attempts = 0  # nothing was sent
            raise error
        return self._complete(messages, max_tokens, temperature, cancel, self._deadline())

    def _complete(
        self,
        messages: Sequence[OpenAIMessage],
        max_tokens: int,
        temperature: float,
        cancel: CancelToken | None,
        deadline: float | None,
    ) -> str:
        request = self._checked_request(messages, max_tokens, temperature)
        return run_with_retry(lambda: self._try_sync(request, deadline, cancel), self.retry, cancel, deadline)

    async def acomplete(
        self,
        messages: Sequence[OpenAIMessage],
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float = DEFAULT_TEMPERATURE,
    ) -> str:
        """Send ``messages`` through the async client, retrying per
        :attr:`retry`, with the deadlines of :meth:`complete`. Cancelling the
        task ends the request in flight or the backoff wait at once.

        With only a sync client, the call runs in a worker thread
        (:func:`asyncio.to_thread`) so the event loop never blocks; cancelling
        the task then returns at once, and the thread stops before its next
        try (a request already sent ends in the background, at its try's
        deadline on a connection this adapter opened).
        """
        if self._async is not None:
            request = self._checked_request(messages, max_tokens, temperature)
            deadline = self._deadline()
            return await arun_with_retry(lambda: self._try_async(request, deadline), self.retry, deadline)
        if self._sync is None:  # pragma: no cover - an adapter has one client at least
            raise LLMError(f"{self!r} has no client")
        # The deadline runs from this call, not from when a worker thread of
        # the loop's executor is free to start it; a call still queued there
        # at the deadline (plus a grace in which a running one reports its
        # own timeout, with its tries) is given up on.
        deadline = self._deadline()
        call = run_in_thread(self._complete, messages, max_tokens, temperature, deadline=deadline)
        if deadline is None:
            return await call
        try:
            return await await_within(call, max(0.0, deadline - time.monotonic()) + _QUEUE_GRACE)
        except DeadlinePassed:
            raise self._timed_out(float(self.total_timeout or 0.0), "total_timeout") from None


# How long past total_timeout an async call over a sync client waits for its
# worker thread to report before giving up on it (see acomplete).
_QUEUE_GRACE = 0.5


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``kind`` is in ``exc``'s chain of causes and contexts."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
