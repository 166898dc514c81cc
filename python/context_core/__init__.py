"""context_core: what goes into an LLM agent's context window, decided fast.

The foundation is exact token counting: :class:`Tokenizer` counts exactly as
OpenAI's tiktoken does, for the o200k_base, cl100k_base, p50k_base and r50k_base
encodings, and several times faster; it also prices whole chat requests
(messages in the OpenAI or Anthropic format, and tool schemas). :func:`sanitize`
repairs a history so the OpenAI or Anthropic API accepts it.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

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
    BudgetWarning,
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    LLMCancelledError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMTimeoutError,
    LogClosedError,
    LogCorruptError,
    LogForkedError,
    LogIndexError,
    LogLockedError,
    LogNotFoundError,
    LogStorageError,
    MemoryFormatError,
    MemoryLimitError,
    MemoryLockError,
    MemoryPathError,
    MemoryStorageError,
    OverBudgetError,
    PromptCacheWarning,
    UnknownEncodingError,
    UnknownModelError,
    UnknownSkillError,
)
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

if _typing.TYPE_CHECKING:
    from context_core.llm import LLM, AnthropicChat, CallableLLM, OpenAIChat, RetryPolicy, as_llm
    from context_core.log import HEADER_DTYPE, MessageLog, RepairReport
    from context_core.memory import Fact, MemoryFiles
    from context_core.prompt import (
        CouplingWeights,
        DimensionBlock,
        Dimensions,
        PromptBreakdown,
        PromptBuilder,
        PromptParts,
        Skill,
        SkillRegistry,
    )

__version__ = "0.1.0"

#: Names loaded on first use, by the module that holds each: the model
#: clients (asyncio, the SDK adapters), the log (numpy), memory files
#: (filelock) and prompt layers cost more to import than counting needs.
_LAZY = {
    **dict.fromkeys(("LLM", "AnthropicChat", "CallableLLM", "OpenAIChat", "RetryPolicy", "as_llm"), "llm"),
    **dict.fromkeys(("HEADER_DTYPE", "MessageLog", "RepairReport"), "log"),
    **dict.fromkeys(("Fact", "MemoryFiles"), "memory"),
    **dict.fromkeys(
        (
            "CouplingWeights",
            "DimensionBlock",
            "Dimensions",
            "PromptBreakdown",
            "PromptBuilder",
            "PromptParts",
            "Skill",
            "SkillRegistry",
        ),
        "prompt",
    ),
}


#: Submodules not imported by the package itself, loaded when named
#: (``context_core.llm.retry`` works after a bare ``import context_core``).
_SUBMODULES = frozenset({"cli", "llm", "log", "memory", "prompt", "reference"})


if not _typing.TYPE_CHECKING:  # a type checker sees the imports above, and typos stay errors

    def __getattr__(name: str) -> _typing.Any:
        if name in _SUBMODULES:
            return _importlib.import_module(f"context_core.{name}")
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'context_core' has no attribute {name!r}")
        value = getattr(_importlib.import_module(f"context_core.{module}"), name)
        globals()[name] = value  # the next lookup is a plain one
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY, *_SUBMODULES})


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
    "LLM",
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
    "AnthropicChat",
    "Breakdown",
    "Budget",
    "BudgetWarning",
    "CacheInfo",
    "CallableLLM",
    "Change",
    "ContextBuilder",
    "ContextCoreError",
    "CouplingWeights",
    "DimensionBlock",
    "Dimensions",
    "Fact",
    "InvalidInputError",
    "InvalidTypeError",
    "LLMCancelledError",
    "LLMConnectionError",
    "LLMError",
    "LLMRateLimitError",
    "LLMResponseError",
    "LLMTimeoutError",
    "LogClosedError",
    "LogCorruptError",
    "LogForkedError",
    "LogIndexError",
    "LogLockedError",
    "LogNotFoundError",
    "LogStorageError",
    "MemoryFiles",
    "MemoryFormatError",
    "MemoryLimitError",
    "MemoryLockError",
    "MemoryPathError",
    "MemoryStorageError",
    "MessageLog",
    "OpenAIChat",
    "OverBudgetError",
    "PromptBreakdown",
    "PromptBuilder",
    "PromptCacheWarning",
    "PromptParts",
    "RepairReport",
    "RetryPolicy",
    "SanitizeResult",
    "Sanitizer",
    "Selection",
    "Skill",
    "SkillRegistry",
    "Tagger",
    "Tokenizer",
    "Truncated",
    "UnknownEncodingError",
    "UnknownModelError",
    "UnknownSkillError",
    "WeightedWindow",
    "__version__",
    "as_llm",
    "encoding_name_for_model",
    "sanitize",
    "shape_history",
    "tag",
]
