"""Rendering to an Anthropic Messages request, with cache breakpoints.

Anthropic caches a prefix in the order tools -> system -> messages, up to a
block marked ``cache_control``. The request this renders is::

    tools:    the tool schemas (keys sorted)              } cached prefix
    system:   [system part  + cache_control,              }
               stable part  + cache_control,              }
               volatile part,                  <- after the last breakpoint
               context]                        <- summaries, memories
    messages: the conversation

so the tools ride in front of the first breakpoint, and a turn that changes
only the volatile part re-reads both cached prefixes. The context is
``system=`` (a selection's ``system``: the summaries, memories and system
messages it lifted out) and any system message the conversation starts with
(which the Messages API would refuse there): past every breakpoint, so a new
summary never changes the cached prefix. With no system text the
tools' own prefix is marked instead: the breakpoint goes on the last tool
(``tools[-1].cache_control``, in a copy of that schema), unless the caller's
schema already carries one. With
``volatile="user"`` the volatile part and the context go at the end of the last
user message instead, after the conversation, so a breakpoint the caller puts on
the conversation (to cache the history as well) stays valid from turn to turn.

**No tools, no tool blocks.** The API refuses tool calls and results in
the messages of a request that defines no tools; without tools they are
said as text (:mod:`~context_core.prompt.tool_text`).

**Minimum lengths.** A prefix shorter than the model's minimum cacheable
length is not cached (:data:`ANTHROPIC_MIN_CACHE_TOKENS`, by model-name
prefix, editable; ``min_cache_tokens=`` overrides it per call). A breakpoint
whose cumulative prefix (tools [+ system] [+ stable]) counts fewer tokens is
left out, with a :class:`~context_core.PromptCacheWarning` the first time for that
prefix and model. Counts come from the builder's tokenizer (o200k_base by
default); Claude's tokenizer usually counts more, so a breakpoint kept is above
the minimum, and one left out may have been just above it.

**At most 4 breakpoints** a request (the API refuses more). The caller's own
``cache_control`` marks (in messages and tools) are counted and never moved. If
they leave too little room, ours are dropped, the tools or system breakpoint
first (the stable breakpoint caches the longer prefix, system included), with
a warning each time; if the caller's alone are more than 4, the request could not be
sent, and :class:`~context_core.InvalidInputError` says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

from context_core.errors import CacheBreakpointsError, InvalidInputError, InvalidTypeError, PromptCacheWarning
from context_core.prompt.context_part import context_blocks, lift_system
from context_core.prompt.prefix import Prefix
from context_core.prompt.tool_text import tool_blocks_as_text
from context_core.types import AnthropicMessage, MessageLike

__all__ = [
    "ANTHROPIC_MIN_CACHE_TOKENS",
    "CACHE_TTLS",
    "DEFAULT_MIN_CACHE_TOKENS",
    "MAX_BREAKPOINTS",
    "AnthropicRequest",
    "CacheControl",
    "SystemBlock",
    "anthropic_request",
    "count_breakpoints",
    "min_cache_tokens",
    "too_many_breakpoints",
]

MAX_BREAKPOINTS = 4
"""The API's limit of ``cache_control`` blocks a request."""

CACHE_TTLS = ("5m", "1h")
"""The cache lifetimes the API accepts (``cache_control.ttl``)."""

DEFAULT_MIN_CACHE_TOKENS = 1024
"""The minimum for a model the table does not know."""

ANTHROPIC_MIN_CACHE_TOKENS: dict[str, int] = {
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
    "claude-sonnet-4-6": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-sonnet-4": 1024,
    "claude-haiku-4-5": 4096,
    "claude-3-7-sonnet": 1024,
    "claude-3-5-sonnet": 1024,
    "claude-3-opus": 1024,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
"""Minimum cacheable prompt length in tokens, by model-name prefix (the
longest matching prefix wins; ``anthropic.``/``@``-style platform names are
matched from their ``claude`` part). From Anthropic's prompt-caching
documentation; edit it, or pass ``min_cache_tokens=``, as models change."""


class CacheControl(TypedDict, total=False):
    type: Literal["ephemeral"]
    ttl: str


class _SystemBlockBase(TypedDict):
    type: Literal["text"]
    text: str


class SystemBlock(_SystemBlockBase, total=False):
    cache_control: CacheControl


class _AnthropicRequestBase(TypedDict):
    model: str
    system: list[SystemBlock]
    messages: list[AnthropicMessage]


class AnthropicRequest(_AnthropicRequestBase, total=False):
    """Keyword arguments for ``client.messages.create`` (add ``max_tokens``)."""

    tools: list[dict[str, Any]]


def min_cache_tokens(model: str) -> int:
    """The minimum cacheable prompt length of ``model``."""
    if not isinstance(model, str):
        raise InvalidTypeError(f"model must be a str, got {type(model).__name__}")
    name = model[model.find("claude") :] if "claude" in model else model
    best, found = -1, DEFAULT_MIN_CACHE_TOKENS
    for prefix, tokens in ANTHROPIC_MIN_CACHE_TOKENS.items():
        if name.startswith(prefix) and len(prefix) > best:
            best, found = len(prefix), tokens
    return found


def _count_blocks(blocks: list[Any]) -> int:
    total = 0
    for block in blocks:
        if isinstance(block, Mapping):
            total += "cache_control" in block
            inner = block.get("content")  # a tool_result's own blocks
            if isinstance(inner, list):
                total += _count_blocks(inner)
    return total


def count_breakpoints(messages: Sequence[Any]) -> int:
    """How many content blocks of ``messages`` (tool results' blocks
    included) carry ``cache_control``."""
    total = 0
    for message in messages:
        if not isinstance(message, Mapping):
            raise InvalidTypeError(f"a message must be a dict, got {type(message).__name__}")
        content = message.get("content")
        if isinstance(content, list):
            total += _count_blocks(content)
    return total


_PREFIXES = {"tools": "tools", "system": "tools + system", "stable": "tools + system + stable"}


def _plan(prefix: Prefix, model: str, minimum: int | None) -> tuple[str, ...]:
    """Our breakpoints worth placing for ``model`` (of ``"tools"``,
    ``"system"``, ``"stable"``, in prompt order), warning once per prefix and
    model about those left out. ``"tools"`` (the last tool) only when there
    is no system text to carry the tools' prefix and the caller did not
    mark the last tool."""
    key = (model, minimum)
    plan = prefix.plans.get(key)
    if plan is not None:
        return plan  # type: ignore[no-any-return]
    floor = min_cache_tokens(model) if minimum is None else minimum
    system = prefix.system
    cumulative = {
        "tools": system.tools_tokens,
        "system": system.tools_tokens + system.tokens,
        "stable": prefix.tokens,
    }
    tools_alone = bool(system.tools) and not system.text and not system.last_tool_marked()
    wanted = [
        name
        for name, present in (("tools", tools_alone), ("system", system.text), ("stable", prefix.stable))
        if present
    ]
    kept = []
    for name in wanted:
        if cumulative[name] >= floor:
            kept.append(name)
        else:
            warnings.warn(
                f"prompt cache: the {name} breakpoint is left out: its prefix ({_PREFIXES[name]})"
                f" counts {cumulative[name]} tokens, below the {floor}-token minimum of {model}",
                PromptCacheWarning,
                stacklevel=4,
            )
    plan = tuple(kept)
    prefix.plans[key] = plan
    return plan


def _block(text: str, cache: CacheControl | None) -> SystemBlock:
    if cache is None:
        return {"type": "text", "text": text}
    return {"type": "text", "text": text, "cache_control": dict(cache)}  # type: ignore[typeddict-item]


def _append_blocks(messages: list[Any], per_turn: list[Any]) -> None:
    """Put the volatile part and the context at the end of the last user
    message (a new user message when the conversation does not end with one)."""
    last = messages[-1] if messages else None
    if isinstance(last, Mapping) and last.get("role") == "user":
        content = last.get("content")
        if isinstance(content, str):
            blocks: list[Any] = [{"type": "text", "text": content}] if content else []
        elif isinstance(content, list):
            blocks = list(content)
        else:
            raise InvalidTypeError(
                f"the last message's content must be a str or a list, got {type(content).__name__}"
            )
        messages[-1] = {**last, "content": [*blocks, *per_turn]}
    else:
        messages.append({"role": "user", "content": list(per_turn)})


def too_many_breakpoints(carriers: str, breakpoints: int, limit: int) -> CacheBreakpointsError:
    """The error for ``carriers`` (what holds them) with ``breakpoints``
    ``cache_control`` marks, over the ``limit`` a request takes."""
    error = CacheBreakpointsError(
        f"{carriers} {breakpoints} cache_control breakpoints; the API accepts at most {limit} in a request"
    )
    error.breakpoints, error.limit = breakpoints, limit
    return error


def anthropic_request(
    prefix: Prefix,
    volatile: str,
    messages: Sequence[MessageLike],
    *,
    model: str,
    placement: Literal["system", "user"] = "system",
    min_cache_tokens: int | None = None,
    cache_ttl: str | None = None,
    max_breakpoints: int = MAX_BREAKPOINTS,
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> AnthropicRequest:
    """The request for ``model`` (see the module's docs)."""
    if not isinstance(model, str):
        raise InvalidTypeError(f"model must be a str, got {type(model).__name__}")
    if not model:
        raise InvalidInputError("model must be a model name, got ''")
    if isinstance(max_breakpoints, bool) or not isinstance(max_breakpoints, int):
        raise InvalidTypeError(f"max_breakpoints must be an int, got {type(max_breakpoints).__name__}")
    if max_breakpoints < 0:
        raise InvalidInputError(f"max_breakpoints must be >= 0, got {max_breakpoints}")
    if cache_ttl is not None:
        if not isinstance(cache_ttl, str):
            raise InvalidTypeError(f"cache_ttl must be a str, got {type(cache_ttl).__name__}")
        if cache_ttl not in CACHE_TTLS:
            raise InvalidInputError(f"cache_ttl must be '5m' or '1h' (or None), got {cache_ttl!r}")
    if min_cache_tokens is not None and (
        isinstance(min_cache_tokens, bool) or not isinstance(min_cache_tokens, int) or min_cache_tokens < 0
    ):
        raise InvalidInputError(f"min_cache_tokens must be an int >= 0, got {min_cache_tokens!r}")
    if placement not in ("system", "user"):
        raise InvalidInputError(f"volatile must be 'system' or 'user', got {placement!r}")
    if isinstance(messages, (str, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidTypeError(f"messages must be a list of messages, got {type(messages).__name__}")
    lifted, conversation = lift_system(messages)
    if not prefix.system.tools:  # the API refuses tool blocks in a request that defines no tools
        conversation = tool_blocks_as_text(conversation)
    context = context_blocks(system, lifted)
    plan = _plan(prefix, model, min_cache_tokens)
    theirs = count_breakpoints(conversation) + _count_blocks(context)
    theirs += prefix.system.tool_breakpoints() if prefix.system.tools else 0
    if theirs > max_breakpoints:
        raise too_many_breakpoints("the messages and tools already carry", theirs, max_breakpoints)
    room = max_breakpoints - theirs
    if len(plan) > room:
        dropped = plan[: len(plan) - room]  # the tools or system breakpoint goes first
        plan = plan[len(plan) - room :]
        warnings.warn(
            f"prompt cache: the {' and '.join(dropped)} breakpoint(s) left out: the request already"
            f" carries {theirs} of the {max_breakpoints} breakpoints allowed",
            PromptCacheWarning,
            stacklevel=3,
        )
    cache: CacheControl = {"type": "ephemeral"}
    if cache_ttl is not None:
        cache["ttl"] = cache_ttl
    blocks = [_block(prefix.system.text, cache if "system" in plan else None)] if prefix.system.text else []
    if prefix.stable:
        blocks.append(_block(prefix.stable, cache if "stable" in plan else None))
    per_turn: list[Any] = [{"type": "text", "text": volatile}] if volatile else []
    per_turn += context
    out = conversation
    if per_turn:
        if placement == "system":
            blocks.extend(per_turn)
        else:
            _append_blocks(out, per_turn)
    request: AnthropicRequest = {"model": model, "system": blocks, "messages": out}
    if prefix.system.tools:
        if "tools" in plan:
            request["tools"] = prefix.system.marked_tools(cache_ttl)
        else:
            request["tools"] = list(prefix.system.anthropic_tools)
    return request
