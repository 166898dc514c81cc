"""A small client layer for the language models context_core calls itself
(to extract facts worth remembering, to summarise).

:class:`LLM` is the whole interface: ``complete(messages, *, max_tokens,
temperature) -> str`` and its async twin ``acomplete``. :func:`as_llm` turns what
a server already has into one: an ``openai`` or ``anthropic`` SDK client
(:class:`OpenAIChat`, :class:`AnthropicChat`; both SDKs are optional extras:
``pip install context-core[openai]`` / ``[anthropic]``), or any plain function
``f(messages) -> str`` (:class:`CallableLLM`). The adapters share one
:class:`RetryPolicy` (429, 5xx and connection errors, with backoff), wall-clock
deadlines (the SDK adapters' ``timeout`` per try, ``total_timeout`` per call),
cancellation, and errors that are ``context_core`` exceptions
(:class:`~context_core.LLMError` and its subclasses).

Importing this module imports neither SDK.
"""

from __future__ import annotations

from context_core.llm.anthropic_adapter import AnthropicChat, to_anthropic
from context_core.llm.callable_adapter import CallableLLM, CompleteFn
from context_core.llm.convert import as_llm
from context_core.llm.openai_adapter import OpenAIChat
from context_core.llm.protocol import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, LLM
from context_core.llm.retry import CancelToken, RetryPolicy
from context_core.llm.sdk_adapter import DEFAULT_TIMEOUT

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TIMEOUT",
    "LLM",
    "AnthropicChat",
    "CallableLLM",
    "CancelToken",
    "CompleteFn",
    "OpenAIChat",
    "RetryPolicy",
    "as_llm",
    "to_anthropic",
]
