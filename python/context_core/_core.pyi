"""Type stubs of the extension module ``context_core._core``."""

import os
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, Self, Union, final

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from context_core.types import Message, MessageLike, ToolLike

EncodingName = Literal["o200k_base", "cl100k_base", "p50k_base", "r50k_base", "gpt2"]

ENCODINGS: Final[list[str]]
"""Names of the encodings this build knows."""
MODELS: Final[list[str]]
"""Known model names; a trailing ``*`` marks a prefix rule."""
TOKENS_PER_MESSAGE: Final[int]
TOKENS_PER_NAME: Final[int]
REPLY_PRIMING: Final[int]
TOKENS_PER_TOOL_CALL: Final[int]
IMAGE_TOKENS: Final[int]
IMAGE_TOKENS_LOW: Final[int]
ANTHROPIC_IMAGE_TOKENS: Final[int]
PDF_PAGE_TOKENS: Final[int]
MIN_CACHED_BYTES: Final[int]
SUMMARY_PREFIX: Final[str]
SEGMENT_PREFIX: Final[str]
SEGMENTS_KEPT: Final[int]
LOG_CACHED_BYTES: Final[int]
PARALLEL_FACTS_FROM: Final[int]
ECHO_MARKERS: Final[list[str]]
PARALLEL_MIN_BYTES: Final[int]

@final
class CacheInfo:
    """Statistics of an encoding's count cache."""

    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def capacity(self) -> int: ...

@final
class Tokenizer:
    """Exact token counts for one OpenAI encoding.

    Counts equal tiktoken's ``encode_ordinary``: text that looks like a special
    token (``"<|endoftext|>"``) is ordinary text, and lone surrogates are
    replaced by U+FFFD as tiktoken replaces them. Encodings load on first use
    and are shared by every ``Tokenizer`` of the process.
    """

    def __new__(cls, encoding: EncodingName = "o200k_base") -> Self: ...
    @staticmethod
    def for_model(model: str, *, fallback: Union[EncodingName, None] = None) -> Tokenizer:
        """The tokenizer of an OpenAI model, matched by exact name then by prefix
        (as ``tiktoken.encoding_for_model``). An unknown model raises
        :class:`~context_core.UnknownModelError` listing the known ones, unless
        ``fallback`` names an encoding to use instead."""
    @property
    def name(self) -> str:
        """The encoding's name, e.g. ``"o200k_base"``."""
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
    def decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens``; bytes that are not valid UTF-8 become U+FFFD.
        Special token ids decode to their text."""
    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """Bytes of ``tokens``."""
    def count(self, text: str, limit: Union[int, None] = None) -> int:
        """Exact token count of ``text``. With ``limit``, counting stops as soon
        as the count passes it and ``limit + 1`` is returned, so a budget check
        on a huge tool output costs about ``limit`` tokens of work."""
    def _count_cached(self, text: str) -> int:
        """``count(text)`` through this encoding's shared count cache."""
    def count_many(self, texts: Sequence[str]) -> npt.NDArray[np.int64]:
        """Token counts of ``texts`` as a numpy int64 array, counted in parallel
        on all cores with the GIL released once for the batch."""
    def truncate(self, text: str, max_tokens: int, marker: Union[str, None] = None) -> str:
        """``text`` cut to at most ``max_tokens`` tokens on a token boundary,
        never inside a character. ``marker`` (e.g. ``"…[truncated {dropped}
        tokens]"``; ``{dropped}`` becomes the number of tokens cut) is appended
        and fits inside the cap. A text that already fits is returned as is."""
    def count_message(self, message: MessageLike) -> int:
        """Tokens of one chat message, OpenAI or Anthropic format, without the
        reply priming."""
    def _count_joined(self, parts: list[str]) -> Union[int, None]:
        """Tokens of ``"\\n\\n".join(parts)`` from the parts' cached counts;
        ``None``: count the joined text whole."""
    def count_messages(
        self, messages: Sequence[MessageLike], tools: Union[Sequence[ToolLike], None] = None
    ) -> int:
        """Tokens of a chat request: every message, 3 tokens of reply priming,
        and the tool schemas if given."""
    def count_tools(self, tools: Sequence[ToolLike]) -> int:
        """Tokens the API bills for tool (function) schemas."""
    def cache_info(self) -> CacheInfo:
        """Statistics of this encoding's count cache (shared by all its tokenizers)."""
    def cache_clear(self) -> None:
        """Empty this encoding's count cache."""
    def set_cache_capacity(self, capacity: int) -> None:
        """Bound this encoding's count cache to ``capacity`` entries."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, tuple[str]]: ...

def encoding_name_for_model(model: str) -> str:
    """The encoding name for an OpenAI model (exact name first, then prefixes)."""

def _mergeable_ranks(encoding: EncodingName) -> dict[bytes, int]:
    """``{token bytes: id}`` of an encoding's ordinary tokens (for the reference)."""

DEFAULT_PLACEHOLDER_PATTERNS: Final[list[str]]
"""Placeholders such as ``[tool_call: name]`` that sanitize drops."""
DEFAULT_ERROR_PATTERNS: Final[list[str]]
"""Canned error and cancel replies (several languages) that sanitize drops."""
DEFAULT_MAX_PATTERN_CHARS: Final[int]
"""Texts longer than this (trimmed, in characters) are never matched."""
DEFAULT_FIRST_USER_TEXT: Final[str]
"""Text of the user turn inserted before an Anthropic history that starts with the assistant."""

@final
class Change:
    """One repair the sanitize funnel made."""

    def __new__(cls, stage: int, index: Union[int, None], action: str, reason: str) -> Self: ...
    def __reduce__(self) -> tuple[type[Change], tuple[int, Union[int, None], str, str]]: ...
    @property
    def stage(self) -> int:
        """1 (drop), 2 (merge), 3 (orphans) or 4 (merge again, provider rules)."""
    @property
    def index(self) -> Union[int, None]:
        """The input message concerned; ``None`` for an inserted message."""
    @property
    def action(self) -> str:
        """A short code: ``drop_invalid``, ``drop_role``, ``drop_placeholder``,
        ``drop_error_reply``, ``drop_empty``, ``drop_block``, ``drop_key``,
        ``empty_result``, ``lift_system``, ``convert_function``, ``merge``, ``drop_call``,
        ``drop_duplicate_call``, ``drop_result``, ``move_result``,
        ``reorder_blocks`` or ``insert_user``."""
    @property
    def reason(self) -> str:
        """What happened, for people."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class SanitizeResult:
    """What :func:`~context_core.sanitize` returns."""

    @property
    def messages(self) -> list[Message]:
        """The repaired messages; unchanged ones are the caller's own objects."""
    @property
    def system(self) -> Union[str, list[dict[str, Any]], None]:
        """Anthropic: the text lifted out of system messages (a str, or a list of
        text blocks when any had blocks); ``None`` when there was none."""
    @property
    def changes(self) -> list[Change]:
        """Every repair, in the order the stages made them."""
    @property
    def changed(self) -> bool:
        """Whether anything changed."""

@final
class Sanitizer:
    """The sanitize funnel for one provider, with its patterns compiled once.

    ``provider`` is ``"openai"`` (Chat Completions) or ``"anthropic"`` (Messages).
    ``convert_function`` turns legacy ``function_call``/``function`` messages into
    ``tool_calls``/``tool`` messages (OpenAI) instead of dropping them.
    ``on_invalid="drop"`` drops and reports malformed messages instead of raising.
    ``placeholder_patterns`` / ``error_patterns`` replace the defaults (regular
    expressions matched against the whole trimmed text of messages of at most
    ``max_pattern_chars`` characters). ``first_user_text`` is the text of the
    user turn inserted before an Anthropic history that starts with the assistant.
    """

    def __new__(
        cls,
        provider: Literal["openai", "anthropic"] = "openai",
        *,
        convert_function: bool = False,
        on_invalid: Literal["raise", "drop"] = "raise",
        placeholder_patterns: Union[Sequence[str], None] = None,
        error_patterns: Union[Sequence[str], None] = None,
        max_pattern_chars: Union[int, None] = None,
        first_user_text: Union[str, None] = None,
    ) -> Self: ...
    @property
    def provider(self) -> str: ...
    def sanitize(self, messages: Sequence[MessageLike]) -> SanitizeResult:
        """Repair ``messages``; the input is never mutated."""
    def __call__(self, messages: Sequence[MessageLike]) -> SanitizeResult: ...

METADATA_KEYS: Final[list[str]]
"""Message keys that carry selection metadata; selection removes them from its output."""
TRUNCATION_MARKER: Final[str]
DEFAULT_CONSTRAINT_KEYWORDS: Final[list[str]]
DEFAULT_CONSTRAINT_OPENERS: Final[list[str]]
DEFAULT_PULSE_KEYWORDS: Final[list[str]]
DEFAULT_EVIDENCE_MARKERS: Final[list[str]]
DEFAULT_LOG_MARKERS: Final[list[str]]

@final
class Tagger:
    """Tags texts ``constraint``, ``evidence``, ``pulse`` and ``log``.

    Keywords match on normalised text (NFKC, lower case, punctuation and
    symbols as separators): English keywords on word boundaries, others (such
    as Chinese) as substrings with punctuation and spaces removed; markers
    (``<think>``, ``http://``) as substrings of the lower-cased text;
    ``constraint_openers`` only where a sentence that asks nothing starts
    (the text, a line, after ``。``, ``.!?;:`` before a space or another
    script, a comma before another script; bullets, a list number and
    "please" / 请 passed over). Each list replaces its default when given.
    """

    def __new__(
        cls,
        *,
        constraint_keywords: Union[Sequence[str], None] = None,
        pulse_keywords: Union[Sequence[str], None] = None,
        evidence_markers: Union[Sequence[str], None] = None,
        log_markers: Union[Sequence[str], None] = None,
        constraint_openers: Union[Sequence[str], None] = None,
    ) -> Self: ...
    def tag(self, text: str) -> list[str]:
        """The tags whose keywords occur in ``text``."""

@final
class ToolResultCut:
    """A tool result cut to the cap before selection: message ``index``, and
    its exact tokens before the cut (``tokens``) and after it (``kept``)."""

    index: int
    tokens: int
    kept: int
    def __new__(cls, index: int, tokens: int, kept: int) -> Self: ...
    def __reduce__(self) -> tuple[type[ToolResultCut], tuple[int, int, int]]: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class _Analysis:
    @property
    def plain(self) -> bool:
        """Every message holds plain values only (no caller code runs to read it)."""
    @property
    def units(self) -> list[tuple[int, int, int, str, int, bool]]: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def tags(self) -> bytes: ...
    @property
    def ids(self) -> list[tuple[Union[str, None], list[str]]]: ...
    @property
    def truncations(self) -> list[tuple[int, Union[int, None], Union[int, None], str, int, int]]: ...
    @property
    def unit_count(self) -> int: ...
    @property
    def total_tokens(self) -> int: ...
    @property
    def depends(self) -> bool: ...
    @property
    def first_turn(self) -> Union[int, None]: ...
    @property
    def turn_starts(self) -> list[int]: ...
    def spans(self, units: list[int]) -> list[tuple[int, int, int, str]]: ...
    def kind_tokens(self, units: list[int]) -> tuple[int, int, int, int]: ...
    def lay_out(
        self, items: Sequence[Union[int, dict[str, Any]]]
    ) -> tuple[list[dict[str, Any]], list[Union[int, None]], list[int]]: ...
    def lay_out_sanitized(
        self,
        items: Sequence[Union[int, dict[str, Any]]],
        sanitizer: Sanitizer,
        tokenizer: Union[Tokenizer, None] = None,
    ) -> tuple[
        tuple[list[dict[str, Any]], list[Union[int, None]], list[int]], SanitizeResult, Union[int, None]
    ]: ...
    def kept(
        self, units: list[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, str], ...], tuple[ToolResultCut, ...]]: ...
    def expand(self, units: list[int]) -> tuple[list[int], list[int]]: ...
    def missing_dependencies(self, kept: list[int]) -> list[tuple[int, str]]: ...
    def constraint_starts(self) -> list[int]: ...
    def weighted(
        self,
        budget: int,
        weights: tuple[float, float, float, float, float, float, float],
        max_anchors: int,
        recent_turns: int,
        now: Union[float, None],
    ) -> list[int]: ...
    def shape(
        self, budget: int, keep_last: int, min_keep: int, summary_tokens: Union[int, None]
    ) -> tuple[list[int], Union[int, None], bool]: ...
    def build(
        self,
        budget: int,
        global_tokens: Union[int, None],
        memories: list[int],
        segments: list[int],
        anchoring: Union[int, None],
    ) -> tuple[list[int], list[int], list[int], bool, bool, list[int], list[int]]: ...

def _analyze(
    messages: Sequence[Message],
    tokenizer: Tokenizer,
    tagger: Union[Tagger, None] = None,
    cap: Union[int, None] = None,
    find_tags: bool = True,
) -> _Analysis:
    """Read ``messages`` for selection (``find_tags=False``: only the tags given)."""

def _run_counts() -> tuple[int, int]:
    """``(messages taken from kept runs, shapes checked)`` so far, for tests."""

@disjoint_base
class _MessageLog:
    """The Rust message log; ``context_core.MessageLog`` wraps it."""

    def __new__(
        cls,
        path: Union[str, os.PathLike[str]],
        *,
        create: bool = False,
        readonly: bool = False,
        encoding: Union[str, None] = None,
        new_encoding: Union[str, None] = None,
        durability: str = "batch",
        lock_timeout: float = 0.0,
    ) -> Self: ...
    def append(
        self,
        message: dict[str, Any],
        *,
        tags: Union[Iterable[str], None] = None,
        weight: Union[float, None] = None,
        pinned: Union[bool, None] = None,
        priority: Union[float, None] = None,
        parent: Union[int, None] = None,
        timestamp: Union[float, None] = None,
    ) -> int: ...
    def _append_many(self, messages: Sequence[Any]) -> tuple[int, int]: ...
    def __len__(self) -> int: ...
    def _read(self, seqs: list[int]) -> list[bytes]: ...
    def _view(self) -> list[tuple[int, str]]: ...
    def _weighted(
        self,
        budget: int,
        weights: tuple[float, float, float, float, float, float, float],
        max_anchors: int,
        recent_turns: int,
        now: Union[float, None] = None,
        cap: Union[int, None] = None,
        stand_ins: list[tuple[int, int]] = ...,
    ) -> Union[
        tuple[list[tuple[int, str]], tuple[int, int, int, int, int], Union[int, bytes], list[int]], None
    ]: ...
    def _shape(
        self,
        budget: int,
        keep_last: int,
        min_keep: int,
        summary_tokens: Union[int, None] = None,
        cap: Union[int, None] = None,
        stand_ins: list[tuple[int, int]] = ...,
    ) -> Union[tuple[list[tuple[int, str]], Union[int, bytes], list[int], Union[int, None], bool], None]: ...
    def _priority(
        self,
        budget: int,
        global_tokens: Union[int, None],
        memories: list[int],
        segments: list[int],
        cap: Union[int, None] = None,
        stand_ins: list[tuple[int, int]] = ...,
    ) -> Union[
        tuple[list[tuple[int, str]], Union[int, bytes], list[int], bool, list[int], list[int]], None
    ]: ...
    def _over_cap(self, cap: int) -> tuple[list[int], int, int]: ...
    def _set_capped(self, cap: int, start: int, upto: int, counts: list[tuple[int, int]]) -> None: ...
    def node_id(self, seq: int) -> str: ...
    def _add_summary(self, text: str, first: int, last: int, level: int) -> int: ...
    def _add_summary_if(
        self, text: str, first: int, last: int, level: int, expected_summary: Union[int, None]
    ) -> Union[int, None]: ...
    def rewind(self, seq: int) -> None: ...
    @property
    def head(self) -> Union[int, None]: ...
    @property
    def last_summary_index(self) -> Union[int, None]: ...
    def path(self, head: Union[int, None] = None) -> list[int]: ...
    def _turns(self) -> int: ...
    def _plan(
        self, recent_turns: int, segment_turns: int, segments_kept: int, tail_tokens: Union[int, None]
    ) -> Union[
        tuple[Literal["wait"], int, Union[int, None]],
        tuple[Literal["job"], int, int, int, list[int], list[int], list[int], Union[int, None]],
    ]: ...
    @property
    def encoding(self) -> str: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def flush(self) -> None: ...
    def _close(self) -> None: ...
    def verify(self) -> None: ...
    @staticmethod
    def _repair(
        path: Union[str, os.PathLike[str]], lock_timeout: float
    ) -> tuple[int, int, int, list[str]]: ...
    def _index_fd(self) -> int: ...

def _check_summary(
    reply: str, covered: str, max_tokens: int, tokenizer: Tokenizer
) -> tuple[Union[str, None], int, Union[str, None]]: ...
def _check_sections(text: str) -> Union[str, None]: ...
def _named(text: str) -> tuple[list[str], list[str]]: ...
def _occurs(value: str, text: str) -> bool: ...
def _entities(text: str) -> list[tuple[str, str]]: ...
def _entities_many(texts: list[str]) -> list[list[tuple[str, str]]]: ...
def _hash_embed(texts: list[str], dim: int) -> bytes: ...
def _rank_candidates(
    held: list[int],
    position: dict[int, int],
    ranks: list[tuple[str, str, float, float, int]],
    cosines: dict[int, float],
    keyword: dict[int, float],
    shared: dict[int, list[str]],
    unscored: set[int],
    accesses: dict[str, tuple[int, float]],
    kinds: tuple[str, ...] | None,
    now: float,
    weights: tuple[float, float, float, float, float, float, float],
) -> list[tuple[int, float, int, tuple[str, ...], float, float, bool]]: ...

@final
class _VectorIndex:
    def __new__(cls, dim: int) -> Self: ...
    @property
    def dim(self) -> int: ...
    def __len__(self) -> int: ...
    def extend(self, rows: bytes, tags: Union[bytes, None] = None) -> None: ...
    def set(self, index: int, row: bytes, tag: int = 0) -> None: ...
    def swap_remove(self, index: int) -> None: ...
    def scores(self, query: bytes, rows: list[int]) -> list[float]: ...
    def top_k(
        self,
        query: bytes,
        k: int,
        candidates: Union[int, None] = None,
        mask: Union[int, None] = None,
        cut: bool = False,
    ) -> list[tuple[int, float]]: ...
    def top_k_ahead(
        self,
        query: bytes,
        k: int,
        candidates: Union[int, None] = None,
        mask: Union[int, None] = None,
        cut: bool = False,
    ) -> _ScanAhead: ...

@final
class _ScanAhead:
    @property
    def ready(self) -> bool: ...
    def result(self) -> Union[list[tuple[int, float]], None]: ...

@final
class _KeywordIndex:
    def __new__(cls, prefix: str) -> Self: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: int, /) -> bool: ...
    @property
    def words(self) -> int: ...
    def set_many(self, keys: list[int], words: list[str], tags: Union[bytes, None] = None) -> None: ...
    def shrink_to_fit(self) -> None: ...
    def remove(self, key: int) -> bool: ...
    def holding(self, term: str) -> int: ...
    def chosen(self, terms: str, max_terms: int, max_postings: int) -> list[str]: ...
    def top(
        self,
        terms: str,
        limit: int,
        max_terms: int,
        max_postings: int,
        mask: Union[int, None] = None,
        corpus: Union[tuple[int, int, dict[str, int]], None] = None,
    ) -> list[tuple[int, float]]: ...
