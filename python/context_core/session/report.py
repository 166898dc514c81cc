"""What a :class:`~context_core.Session` turn sent and why: the request with
its :class:`TurnReport`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from context_core._core import Change

__all__ = ["Request", "TurnReport"]


@dataclass(frozen=True)
class TurnReport:
    """One call's account: tokens per section, the cached prefix, where the
    time went, and what background work and repair did."""

    turn: int
    """The user turn this call belongs to (0 for the first)."""
    step: int
    """The call within the turn: 0 for the call its input starts, then one
    more for each plain ``prepare()`` (the next step, results recorded or
    not). The input given again (a retry) builds the step the turn is at; a
    reopened session's first plain ``prepare()`` is the step after the
    replies with calls the turn made."""
    sections: Mapping[str, int]
    """Tokens per section: the prompt's ``tools``, ``system``, ``stable``,
    ``volatile``, then the selection's ``pinned``, ``global_summary``,
    ``memories``, ``segments``, ``recent``, ``input`` (each kept message's own
    count; ``total`` is exact for the request as sent)."""
    total: int
    """The whole request, counted exactly as sent: messages with their
    framing, the system blocks and the tools (our tokenizer)."""
    limit: int
    """What the request may use, in our tokens: the budget's soft limit over
    the learned ratio, at most the window."""
    prefix_hash: str
    """SHA-256 of the cached prefix (tools, system part, stable part)."""
    prefix_changed: bool
    """The cached prefix differs from the previous call's (the provider's
    cache is lost for this request)."""
    timings: Mapping[str, float]
    """Seconds per stage: ``append``, ``memory``, ``prompt``, ``select``,
    ``render``, ``count``, ``schedule``, and ``total``."""
    memories: int
    """Memories retrieved from the store this turn."""
    repairs: tuple[Change, ...]
    """What sanitize changed in the selected messages."""
    compaction: Mapping[str, Any] = field(default_factory=dict)
    """``running`` (a job in flight), ``written`` (summaries written, by
    level), ``last`` (the last step's status), ``rules_left_out`` (the
    user's rules the summaries in view could not carry within their rule
    bounds: in the log, out of the window; see
    :class:`~context_core.compaction.CompactorStatus`), ``paused``."""
    cached_tokens: int | None = None
    """The provider's cache hit tokens on the previous call (from its usage),
    ``None`` before any usage was recorded."""
    shrunk: int = 0
    """How many times the selection was redone to fit the whole request."""
    cleared: int = 0
    """Tool results of the turn in progress sent as a short note instead
    (the oldest, where the turn's tool loop outgrew the room; the log keeps
    them whole)."""

    def log_line(self) -> str:
        """One line for the logs: the breakdown, the latency, the cache state."""
        parts = " ".join(f"{name}={tokens}" for name, tokens in self.sections.items() if tokens)
        cache = "changed" if self.prefix_changed else "kept"
        hit = "" if self.cached_tokens is None else f" cached={self.cached_tokens}"
        return (
            f"turn={self.turn}.{self.step} {parts} total={self.total}/{self.limit} "
            f"hits={self.memories} repairs={len(self.repairs)} "
            f"{f'cleared={self.cleared} ' if self.cleared else ''}"
            f"{self.timings.get('total', 0.0) * 1000:.3f}ms prefix={self.prefix_hash[:12]} {cache}{hit}"
        )


class Request(dict[str, Any]):
    """The keyword arguments for the user's own client
    (``client.chat.completions.create(**request)`` or
    ``client.messages.create(**request)``), with the turn's :attr:`report`."""

    report: TurnReport

    def __init__(self, arguments: Mapping[str, Any], report: TurnReport) -> None:
        super().__init__(arguments)
        self.report = report

    def __reduce__(self) -> tuple[Any, ...]:
        return Request, (dict(self), self.report)
