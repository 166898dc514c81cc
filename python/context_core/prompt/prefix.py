"""What every turn of a session shares: the tools, the system part and the
stable part, with their exact counts, provider forms and hash, computed once.

A warm turn reads these and builds nothing from them: the system text, the
tools in each provider's form and the prefix hash are the same objects turn
after turn. Treat the dicts a rendered request holds for the tools as
read-only: they are shared by every turn (copying 20K tokens of schemas each
turn would cost more than the rest of the turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from context_core._core import Tokenizer
from context_core.prompt.canonical import (
    PrefixHasher,
    anthropic_form,
    copy_tools,
    openai_form,
)
from context_core.types import Tool

__all__ = ["Prefix", "SystemPart"]


def _has_cache_control(value: Any) -> bool:
    return isinstance(value, dict) and "cache_control" in value


class SystemPart:
    """The tools and the system text of a session, counted and hashed once."""

    __slots__ = (
        "_anthropic_tools",
        "_marked_tools",
        "_openai_tools",
        "_tool_breakpoints",
        "hasher",
        "text",
        "tokenizer",
        "tokens",
        "tools",
        "tools_tokens",
    )

    def __init__(
        self, text: str, tools: Sequence[Any], tokenizer: Tokenizer, tokens: int | None = None
    ) -> None:
        self.text = text
        self.tokenizer = tokenizer
        self.tools: tuple[dict[str, Any], ...] = copy_tools(tools)
        self.tokens = tokenizer.count(text) if tokens is None else tokens
        self.tools_tokens = tokenizer.count_tools(cast("list[Tool]", list(self.tools))) if self.tools else 0
        self.hasher = PrefixHasher(self.tools, text)
        self._openai_tools: list[dict[str, Any]] | None = None
        self._anthropic_tools: list[dict[str, Any]] | None = None
        self._tool_breakpoints: int | None = None
        self._marked_tools: dict[str | None, list[dict[str, Any]]] = {}

    @property
    def openai_tools(self) -> list[dict[str, Any]]:
        """The tools in OpenAI's form, keys sorted (built on first use)."""
        if self._openai_tools is None:
            self._openai_tools = [openai_form(tool, i) for i, tool in enumerate(self.tools)]
        return self._openai_tools

    @property
    def anthropic_tools(self) -> list[dict[str, Any]]:
        """The tools in Anthropic's form, keys sorted (built on first use)."""
        if self._anthropic_tools is None:
            self._anthropic_tools = [anthropic_form(tool, i) for i, tool in enumerate(self.tools)]
        return self._anthropic_tools

    def last_tool_marked(self) -> bool:
        """Whether the caller's last tool carries its own ``cache_control``."""
        return bool(self.tools) and _has_cache_control(self.anthropic_tools[-1])

    def marked_tools(self, ttl: str | None) -> list[dict[str, Any]]:
        """The tools in Anthropic's form with our breakpoint on the last one
        (a new dict; the shared schemas are not touched). A new list each call,
        the dicts shared."""
        marked = self._marked_tools.get(ttl)
        if marked is None:
            cache = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}
            *head, last = self.anthropic_tools
            marked = [*head, dict(sorted({**last, "cache_control": cache}.items()))]
            self._marked_tools[ttl] = marked
        return list(marked)

    def tool_breakpoints(self) -> int:
        """How many of the caller's tools carry their own ``cache_control``."""
        if self._tool_breakpoints is None:
            self._tool_breakpoints = sum(1 for tool in self.anthropic_tools if _has_cache_control(tool))
        return self._tool_breakpoints


class Prefix:
    """A system part followed by one stable part: the cached prefix."""

    __slots__ = ("_openai_head", "hash", "plans", "stable", "stable_tokens", "system")

    def __init__(self, system: SystemPart, stable: str, stable_tokens: int | None = None) -> None:
        self.system = system
        self.stable = stable
        self.stable_tokens = system.tokenizer.count(stable) if stable_tokens is None else stable_tokens
        self.hash = system.hasher.with_stable(stable)
        self.plans: dict[tuple[Any, ...], Any] = {}
        """Anthropic breakpoint plans by ``(model, min_cache_tokens)``, made
        once (the TTL does not change which breakpoints are placed)."""
        self._openai_head: str | None = None

    @property
    def openai_head(self) -> str:
        """The OpenAI system message's text: the system part, a blank line,
        the stable part."""
        if self._openai_head is None:
            self._openai_head = f"{self.system.text}\n\n{self.stable}" if self.stable else self.system.text
        return self._openai_head

    @property
    def tokens(self) -> int:
        """Tools, system and stable tokens: the cached prefix's size."""
        return self.system.tools_tokens + self.system.tokens + self.stable_tokens
