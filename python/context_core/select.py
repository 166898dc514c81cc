"""Context selection: what the model sees this turn, within an exact budget.

Three policies over one Rust kernel, each a :class:`Policy`:
``policy.select(messages_or_log, budget, *, now=None) -> Selection``.

- :class:`ShapeHistory`: the fast path. Everything if it fits; else system +
  first user message + a summary + the last N turns, N lowered 20 -> 3.
- :class:`WeightedWindow`: weights by tag (system 5, constraint 3, evidence 2,
  pulse 1.5, log 0.3, aged by 0.999 ** minutes; else 0.85 ** minutes), up to
  five constraint anchors first, then the newest three turns, then greedy by
  weight, output in chronological order.
- :class:`PriorityAssembly`: pinned, global summary, memories (to 80%),
  segment summaries (newest first, to 90%), recent messages (newest first,
  to 100%), the turn in progress.

All work on units (a tool call with all its results is one), never exceed the
budget by the exact count of what is returned, never drop system or pinned
messages or the turn in progress (the newest user message and everything
after it: the tool loop the model is in), and return a history ``sanitize``
accepts: from a history with messages, never an empty one (both APIs refuse
it; :class:`~context_core.errors.NothingToSendError` says why instead).

A :class:`~context_core.log.MessageLog` is one more input: every policy
chooses from its headers and decodes only what it keeps
(:mod:`context_core._log_selection`). This module drives the log, never
the other way round.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

from context_core import _log_selection, _selection
from context_core._core import (
    METADATA_KEYS,
    SEGMENT_PREFIX,
    SUMMARY_PREFIX,
    Sanitizer,
    Tagger,
    Tokenizer,
    ToolResultCut,
    _analyze,
    _MessageLog,
)
from context_core._selection import Item, Msg, Provider, Selection, SelectionBreakdown, System, joined_tokens
from context_core.budget import Budget
from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.types import Message, MessageLike

if TYPE_CHECKING:
    from context_core._core import _Analysis
    from context_core.log import MessageLog

__all__ = [
    "METADATA_KEYS",
    "SEGMENT_PREFIX",
    "SUMMARY_PREFIX",
    "Policy",
    "PriorityAssembly",
    "Selection",
    "SelectionBreakdown",
    "ShapeHistory",
    "Tagger",
    "ToolResultCut",
    "WeightedWindow",
    "shape_history",
    "tag",
]

DEFAULT_TOOL_RESULT_CAP = 2000
#: What a policy chooses from: messages, or a log's context view. At run
#: time the log's base class stands in, so ``typing.get_type_hints`` works
#: without importing the log (and numpy).
if TYPE_CHECKING:
    Source: TypeAlias = "Sequence[MessageLike] | MessageLog"
else:
    Source = Sequence[MessageLike] | _MessageLog
#: A summary text, or a callable given the messages that may be dropped.
Summary: TypeAlias = "str | Callable[[list[dict[str, Any]]], str] | None"


class Policy(Protocol):
    """What every selection policy is: the three here are interchangeable."""

    def select(self, messages: Source, budget: int | Budget, *, now: float | None = None) -> Selection:
        """Choose from ``messages`` (or a log) within ``budget`` tokens;
        ``now`` (epoch seconds) dates the messages for policies that age them."""
        ...


class _Backend:
    """The extension: analysis and kernels in Rust, exact cached counts."""

    def __init__(self, tokenizer: Tokenizer | None, tagger: Tagger | None) -> None:
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            raise InvalidTypeError(f"tokenizer must be a Tokenizer, not {type(tokenizer).__name__}")
        if tagger is not None and not isinstance(tagger, Tagger):
            raise InvalidTypeError(f"tagger must be a Tagger, not {type(tagger).__name__}")
        self.tokenizer = tokenizer or Tokenizer()
        self.tagger = tagger
        self._system_messages: dict[str, tuple[Msg, int]] = {}

    # The policies hand on the caller's messages as they are (read as
    # mappings), so the extension's message types are asserted, not checked.

    def analyze(self, messages: list[Msg], cap: int | None, find_tags: bool = True) -> _Analysis:
        return _analyze(cast("list[Message]", messages), self.tokenizer, self.tagger, cap, find_tags)

    def sanitize(self, messages: list[Msg], provider: str) -> tuple[list[Msg], System, list[Any]]:
        result = _laid_out_sanitizer(provider).sanitize(cast("list[Message]", messages))
        return cast("list[Msg]", result.messages), result.system, result.changes

    def lay_out(
        self, analysis: _Analysis, items: Sequence[Item], provider: str
    ) -> tuple[list[Msg], list[int | None], list[int], list[Msg], System, list[Any], int | None]:
        # In one call: the funnel takes the copies it was just handed as
        # checked, and the answer is counted (its merges from their parts).
        funnel = _laid_out_sanitizer(provider)
        (laid_out, known, units), result, tokens = analysis.lay_out_sanitized(items, funnel, self.tokenizer)
        final = cast("list[Msg]", result.messages)
        return laid_out, known, units, final, result.system, result.changes, tokens

    def system_message(self, text: str) -> tuple[Msg, int]:
        """A system message of ``text`` and its tokens: the same message
        while ``text`` comes back (a turn's memories and the summaries do,
        call after call), so it is made and counted once. The repair pass
        then finds the window it answered last call with the same messages
        at its start, and checks only what is new after them (made anew,
        they stopped that reuse at the window's first message). Treat it as
        read-only, as a log's own messages; one changed in place is made
        again, so its count is always that of what is sent."""
        held = self._system_messages.get(text)
        # One a caller changed in place (it is shared) is made again.
        if held is None or held[0] != {"role": "system", "content": text}:
            message: Msg = {"role": "system", "content": text}
            # A long one by its parts: Anthropic's repair lifts the summaries
            # and the turn's memories into one text, new each turn (about
            # 7,000 characters in a replayed session), whose BPE took
            # 0.14-0.4 ms of a user turn counted whole; most parts are known.
            joined = joined_tokens(self.count_joined, text)
            if joined is None:
                held = message, self.count_message(message)
            else:
                held = message, self.count_message({"role": "system", "content": ""}) + joined
            if len(self._system_messages) >= _SYSTEM_MESSAGES:
                self._system_messages.clear()  # a few a call; many only after long use
            self._system_messages[text] = held
        return held

    def count_message(self, message: Mapping[str, Any]) -> int:
        return self.tokenizer.count_message(cast("Message", message))

    def count_messages(self, messages: list[Msg]) -> int:
        return self.tokenizer.count_messages(cast("list[Message]", messages))

    def count_joined(self, parts: list[str]) -> int | None:
        """Tokens of ``"\\n\\n".join(parts)`` from the parts' cached counts;
        ``None``: count the joined text whole."""
        return self.tokenizer._count_joined(parts)


#: System messages (memories, summaries) a backend keeps made and counted.
_SYSTEM_MESSAGES = 256


@functools.cache
def _laid_out_sanitizer(provider: Provider) -> Sanitizer:
    """The funnel for what the policies lay out: its own, so the answers it
    keeps (windows that move each turn) do not crowd out the callers' own
    histories in the shared ``sanitize`` funnels."""
    return Sanitizer(provider)


def tag(text: str) -> list[str]:
    """The tags (``constraint``, ``evidence``, ``pulse``, ``log``) whose default
    keywords occur in ``text``; see :class:`Tagger` to change the lists."""
    return _DEFAULT_TAGGER.tag(text)


_DEFAULT_TAGGER = Tagger()


class ShapeHistory:
    """Everything if it fits in the budget; else [system] + [first user
    message] + [summary] + [last N turns], N lowered from ``keep_last`` to
    ``min_keep`` until it fits, then without the summary down to the last turn.

    ``summary`` is a text, or a callable given the messages that may be dropped
    (called at most once a selection, only when something must go), or ``None``.
    ``Selection.turns`` says which N was used (``None``: everything fit).
    """

    def __init__(
        self,
        *,
        keep_last: int = 20,
        min_keep: int = 3,
        summary: Summary = None,
        provider: Provider = "openai",
        tokenizer: Tokenizer | None = None,
        tool_result_cap: int | None = DEFAULT_TOOL_RESULT_CAP,
    ) -> None:
        self.keep_last = _selection.count(keep_last, "keep_last")
        self.min_keep = _selection.count(min_keep, "min_keep")
        self.summary = _selection.check_summary(summary)
        self.provider = _selection.check_provider(provider)
        self._backend = _Backend(tokenizer, None)
        self.tool_result_cap = _selection.tool_result_cap(tool_result_cap)

    def select(self, messages: Source, budget: int | Budget, *, now: float | None = None) -> Selection:
        """Choose from ``messages`` (or a log's context view) within
        ``budget``; ``now`` is accepted for the protocol (nothing here ages)."""
        _selection.check_now(now)
        if isinstance(messages, _MessageLog):
            return _log_selection.shape_history(
                messages,
                self._backend,
                budget,
                self.keep_last,
                self.min_keep,
                self.summary,
                self.provider,
                self.tool_result_cap,
            )
        return _selection.shape_history(
            self._backend,
            messages,
            budget,
            self.keep_last,
            self.min_keep,
            self.summary,
            self.provider,
            self.tool_result_cap,
        )


def shape_history(
    messages: Source,
    budget: int | Budget,
    keep_last: int = 20,
    min_keep: int = 3,
    summary: Summary = None,
    *,
    provider: Provider = "openai",
    tokenizer: Tokenizer | None = None,
    tool_result_cap: int | None = DEFAULT_TOOL_RESULT_CAP,
) -> Selection:
    """``ShapeHistory(...).select(messages, budget)`` in one call (without
    making the policy: the kernel checks the same arguments)."""
    backend = _Backend(tokenizer, None)

    def choose(view: Sequence[MessageLike]) -> Selection:
        return _selection.shape_history(
            backend, view, budget, keep_last, min_keep, summary, provider, tool_result_cap
        )

    if isinstance(messages, _MessageLog):
        return _log_selection.shape_history(
            messages, backend, budget, keep_last, min_keep, summary, provider, tool_result_cap
        )
    return choose(messages)


class WeightedWindow:
    """The weighted sliding window, on exact counts.

    A message weighs ``weight`` if it gives one; else ``system`` for system
    messages; else by its first tag in the order constraint, evidence, pulse,
    log, times ``tag_decay ** age``; else ``decay ** age``. The age is in
    minutes (from ``timestamp`` and ``now``, else one minute a message from
    the end). A unit weighs its heaviest message. Each power is computed as
    ``exp(age * ln(decay))`` (a third of a ``pow`` call's cost, on every
    node of a long log each turn).

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

    def select(self, messages: Source, budget: int | Budget, *, now: float | None = None) -> Selection:
        """Choose from ``messages`` within ``budget`` (``now``: epoch seconds for ages).

        From a :class:`~context_core.log.MessageLog`, the window over its
        context view is chosen from the headers alone (the exact counts and
        tags stored at append; the log must count in this policy's
        encoding), and only the kept nodes are decoded."""
        if isinstance(messages, _MessageLog):  # the log's base class: no import of the log here
            if self._backend.tagger is not None:
                # The headers hold the tags found at append, by the default keywords.
                raise InvalidInputError(
                    "a log's window weighs the tags its headers hold (the default tagger's); "
                    "select from log.context_view() to tag with your own Tagger"
                )
            return _log_selection.weighted_window(
                messages,
                self._backend,
                budget,
                self.weights,
                self.max_anchors,
                self.recent_turns,
                now,
                self.provider,
                self.tool_result_cap,
            )
        return _selection.weighted_window(
            self._backend,
            messages,
            budget,
            self.weights,
            self.max_anchors,
            self.recent_turns,
            now,
            self.provider,
            self.tool_result_cap,
        )


class PriorityAssembly:
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
        *,
        anchoring: bool = False,
        provider: Provider = "openai",
        tokenizer: Tokenizer | None = None,
        tagger: Tagger | None = None,
        tool_result_cap: int | None = DEFAULT_TOOL_RESULT_CAP,
    ) -> None:
        self.anchoring = _selection.check_flag(anchoring, "anchoring")
        self.provider = _selection.check_provider(provider)
        self._backend = _Backend(tokenizer, tagger)
        self.tool_result_cap = _selection.tool_result_cap(tool_result_cap)

    def select(
        self,
        messages: Source,
        budget: int | Budget,
        *,
        now: float | None = None,
        current_input: str | Message | None = None,
        global_summary: str | None = None,
        segment_summaries: Sequence[str] = (),
        memories: Sequence[str] = (),
    ) -> Selection:
        """Assemble the context for ``messages`` (or a log's context view).

        ``current_input``, if given, is appended after them (pass it only
        when the history does not hold it yet); its key in the selection is
        ``len(messages)``, one past the history's. A log holds its input:
        append it to the log first. ``now`` is accepted for the protocol
        (nothing here ages)."""
        _selection.check_now(now)
        if isinstance(messages, _MessageLog):
            if current_input is not None:
                raise InvalidInputError("a log holds the turn's input: append it, and pass no current_input")
            return _log_selection.build_context(
                messages,
                self._backend,
                budget,
                global_summary=global_summary,
                segment_summaries=segment_summaries,
                memories=memories,
                anchoring=self.anchoring,
                provider=self.provider,
                cap=self.tool_result_cap,
            )
        return _selection.build_context(
            self._backend,
            messages,
            budget,
            current_input=current_input,
            global_summary=global_summary,
            segment_summaries=segment_summaries,
            memories=memories,
            anchoring=self.anchoring,
            provider=self.provider,
            cap=self.tool_result_cap,
        )
