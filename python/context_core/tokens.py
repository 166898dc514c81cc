"""Exact token counting: the :class:`Tokenizer` and the constants it prices
chat requests with (OpenAI's framing per message, name and tool call, the
reply priming, image tiles, PDF pages), the encodings and models it knows, and the
thresholds of its count cache and parallel path."""

from __future__ import annotations

from context_core._core import (
    ANTHROPIC_IMAGE_TOKENS,
    ENCODINGS,
    IMAGE_TOKENS,
    IMAGE_TOKENS_LOW,
    MIN_CACHED_BYTES,
    MODELS,
    PARALLEL_MIN_BYTES,
    PDF_PAGE_TOKENS,
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOKENS_PER_TOOL_CALL,
    CacheInfo,
    Tokenizer,
    encoding_name_for_model,
)

__all__ = [
    "ANTHROPIC_IMAGE_TOKENS",
    "ENCODINGS",
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "MIN_CACHED_BYTES",
    "MODELS",
    "PARALLEL_MIN_BYTES",
    "PDF_PAGE_TOKENS",
    "REPLY_PRIMING",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOKENS_PER_TOOL_CALL",
    "CacheInfo",
    "Tokenizer",
    "encoding_name_for_model",
]
