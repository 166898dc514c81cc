"""Context selection: what the model sees this turn, within an exact budget.

Three policies over one Rust kernel:

- :func:`shape_history`: the fast path. Everything if it fits; else system +
  first user message + a summary + the last N turns, N lowered 20 -> 3.
- :class:`WeightedWindow`: weights by tag (system 5, constraint 3, evidence 2,
  pulse 1.5, log 0.3, aged by 0.999 ** minutes; else 0.85 ** minutes), up to
  five constraint anchors first, then the newest three turns, then greedy by
  weight, output in chronological order.
- :class:`ContextBuilder`: priority assembly: pinned, global summary, memories
  (to 80%), segment summaries (newest first, to 90%), recent messages (newest
  first, to 100%), the turn in progress.

All work on units (a tool call with all its results is one), never exceed the
budget by the exact count of what is returned, never drop system or pinned
messages or the turn in progress (the newest user message and everything
after it: the tool loop the model is in), and return a history ``sanitize``
accepts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from context_core import _selection
from context_core._core import Sanitizer, Tagger, Tokenizer, _analyze, _MessageLog
from context_core._selection import Breakdown, Selection, Truncated
from context_core.budget import Budget
from context_core.errors import InvalidTypeError
from context_core.types import Message

if TYPE_CHECKING:
    from context_core.log import MessageLog

__all__ = [
    "Breakdown",
    "ContextBuilder",
    "Selection",
    "Truncated",
    "WeightedWindow",
    "shape_history",
    "tag",
]

Provider = Literal["openai", "anthropic"]
DEFAULT_TOOL_RESULT_CAP = 2000


class _Backend:
    """The extension: analysis and kernels in Rust, exact cached counts."""

    def __init__(self, tokenizer: Tokenizer | None, tagger: Tagger | None) -> None:
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            raise InvalidTypeError(f"tokenizer must be a Tokenizer, not {type(tokenizer).__name__}")
        if tagger is not None and not isinstance(tagger, Tagger):
            raise InvalidTypeError(f"tagger must be a Tagger, not {type(tagger).__name__}")
        self.tokenizer = tokenizer or Tokenizer()
        self.tagger = tagger

    def analyze(self, messages: list, cap: int | None, find_tags: bool = True) -> Any:
        return _analyze(messages, self.tokenizer, self.tagger, cap, find_tags)

    def sanitize(self, messages: list[dict], provider: str) -> tuple[list[dict], Any, list]:
        result = _laid_out_sanitizer(provider).sanitize(messages)
        return result.messages, result.system, result.changes

    def lay_out(
        self, analysis: Any, items: list, provider: str
    ) -> tuple[list, list, list, list, Any, list, int | None]:
        # In one call: the funnel takes the copies it was just handed as checked.
        funnel = _laid_out_sanitizer(provider)
        (laid_out, known, units), result, tokens = analysis.lay_out_sanitized(items, funnel)
        return laid_out, known, units, result.messages, result.system, result.changes, tokens

    def count_message(self, message: Mapping[str, Any]) -> int:
        return self.tokenizer.count_message(message)

    def count_messages(self, messages: list[dict]) -> int:
        return self.tokenizer.count_messages(messages)

    def count_joined(self, parts: list[str]) -> int | None:
        """Tokens of ``"\\n\\n".join(parts)`` from the parts' cached counts;
        ``None``: count the joined text whole."""
        return self.tokenizer._count_joined(parts)


@functools.cache
def _laid_out_sanitizer(provider: str) -> Sanitizer:
    """The funnel for what the policies lay out: its own, so the answers it
    keeps (windows that move each turn) do not crowd out the callers' own
    histories in the shared ``sanitize`` funnels."""
    return Sanitizer(provider)


def tag(text: str) -> list[str]:
    """The tags (``constraint``, ``evidence``, ``pulse``, ``log``) whose default
    keywords occur in ``text``; see :class:`Tagger` to change the lists."""
    return _DEFAULT_TAGGER.tag(text)


_DEFAULT_TAGGER = Tagger()


def shape_history(
    messages: Sequence[Message],
    max_tokens: int | Budget,
    keep_last: int = 20,
    min_keep: int = 3,
    summary: str | Callable[[list[dict]], str] | None = None,
    *,
    provider: Provider = "openai",
    tokenizer: Tokenizer | None = None,
    tool_result_cap: int | None = DEFAULT_TOOL_RESULT_CAP,
) -> Selection:
    """Everything if it fits in ``max_tokens``; else [system] + [first user
    message] + [summary] + [last N turns], N lowered from ``keep_last`` to
    ``min_keep`` until it fits, then without the summary down to the last turn.

    ``summary`` is a text, or a callable given the messages that may be dropped
    (called at most once, only when something must go), or ``None``.
    ``Selection.turns`` says which N was used (``None``: everything fit).
    """
    return _selection.shape_history(
        _Backend(tokenizer, None),
        messages,
        max_tokens,
        keep_last,
        min_keep,
        summary,
        provider,
        tool_result_cap,
    )


class WeightedWindow:
    """The weighted sliding window, on exact counts.

    A message weighs ``weight`` if it gives one; else ``system`` for system
    messages; else by its first tag in the order constraint, evidence, pulse,
    log, times ``tag_decay ** age``; else ``decay ** age``. The age is in
    minutes (from ``timestamp`` and ``now``, else one minute a message from
    the end). A unit weighs its heaviest message.

    Kept, in this order, each wherever it fits: system and pinned messages
    and the turn in progress (the newest user message and every unit after
    it: the tool calls and results of the loop the model is in), which must
    fit or ``OverBudgetError`` names the sizes; up to ``max_anchors``
    constraint units (the earliest); the units of the newest
    ``recent_turns`` turns (the one in progress counts), newest first, within
    half the budget; then the rest, heaviest first. Output is chronological.
    A kept message whose ``depends_on`` names a dropped message is reported
    in ``Selection.missing_dependencies``.

    Tagged messages age about 160 times slower than untagged ones (0.999 a
    minute halves in 11.5 hours, 0.85 in 4 minutes): a rule said an hour
    ago still outweighs chatter, but after a day of work old requests yield
    to recent ones, and the newest turns are never pushed out by tags.

    The weights are finite numbers, ``decay`` and ``tag_decay`` within
    [0, 1]; ``max_anchors`` and ``recent_turns`` are non-negative ints
    (numpy's integers too).
    """

    def __init__(
        self,
        *,
        system: float = 5.0,
        constraint: float = 3.0,
        evidence: float = 2.0,
        pulse: float = 1.5,
        log: float = 0.3,
        decay: float = 0.85,
        tag_decay: float = 0.999,
        max_anchors: int = 5,
        recent_turns: int = 3,
        provider: Provider = "openai",
        tokenizer: Tokenizer | None = None,
        tagger: Tagger | None = None,
        tool_result_cap: int | None = DEFAULT_TOOL_RESULT_CAP,
    ) -> None:
        self.weights = _selection.policy_weights(
            system=system,
            constraint=constraint,
            evidence=evidence,
            pulse=pulse,
            log=log,
            decay=decay,
            tag_decay=tag_decay,
        )
        self.max_anchors = _selection.count(max_anchors, "max_anchors")
        self.recent_turns = _selection.count(recent_turns, "recent_turns")
        self.provider = _selection.check_provider(provider)
        self._backend = _Backend(tokenizer, tagger)
        self.tool_result_cap = _selection.tool_result_cap(tool_result_cap)

    def select(
        self, messages: Sequence[Message] | MessageLog, max_tokens: int | Budget, *, now: float | None = None
    ) -> Selection:
        """Choose from ``messages`` within ``max_tokens`` (``now``: epoch seconds for ages).

        ``messages`` may be a :class:`~context_core.MessageLog`: the window is
        then chosen from its headers (see :meth:`MessageLog.window`)."""
        if isinstance(messages, _MessageLog):  # the log's base class: no import of the log here
            return messages.window(max_tokens, self, now=now)
        return _selection.weighted_window(
            self._backend,
            messages,
            max_tokens,
            self.weights,
            self.max_anchors,
            self.recent_turns,
            now,
            self.provider,
            self.tool_result_cap,
        )


class ContextBuilder:
    """Priority assembly: pinned and the turn in progress (the newest user
    message and every unit after it; these must fit, or ``OverBudgetError``
    names the sizes) -> global summary -> retrieved memories (while the
    total is within 80% of the budget) -> segment summaries (newest first,
    within 90%) -> recent messages (higher ``priority`` first, then
    constraint-tagged ones, then the newest; within 100%).

    Output order: system and pinned messages, the global summary, memories,
    segment summaries, recent messages in chronological order, the anchored
    constraints (with ``anchoring=True``: the first three constraint messages
    said again) and the turn in progress. Summaries and memories are system
    messages (lifted into ``Selection.system`` for Anthropic).
    """

    def __init__(
        self,
        budget: int | Budget,
        *,
        anchoring: bool = False,
        provider: Provider = "openai",
        tokenizer: Tokenizer | None = None,
        tagger: Tagger | None = None,
        tool_result_cap: int | None = DEFAULT_TOOL_RESULT_CAP,
    ) -> None:
        self.budget = _selection.fixed_budget(budget)
        self.anchoring = _selection.check_flag(anchoring, "anchoring")
        self.provider = _selection.check_provider(provider)
        self._backend = _Backend(tokenizer, tagger)
        self.tool_result_cap = _selection.tool_result_cap(tool_result_cap)

    def build(
        self,
        history: Sequence[Message],
        *,
        current_input: str | Message | None = None,
        global_summary: str | None = None,
        segment_summaries: Sequence[str] = (),
        memories: Sequence[str] = (),
    ) -> Selection:
        """Assemble the context for ``history`` (plus ``current_input``, if the
        history does not end with it)."""
        return _selection.build_context(
            self._backend,
            history,
            self.budget,
            current_input=current_input,
            global_summary=global_summary,
            segment_summaries=list(segment_summaries),
            memories=list(memories),
            anchoring=self.anchoring,
            provider=self.provider,
            cap=self.tool_result_cap,
        )
