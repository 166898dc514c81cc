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

from context_core._core import Sanitizer, Tokenizer
from context_core.budget import Budget
from context_core.errors import (
    BudgetTooSmallError,
    BudgetWarning,
    CacheBreakpointsError,
    ContextCoreError,
    EmbeddingError,
    InvalidInputError,
    InvalidTypeError,
    LLMCancelledError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMTimeoutError,
    LLMTruncatedError,
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
    ModelEncodingError,
    NothingToSendError,
    OverBudgetError,
    PromptCacheWarning,
    StoreBusyError,
    StoreClosedError,
    StoreStorageError,
    StoreVersionError,
    UnknownEncodingError,
    UnknownModelError,
    UnknownSkillError,
)
from context_core.sanitize import sanitize
from context_core.select import (
    Policy,
    PriorityAssembly,
    Selection,
    ShapeHistory,
    WeightedWindow,
    shape_history,
)

if _typing.TYPE_CHECKING:
    from context_core.compaction import Compactor
    from context_core.llm import LLM, AnthropicChat, CallableLLM, OpenAIChat, as_llm
    from context_core.log import MessageLog
    from context_core.memory import MemoryFiles
    from context_core.memory_store import MemoryStore, Namespace
    from context_core.prompt import PromptBuilder
    from context_core.session import AsyncSession, Request, Session, ToolCall, TurnReport
    from context_core.summarize import Summarizer

__version__ = "0.1.0"

#: Names loaded on first use, by the module that holds each: the model
#: clients (asyncio, the SDK adapters), the log (numpy), memory files
#: (filelock) and prompt layers cost more to import than counting needs.
_LAZY = {
    **dict.fromkeys(("LLM", "AnthropicChat", "CallableLLM", "OpenAIChat", "as_llm"), "llm"),
    "MessageLog": "log",
    "MemoryFiles": "memory",
    **dict.fromkeys(("MemoryStore", "Namespace"), "memory_store"),
    "PromptBuilder": "prompt",
    "Summarizer": "summarize",
    "Compactor": "compaction",
    **dict.fromkeys(("AsyncSession", "Request", "Session", "ToolCall", "TurnReport"), "session"),
}


#: Submodules not imported by the package itself, loaded when named
#: (``context_core.llm.retry`` works after a bare ``import context_core``).
_SUBMODULES = frozenset(
    {
        "cli",
        "compaction",
        "llm",
        "log",
        "memory",
        "memory_store",
        "prompt",
        "reference",
        "sdk_messages",
        "session",
        "summarize",
        "tokens",
    }
)


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


#: What callers use: the counter, the repair, the budget, the policies and
#: what they return, the log, summaries and compaction, memory files, prompt
#: layers, the model clients and every exception (so ``except context_core.X`` works for all).
#: Constants, result parts and configuration types live in the submodules:
#: ``tokens``, ``sanitize``, ``select``, ``log``, ``memory``, ``prompt``,
#: ``llm``, ``errors`` and ``types``.
__all__ = [
    "LLM",
    "AnthropicChat",
    "AsyncSession",
    "Budget",
    "BudgetTooSmallError",
    "BudgetWarning",
    "CacheBreakpointsError",
    "CallableLLM",
    "Compactor",
    "ContextCoreError",
    "EmbeddingError",
    "InvalidInputError",
    "InvalidTypeError",
    "LLMCancelledError",
    "LLMConnectionError",
    "LLMError",
    "LLMRateLimitError",
    "LLMResponseError",
    "LLMTimeoutError",
    "LLMTruncatedError",
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
    "MemoryStore",
    "MessageLog",
    "ModelEncodingError",
    "Namespace",
    "NothingToSendError",
    "OpenAIChat",
    "OverBudgetError",
    "Policy",
    "PriorityAssembly",
    "PromptBuilder",
    "PromptCacheWarning",
    "Request",
    "Sanitizer",
    "Selection",
    "Session",
    "ShapeHistory",
    "StoreBusyError",
    "StoreClosedError",
    "StoreStorageError",
    "StoreVersionError",
    "Summarizer",
    "Tokenizer",
    "ToolCall",
    "TurnReport",
    "UnknownEncodingError",
    "UnknownModelError",
    "UnknownSkillError",
    "WeightedWindow",
    "__version__",
    "as_llm",
    "sanitize",
    "shape_history",
]
