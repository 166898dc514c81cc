"""context_core: what goes into an LLM agent's context window, decided fast.

The foundation is exact token counting: :class:`Tokenizer` counts exactly as
OpenAI's tiktoken does, for the o200k_base, cl100k_base, p50k_base and r50k_base
encodings, and several times faster; it also prices whole chat requests
(messages in the OpenAI or Anthropic format, and tool schemas). :func:`sanitize`
repairs a history so the OpenAI or Anthropic API accepts it.
"""

from __future__ import annotations

from context_core._core import (
    ANTHROPIC_IMAGE_TOKENS,
    DEFAULT_ERROR_PATTERNS,
    DEFAULT_FIRST_USER_TEXT,
    DEFAULT_MAX_PATTERN_CHARS,
    DEFAULT_PLACEHOLDER_PATTERNS,
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
    Change,
    Sanitizer,
    SanitizeResult,
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
from context_core.sanitize import sanitize

__version__ = "0.1.0"

__all__ = [
    "ANTHROPIC_IMAGE_TOKENS",
    "DEFAULT_ERROR_PATTERNS",
    "DEFAULT_FIRST_USER_TEXT",
    "DEFAULT_MAX_PATTERN_CHARS",
    "DEFAULT_PLACEHOLDER_PATTERNS",
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
    "Change",
    "ContextCoreError",
    "InvalidInputError",
    "InvalidTypeError",
    "SanitizeResult",
    "Sanitizer",
    "Tokenizer",
    "UnknownEncodingError",
    "UnknownModelError",
    "__version__",
    "encoding_name_for_model",
    "sanitize",
]
