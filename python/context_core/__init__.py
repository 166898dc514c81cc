"""context_core: what goes into an LLM agent's context window, decided fast.

The foundation is exact token counting: :class:`Tokenizer` counts exactly as
OpenAI's tiktoken does, for the o200k_base, cl100k_base, p50k_base and r50k_base
encodings, and several times faster; it also prices whole chat requests
(messages in the OpenAI or Anthropic format, and tool schemas).
"""

from __future__ import annotations

from context_core._core import (
    ANTHROPIC_IMAGE_TOKENS,
    ENCODINGS,
    IMAGE_TOKENS,
    IMAGE_TOKENS_LOW,
    MIN_CACHED_BYTES,
    MODELS,
    PARALLEL_MIN_BYTES,
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL_CALL,
    CacheInfo,
    Tokenizer,
    encoding_name_for_model,
)
from context_core.errors import (
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    UnknownEncodingError,
    UnknownModelError,
)

__version__ = "0.1.0"

__all__ = [
    "ANTHROPIC_IMAGE_TOKENS",
    "ENCODINGS",
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "MIN_CACHED_BYTES",
    "MODELS",
    "PARALLEL_MIN_BYTES",
    "REPLY_PRIMING",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOKENS_PER_TOOL_CALL",
    "CacheInfo",
    "ContextCoreError",
    "InvalidInputError",
    "InvalidTypeError",
    "Tokenizer",
    "UnknownEncodingError",
    "UnknownModelError",
    "__version__",
    "encoding_name_for_model",
]
