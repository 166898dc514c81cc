"""The one interface context_core asks of a language model: :class:`LLM`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from context_core.errors import InvalidInputError
from context_core.types import OpenAIMessage

__all__ = ["DEFAULT_MAX_TOKENS", "DEFAULT_TEMPERATURE", "LLM", "check_options"]

DEFAULT_MAX_TOKENS = 1024
"""Default cap on the reply's length, in tokens."""

DEFAULT_TEMPERATURE = 0.0
"""Default sampling temperature: context_core's own calls (extracting facts,
summarising) want the most likely answer, not a creative one."""


def check_options(max_tokens: Any, temperature: Any) -> None:
    """What every adapter checks before sending anything: ``max_tokens`` an
    int >= 1, ``temperature`` a finite number >= 0; else
    :class:`~context_core.InvalidInputError`."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInputError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise InvalidInputError(f"temperature must be a finite number >= 0, got {temperature!r}")


@runtime_checkable
class LLM(Protocol):
    """A chat model that answers with text.

    ``messages`` are OpenAI Chat Completions dicts
    (``{"role": "system" | "user" | "assistant", "content": str}``); adapters
    for other wire formats convert them. Both methods return the reply's text
    and raise :class:`~context_core.LLMError` subclasses when the call fails.
    Any object with these two methods is an ``LLM``; :func:`~context_core.as_llm`
    wraps SDK clients and plain functions into one.
    """

    def complete(
        self,
        messages: Sequence[OpenAIMessage],
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float = DEFAULT_TEMPERATURE,
    ) -> str:
        """Answer ``messages``, blocking the calling thread."""
        ...

    async def acomplete(
        self,
        messages: Sequence[OpenAIMessage],
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float = DEFAULT_TEMPERATURE,
    ) -> str:
        """Answer ``messages`` without blocking the event loop; cancellable."""
        ...
