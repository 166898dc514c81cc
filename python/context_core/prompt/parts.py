"""``PromptParts``: a prompt in three parts by lifetime, and its rendering.

* ``system``: static for the whole session (identity, conventions, safety,
  the skills index, the memory guide), with the ``tools``. Cached.
* ``stable``: session facts that do not change within the session. Cached,
  behind its own breakpoint.
* ``volatile``: what changes every turn (date and time, working directory,
  the memory excerpt, loaded skills, instructions, the task block). After the
  last breakpoint, so changing it never invalidates the cache.

A :class:`~context_core.PromptBuilder` makes one each turn; one can also be
made by hand from three strings.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from context_core._core import Tokenizer
from context_core.errors import InvalidTypeError
from context_core.prompt.counting import Truncation
from context_core.prompt.prefix import Prefix, SystemPart
from context_core.prompt.render_anthropic import MAX_BREAKPOINTS, AnthropicRequest, anthropic_request
from context_core.prompt.render_openai import OpenAIRequest, openai_request
from context_core.types import MessageLike, ToolLike

__all__ = ["LAYERS", "PromptBreakdown", "PromptParts"]

LAYERS: dict[str, str] = {
    "tools": "system",
    "identity": "system",
    "conventions": "system",
    "safety": "system",
    "skills_index": "system",
    "memory_guide": "system",
    "session_facts": "stable",
    "session_context": "stable",
    "runtime": "volatile",
    "memory": "volatile",
    "skills": "volatile",
    "instructions": "volatile",
    "task": "volatile",
}
"""Every layer, in prompt order, and the part it belongs to. By lifetime:
resident (tools, identity, conventions, safety, the skills index and the
memory guide), session (facts and context), runtime-injected (``runtime``:
date and time, working directory, channel, user preferences), memory
(MEMORY.md), on-demand (``skills``: the bodies loaded this turn), per-turn
(``instructions``, ``task``)."""


@dataclass(frozen=True)
class PromptBreakdown:
    """Exact tokens per layer and per part.

    ``layers`` maps each layer present to its tokens; a part's layers sum to
    the part's exact count (``system``, ``stable``, ``volatile``: the texts as
    counted alone; ``tools`` as the API bills tool schemas)."""

    layers: Mapping[str, int]
    tools: int
    system: int
    stable: int
    volatile: int

    @property
    def total(self) -> int:
        """Tools, system, stable and volatile tokens (message framing aside)."""
        return self.tools + self.system + self.stable + self.volatile

    @property
    def cached(self) -> int:
        """The tokens a warm turn reads from the cache (tools, system, stable)."""
        return self.tools + self.system + self.stable

    def __getitem__(self, layer: str) -> int:
        return self.layers.get(layer, 0)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.layers.items())

    def log_line(self) -> str:
        """``identity=... runtime=... system=... stable=... volatile=... total=...``."""
        layers = " ".join(f"{name}={tokens}" for name, tokens in self.layers.items())
        return (
            f"{layers} | tools={self.tools} system={self.system} stable={self.stable}"
            f" volatile={self.volatile} total={self.total}"
        )

    def __str__(self) -> str:
        return self.log_line()


@dataclass(frozen=True, eq=False)
class PromptParts:
    """A prompt's three parts (and the tools), ready to render.

    Made by hand (or by :func:`dataclasses.replace`), the parts are counted
    (o200k_base) and hashed from their own texts. Made by a builder, they
    share its cached counts, hash and provider forms, so rendering costs only
    the volatile part."""

    system: str
    stable: str = ""
    volatile: str = ""
    tools: Sequence[ToolLike] = ()
    breakdown: PromptBreakdown = field(default=None, init=False, repr=False)  # type: ignore[assignment]
    """Exact tokens per layer (made by hand: per part only)."""
    stable_changed: bool = False
    """The stable part differs from the previous turn's of the same session
    (the provider's cached prefix is lost for this request; also warned)."""
    skills: tuple[str, ...] = ()
    """The skills whose bodies were loaded this turn."""
    truncated: tuple[Truncation, ...] = ()
    """What was cut to fit (the memory excerpt, task items)."""
    kept_out: tuple[str, ...] = ()
    """Lines left out of this prompt (stable and volatile parts) because they
    state a never-enter rule, as they were given (before escaping)."""
    _prefix: Prefix | None = field(default=None, init=False, repr=False)
    """The cached prefix (tools, system, stable) these texts make; shared by
    every turn of a builder's session. Never passed in: it is always made
    from (or, by a builder, for) the texts above."""

    def __post_init__(self) -> None:
        for name in ("system", "stable", "volatile"):
            if not isinstance(getattr(self, name), str):
                raise InvalidTypeError(
                    f"PromptParts.{name} must be a str, got {type(getattr(self, name)).__name__}"
                )
        if isinstance(self.tools, (str, Mapping)) or not isinstance(self.tools, Sequence):
            raise InvalidTypeError(
                f"PromptParts.tools must be a list of tool schemas, got {type(self.tools).__name__}"
            )
        prefix = Prefix(SystemPart(self.system, self.tools, Tokenizer()), self.stable)
        system = prefix.system
        volatile = system.tokenizer.count(self.volatile)
        layers = {"tools": system.tools_tokens, "system": system.tokens, "stable": prefix.stable_tokens}
        layers["volatile"] = volatile
        breakdown = PromptBreakdown(
            {k: v for k, v in layers.items() if v},
            system.tools_tokens,
            system.tokens,
            prefix.stable_tokens,
            volatile,
        )
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "tools", system.tools)
        object.__setattr__(self, "breakdown", breakdown)

    @classmethod
    def _assemble(
        cls,
        prefix: Prefix,
        volatile: str,
        breakdown: PromptBreakdown,
        stable_changed: bool,
        skills: tuple[str, ...],
        truncated: tuple[Truncation, ...],
        kept_out: tuple[str, ...],
    ) -> PromptParts:
        """A builder's turn: the parts over its checked, counted and hashed
        prefix (nothing is recounted)."""
        parts = object.__new__(cls)
        fields = (
            ("system", prefix.system.text),
            ("stable", prefix.stable),
            ("volatile", volatile),
            ("tools", prefix.system.tools),
            ("breakdown", breakdown),
            ("stable_changed", stable_changed),
            ("skills", skills),
            ("truncated", truncated),
            ("kept_out", kept_out),
            ("_prefix", prefix),
        )
        for name, value in fields:
            object.__setattr__(parts, name, value)
        return parts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PromptParts):
            return NotImplemented
        mine = (self.system, self.stable, self.volatile, self.prefix.system.tools)
        return mine == (other.system, other.stable, other.volatile, other.prefix.system.tools)

    __hash__ = None  # type: ignore[assignment]

    @property
    def prefix(self) -> Prefix:
        """The cached prefix (tools, system, stable) with its counts and hash."""
        return self._prefix  # type: ignore[return-value]

    def prefix_hash(self) -> str:
        """SHA-256 (hex) of the cached prefix: the tools' canonical JSON, the
        system part, the stable part. Equal from turn to turn exactly when the
        provider's cached prefix is byte-identical; computed once a session
        (and once again for each new stable part)."""
        return self.prefix.hash

    def to_openai(
        self,
        messages: Sequence[MessageLike] = (),
        *,
        model: str | None = None,
        volatile: Literal["system", "user"] = "system",
        role: Literal["system", "developer"] = "system",
        system: str | Sequence[Mapping[str, Any]] | None = None,
    ) -> OpenAIRequest:
        """Keyword arguments for ``client.chat.completions.create``: one
        system message (the parts, then ``system`` and the text of any system
        message ``messages`` starts with), the rest of ``messages``, the
        tools, the model when given. Pass a selection's messages as they are:
        its summaries and memories land after the volatile part, outside the
        cached prefix. See :mod:`context_core.prompt.render_openai` for the
        layout."""
        return openai_request(
            self.prefix,
            self.volatile,
            messages,
            model=model,
            placement=volatile,
            role=role,
            system=system,
        )

    def to_anthropic(
        self,
        messages: Sequence[MessageLike] = (),
        *,
        model: str,
        volatile: Literal["system", "user"] = "system",
        min_cache_tokens: int | None = None,
        cache_ttl: str | None = None,
        max_breakpoints: int = MAX_BREAKPOINTS,
        system: str | Sequence[Mapping[str, Any]] | None = None,
    ) -> AnthropicRequest:
        """Keyword arguments for ``client.messages.create`` (add
        ``max_tokens``): the tools, the system blocks with their cache
        breakpoints and then ``system`` (pass a selection's ``system``: its
        summaries, memories and lifted system messages), the conversation.
        See
        :mod:`context_core.prompt.render_anthropic` for the layout and the
        breakpoint policy."""
        return anthropic_request(
            self.prefix,
            self.volatile,
            messages,
            model=model,
            placement=volatile,
            min_cache_tokens=min_cache_tokens,
            cache_ttl=cache_ttl,
            max_breakpoints=max_breakpoints,
            system=system,
        )

    def text(self) -> str:
        """The three parts as one text, a blank line apart (for logs and tests)."""
        return "\n\n".join(part for part in (self.system, self.stable, self.volatile) if part)
