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
    METADATA_KEYS,
    MIN_CACHED_BYTES,
    MODELS,
    PARALLEL_MIN_BYTES,
    REPLY_PRIMING,
    SEGMENT_PREFIX,
    SUMMARY_PREFIX,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL_CALL,
    CacheInfo,
    Change,
    Sanitizer,
    SanitizeResult,
    Tagger,
    Tokenizer,
    encoding_name_for_model,
)
from context_core.budget import Budget
from context_core.errors import (
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    LogClosedError,
    LogCorruptError,
    LogIndexError,
    LogLockedError,
    LogNotFoundError,
    LogStorageError,
    OverBudgetError,
    UnknownEncodingError,
    UnknownModelError,
)
from context_core.log import HEADER_DTYPE, MessageLog, RepairReport
from context_core.sanitize import sanitize
from context_core.select import (
    Breakdown,
    ContextBuilder,
    Selection,
    Truncated,
    WeightedWindow,
    shape_history,
    tag,
)

__version__ = "0.1.0"

__all__ = [
    "ANTHROPIC_IMAGE_TOKENS",
    "DEFAULT_ERROR_PATTERNS",
    "DEFAULT_FIRST_USER_TEXT",
    "DEFAULT_MAX_PATTERN_CHARS",
    "DEFAULT_PLACEHOLDER_PATTERNS",
    "ENCODINGS",
    "HEADER_DTYPE",
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "METADATA_KEYS",
    "MIN_CACHED_BYTES",
    "MODELS",
    "PARALLEL_MIN_BYTES",
    "REPLY_PRIMING",
    "SEGMENT_PREFIX",
    "SUMMARY_PREFIX",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOKENS_PER_TOOL_CALL",
    "Breakdown",
    "Budget",
    "CacheInfo",
    "Change",
    "ContextBuilder",
    "ContextCoreError",
    "InvalidInputError",
    "InvalidTypeError",
    "LogClosedError",
    "LogCorruptError",
    "LogIndexError",
    "LogLockedError",
    "LogNotFoundError",
    "LogStorageError",
    "MessageLog",
    "OverBudgetError",
    "RepairReport",
    "SanitizeResult",
    "Sanitizer",
    "Selection",
    "Tagger",
    "Tokenizer",
    "Truncated",
    "UnknownEncodingError",
    "UnknownModelError",
    "WeightedWindow",
    "__version__",
    "encoding_name_for_model",
    "sanitize",
    "shape_history",
    "tag",
]
