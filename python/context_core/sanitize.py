"""``sanitize``: repair a chat history so the OpenAI or Anthropic API accepts it.

:class:`Sanitizer` (from the extension) holds a configuration with its patterns
compiled once; :func:`sanitize` is the one-call form, which keeps a small cache
of sanitizers by configuration so the patterns are not recompiled every turn.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Literal

from context_core._core import (
    DEFAULT_ERROR_PATTERNS,
    DEFAULT_FIRST_USER_TEXT,
    DEFAULT_MAX_PATTERN_CHARS,
    DEFAULT_PLACEHOLDER_PATTERNS,
    Change,
    Sanitizer,
    SanitizeResult,
)
from context_core.types import MessageLike

__all__ = [
    "DEFAULT_ERROR_PATTERNS",
    "DEFAULT_FIRST_USER_TEXT",
    "DEFAULT_MAX_PATTERN_CHARS",
    "DEFAULT_PLACEHOLDER_PATTERNS",
    "Change",
    "SanitizeResult",
    "Sanitizer",
    "sanitize",
]


@functools.lru_cache(maxsize=32, typed=True)  # typed: True is not 1 here
def _sanitizer(
    provider: Literal["openai", "anthropic"],
    convert_function: bool,
    on_invalid: Literal["raise", "drop"],
    placeholder_patterns: Sequence[str] | None,
    error_patterns: Sequence[str] | None,
    max_pattern_chars: int | None,
    first_user_text: str | None,
) -> Sanitizer:
    return Sanitizer(
        provider,
        convert_function=convert_function,
        on_invalid=on_invalid,
        placeholder_patterns=placeholder_patterns,
        error_patterns=error_patterns,
        max_pattern_chars=max_pattern_chars,
        first_user_text=first_user_text,
    )


def _frozen(patterns: Iterable[str] | None) -> Sequence[str] | None:
    if patterns is None or isinstance(patterns, str):
        return patterns  # a str is refused by Sanitizer with a clear error
    return tuple(patterns)


def sanitize(
    messages: Sequence[MessageLike],
    provider: Literal["openai", "anthropic"] = "openai",
    *,
    convert_function: bool = False,
    on_invalid: Literal["raise", "drop"] = "raise",
    placeholder_patterns: Iterable[str] | None = None,
    error_patterns: Iterable[str] | None = None,
    max_pattern_chars: int | None = None,
    first_user_text: str | None = None,
) -> SanitizeResult:
    """Repair ``messages`` for ``provider``; see :class:`Sanitizer` for the options.

    Returns a :class:`SanitizeResult`: ``.messages`` (the repaired list; messages
    that needed no change are the caller's own objects), ``.system`` (Anthropic:
    the text lifted out of system messages, or ``None``), ``.changes`` (one
    :class:`Change` per repair) and ``.changed``. The input is never mutated.
    """
    options = (
        provider,
        convert_function,
        on_invalid,
        _frozen(placeholder_patterns),
        _frozen(error_patterns),
        max_pattern_chars,
        first_user_text,
    )
    try:
        sanitizer = _sanitizer(*options)
    except TypeError:  # an unhashable option: build it uncached, which reports it clearly
        sanitizer = _sanitizer.__wrapped__(*options)
    return sanitizer.sanitize(messages)
