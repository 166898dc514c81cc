"""A small client layer for the language models context_core calls itself
(to extract facts worth remembering, to summarise).

:class:`LLM` is the whole interface: ``complete(messages, *, max_tokens,
temperature) -> str`` and its async twin ``acomplete``. :func:`as_llm` turns what
a server already has into one: an ``openai`` or ``anthropic`` SDK client (both
optional extras: ``pip install context-core[openai]`` / ``[anthropic]``), or any
plain function ``f(messages) -> str``.
"""

from __future__ import annotations

from context_core.llm.callable_adapter import CallableLLM, CompleteFn
from context_core.llm.convert import as_llm
from context_core.llm.protocol import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, LLM

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TEMPERATURE",
    "LLM",
    "CallableLLM",
    "CompleteFn",
    "as_llm",
]
