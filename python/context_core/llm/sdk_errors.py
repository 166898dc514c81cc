"""The ``openai`` and ``anthropic`` SDKs' exceptions, as context_core's.

Both SDKs are generated from the same template (Stainless): ``APITimeoutError``
subclasses ``APIConnectionError``, HTTP errors are ``APIStatusError`` with the
``httpx`` response attached. One translation serves both, given the SDK's
module, so neither SDK is imported here.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Mapping
from types import ModuleType

from context_core.errors import (
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMTimeoutError,
)

__all__ = ["parse_retry_after", "timeout_error", "translate_sdk_error"]


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms``, else ``retry-after``
    as seconds or an HTTP date; ``None`` if absent or unreadable."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        return seconds if math.isfinite(seconds) else None
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _detail(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return " ".join(str(message).split())[:500]


def timeout_error(source: str, seconds: float, limit: str = "timeout") -> LLMTimeoutError:
    """The error for a try that ran out of time; ``limit`` names the setting
    that gave it ``seconds`` (``"timeout"`` for a try, ``"total_timeout"``
    when what was left of the whole call's was shorter)."""
    return LLMTimeoutError(f"{source}: no answer within {seconds:g} s ({limit})")


def translate_sdk_error(
    exc: Exception, sdk: ModuleType, source: str, timeout: float | None = None
) -> LLMError | None:
    """The context_core error for an exception the SDK raised, or ``None`` if
    ``exc`` is not one of the SDK's (nor a malformed JSON body)."""
    if isinstance(exc, sdk.APITimeoutError):
        if timeout is None:
            return LLMTimeoutError(f"{source}: no answer before the timeout")
        return timeout_error(source, timeout)
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__
        why = f"{type(cause).__name__}: {cause}" if cause is not None else _detail(exc)
        return LLMConnectionError(f"{source}: cannot reach the server ({why})")
    if isinstance(exc, sdk.APIStatusError):
        status = int(exc.status_code)
        retry_after = parse_retry_after(exc.response.headers)
        message = f"{source}: HTTP {status}: {_detail(exc)}"
        if status == 429:
            return LLMRateLimitError(message, retry_after=retry_after)
        return LLMResponseError(message, status_code=status, retry_after=retry_after)
    if isinstance(exc, sdk.APIError):  # e.g. APIResponseValidationError
        return LLMResponseError(f"{source}: {_detail(exc)}")
    if isinstance(exc, json.JSONDecodeError):  # the SDKs let a non-JSON body through as is
        return LLMResponseError(f"{source}: the reply is not JSON ({exc})")
    return None
