"""Laying out what a selection policy kept, shared by the extension-backed
policies (``context_core.select``) and their reference twins.

A backend supplies the hot parts (the analysis with its policy kernels, the
sanitize funnel, exact counts); this module turns kept units and extras into
the messages to send, sanitizes them, counts the result exactly and, in the
rare case merges and fixes made it longer than the budget, asks the kernel
again with the excess taken off the budget.
"""

from __future__ import annotations

import math
import numbers
import operator
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from context_core._core import METADATA_KEYS, SEGMENT_PREFIX, SUMMARY_PREFIX, Change, ToolResultCut
from context_core.errors import InvalidInputError, InvalidTypeError, NothingToSendError, OverBudgetError

MEMORY_PREFIX = "Relevant memory: "
ANCHOR_PREFIX = "Constraints to keep in mind:\n"
CONSTRAINT = 1
_METADATA = frozenset(METADATA_KEYS)
SECTION_OF_KIND = {"system": "pinned", "pinned": "pinned", "current": "input"}
PROVIDERS = ("openai", "anthropic")
Provider = Literal["openai", "anthropic"]

Msg = dict[str, Any]
#: What a layout holds: a unit's number, or an extra message (a summary, a memory).
Item = int | Msg
#: WeightedWindow's weights in the kernels' order.
Weights = tuple[float, float, float, float, float, float, float]
System = str | list[Msg] | None


class Backend(Protocol):
    def analyze(self, messages: list[Msg], cap: int | None, find_tags: bool = True) -> Any: ...
    def sanitize(self, messages: list[Msg], provider: str) -> tuple[list[Msg], System, list[Any]]: ...
    def lay_out(
        self, analysis: Any, items: Sequence[Item], provider: str
    ) -> tuple[list[Msg], list[int | None], list[int], list[Msg], System, list[Any], int | None]:
        """The analysis's ``lay_out(items)`` and the funnel's answer for it:
        ``(laid_out, known, units, final, system, changes, tokens)``. ``tokens``:
        those of ``final`` without the reply priming (``known`` is then
        ``[]``), or ``None`` for the caller to count (``count_sent``)."""
        ...

    def system_message(self, text: str) -> tuple[Msg, int]:
        """A system message of ``text`` and its tokens."""
        ...

    def count_message(self, message: Mapping[str, Any]) -> int: ...
    def count_messages(self, messages: list[Msg]) -> int: ...
    def count_joined(self, parts: list[str]) -> int | None: ...


@dataclass(frozen=True, slots=True)
class SelectionBreakdown:
    """Tokens per section, and the exact total of what is sent against the budget.

    Sections add up each kept message's own count; ``total`` counts the final
    messages (merged, with the reply priming, and the system text lifted out
    for Anthropic), so it can differ from their sum by a few tokens.
    """

    pinned: int
    """System and pinned messages (and the first user message ShapeHistory keeps)."""
    global_summary: int
    memories: int
    segments: int
    """Segment summaries."""
    recent: int
    input: int
    """The turn in progress."""
    total: int
    budget: int

    def log_line(self) -> str:
        return (
            f"pinned={self.pinned} global_summary={self.global_summary} memories={self.memories} "
            f"segments={self.segments} recent={self.recent} input={self.input} "
            f"total={self.total}/{self.budget}"
        )

    def __str__(self) -> str:
        return self.log_line()


@dataclass(frozen=True, slots=True)
class Selection:
    """What a selection policy chose: frozen, its parts tuples."""

    messages: list[dict[str, Any]]
    """The messages to send: chronological, sanitized, metadata keys removed.
    A list, as the SDKs take it; chosen from a log, its messages are shared
    with later turns (as are the memory and summary messages a policy
    makes), so treat them as read-only."""
    system: str | list[dict[str, Any]] | None
    """Anthropic: the system text lifted out of system messages (and extras)."""
    breakdown: SelectionBreakdown
    kept: tuple[int, ...]
    """The keys of the kept input messages, each once, in order:
    ``source[key]`` is the message. For a list, its indices; for a
    :class:`~context_core.log.MessageLog`, the seqs of the kept nodes."""
    truncated: tuple[ToolResultCut, ...] = ()
    """Kept tool results cut to the policy's ``tool_result_cap``."""
    missing_dependencies: tuple[tuple[int, str], ...] = ()
    """``(key, id)``: a kept message depends on message ``id``, which was dropped."""
    turns: int | None = None
    """ShapeHistory: the number of last turns kept (``None``: everything fit)."""
    changes: tuple[Change, ...] = ()
    """What sanitize changed in the laid-out messages (indices into that list)."""
    _dropped: tuple[int, ...] | Callable[[], tuple[int, ...]] = field(default=(), repr=False, compare=False)
    # Equal selections compare equal (dropped follows from the rest); none
    # hashes, as its messages are a list.
    __hash__ = None  # type: ignore[assignment]

    @property
    def dropped(self) -> tuple[int, ...]:
        """The keys of the input messages left out, in order. For a log: the
        seqs of the context view it chose from that were left out, listed on
        first read (a turn need not list them)."""
        dropped = self._dropped
        if callable(dropped):
            dropped = dropped()
            object.__setattr__(self, "_dropped", dropped)
        return dropped


def prepare(messages: Iterable[Mapping[str, Any]], provider: str) -> list[Msg]:
    check_provider(provider)
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        got = type(messages).__name__
        raise InvalidTypeError(
            f"messages must be a list, tuple or other iterable of message dicts (or a MessageLog), not {got}"
        )
    return list(messages)  # type: ignore[arg-type]  # read as mappings; dicts in the types


# -- the policies' arguments, checked alike for the extension and the reference --------------


def count(value: Any, name: str) -> int:
    """A non-negative int argument: Python's or numpy's integers, not a bool."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise InvalidTypeError(f"{name} must be int, not {type(value).__name__}")
    number = operator.index(value)
    if number < 0:
        raise InvalidInputError(f"{name} must be a non-negative int, got {number}")
    return number


def check_provider(provider: Any) -> Provider:
    if not isinstance(provider, str):
        raise InvalidTypeError(f'provider must be "openai" or "anthropic", not {type(provider).__name__}')
    if provider not in PROVIDERS:
        raise InvalidInputError(f'provider must be "openai" or "anthropic", got {provider!r}')
    return "openai" if provider == "openai" else "anthropic"  # an exact str, as the kernels take


def tool_result_cap(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise InvalidTypeError(f"tool_result_cap must be a positive int or None, not {type(value).__name__}")
    number = operator.index(value)
    if number < 1:
        raise InvalidInputError(f"tool_result_cap must be a positive int or None, got {number}")
    return min(number, sys.maxsize)  # no text is longer; the kernels take a machine-sized count


def policy_weights(**weights: Any) -> Weights:
    """WeightedWindow's weights as floats, in the kernels' order (system,
    constraint, evidence, pulse, log, decay, tag_decay). NaN would make the
    order of the units undefined, and a decay outside [0, 1] makes
    ``decay ** age`` complex or overflow."""
    for name, value in weights.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InvalidTypeError(f"{name} must be a number, not {type(value).__name__}")
        if not _finite(value):
            raise InvalidInputError(f"{name} must be finite, got {value}")
    for name in ("decay", "tag_decay"):
        if not 0 <= weights[name] <= 1:
            raise InvalidInputError(f"{name} must be in [0, 1], got {weights[name]}")
    system, constraint, evidence, pulse, log, decay, tag_decay = (
        float(weights[name])
        for name in ("system", "constraint", "evidence", "pulse", "log", "decay", "tag_decay")
    )
    return system, constraint, evidence, pulse, log, decay, tag_decay


def check_summary(summary: Any) -> Any:
    """ShapeHistory's summary: a text, a callable (checked for what it
    returns when called) or ``None``."""
    if summary is not None and not isinstance(summary, str) and not callable(summary):
        raise InvalidTypeError(f"summary must be str, a callable or None, not {type(summary).__name__}")
    return summary


def check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be bool, not {type(value).__name__}")
    return value


def check_now(now: Any) -> float | None:
    if now is None:
        return None
    if isinstance(now, bool) or not isinstance(now, numbers.Real):
        raise InvalidTypeError(f"now must be a number (epoch seconds) or None, not {type(now).__name__}")
    if not _finite(now):
        raise InvalidInputError(f"now must be finite, got {now}")
    return float(now)


def _finite(value: numbers.Real) -> bool:
    """Finite as a float: an int past a float's range (10**400) is not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_budget(max_tokens: Any) -> bool:
    return hasattr(max_tokens, "messages") and callable(max_tokens.messages)


def budget_tokens(max_tokens: Any) -> int:
    """A token budget given as an int or a ``Budget`` (its ``messages()``)."""
    if is_budget(max_tokens):
        tokens = max_tokens.messages()
        if is_budget(tokens):  # a budget's share is a number, never a budget
            raise InvalidTypeError(f"budget.messages() must return int, not {type(tokens).__name__}")
        return budget_tokens(tokens)  # checked as an int too
    if isinstance(max_tokens, bool) or not hasattr(type(max_tokens), "__index__"):
        raise InvalidTypeError(f"budget must be int or Budget, not {type(max_tokens).__name__}")
    tokens = operator.index(max_tokens)
    if tokens < 0:
        raise InvalidInputError(f"budget must be non-negative, got {tokens}")
    return tokens


def exact_text(text: str) -> str:
    """``text`` as an exact ``str``: a subclass could run the caller's code
    when joined (``__radd__``) after the analysis, and change a message."""
    return text if type(text) is str else str.__str__(text)


def exact_texts(texts: Any, name: str) -> list[str]:
    """A sequence of str argument, iterated once (before the analysis) into
    exact strings (see :func:`exact_text`)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise InvalidTypeError(f"{name} must be a sequence of str, not {type(texts).__name__}")
    items = list(texts)
    if any(not isinstance(t, str) for t in items):
        raise InvalidTypeError(f"{name} must be a sequence of str")
    return [exact_text(t) for t in items]


def message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "\n".join(
            b["text"] for b in content if isinstance(b, Mapping) and isinstance(b.get("text"), str)
        )
    return ""


class Layout:
    """Builds the output of one selection from the analysis and a plan."""

    def __init__(self, backend: Backend, messages: list[Msg], analysis: Any, provider: str) -> None:
        self.backend = backend
        self.messages = messages
        self.analysis = analysis
        self.provider = provider
        # Whether the funnel may take the laid-out copies as the analysis
        # found them: only if none of the caller's code can have run since
        # (which could have changed the messages in place). Reading a message
        # of plain values runs none; a summary callable turns this off, and
        # the caller's texts are made exact strings before the analysis.
        self.vouch: bool = analysis.plain

    def extra(self, text: str) -> tuple[Msg, int]:
        return self.backend.system_message(text)

    def finish(
        self,
        items: Sequence[Item],
        budget: int,
        sections: Mapping[str, int],
        turns: int | None = None,
    ) -> tuple[Selection, int]:
        """Lay out ``items`` (a unit's number, or an extra message) into the
        output; sanitize and count it. Returns the selection and the tokens
        over budget."""
        # The kept messages as sent (the analysis makes them, and keeps them
        # from one turn to the next) with their exact counts.
        tokens: int | None = None
        known: list[int | None]
        if self.vouch:
            laid_out, known, units, final, system, changes, tokens = self.backend.lay_out(
                self.analysis, items, self.provider
            )
        else:
            laid_out, known, units = self.analysis.lay_out(items)
            final, system, changes = self.backend.sanitize(laid_out, self.provider)
        if tokens is None:
            total = count_sent(self.backend, laid_out, final, known)
        else:
            total = tokens + self.backend.count_messages([])  # the reply priming
        if system:
            total += system_tokens(self.backend, system)
        kept, dropped, missing, truncated = self.analysis.kept(units)
        breakdown = SelectionBreakdown(
            pinned=sections.get("pinned", 0),
            global_summary=sections.get("global", 0),
            memories=sections.get("memories", 0),
            segments=sections.get("segments", 0),
            recent=sections.get("recent", 0),
            input=sections.get("input", 0),
            total=total,
            budget=budget,
        )
        selection = Selection(
            messages=final,
            system=system,
            breakdown=breakdown,
            kept=kept,
            truncated=truncated,
            missing_dependencies=missing,
            turns=turns,
            changes=tuple(changes),
            _dropped=dropped,
        )
        return selection, total - budget

    def sum_units(self, units: Sequence[int], sections: dict[str, int], override: str | None = None) -> None:
        """Add the tokens of ``units`` to their sections (``override``: all to one)."""
        sums = self.analysis.kind_tokens(list(units))
        for kind, tokens in zip(("system", "pinned", "current", "normal"), sums, strict=True):
            if tokens:
                name = override or SECTION_OF_KIND.get(kind, "recent")
                sections[name] = sections.get(name, 0) + tokens


#: How sanitize joins the texts of neighbours it merges.
TEXT_SEPARATOR = "\n\n"

#: A text shorter than this is counted whole by :func:`joined_tokens`: its
#: parts would cost what counting it does.
SPLIT_FROM = 2048
#: Nor one of more parts: they would fill the count cache with fragments.
MOST_PARTS = 512


def joined_tokens(count_joined: Callable[[list[str]], int | None], text: str) -> int | None:
    """Tokens of a long ``text`` from the cached counts of its blank-line
    separated parts (``count_joined``, a backend's or a tokenizer's), so a
    part counted on an earlier turn (the prompt, a summary) costs no BPE
    again; ``None`` where it is to be counted whole (short, in too many
    parts, or joined where a part's end cannot be said simply)."""
    if len(text) < SPLIT_FROM:
        return None
    parts = text.split(TEXT_SEPARATOR)
    if len(parts) < 2 or len(parts) > MOST_PARTS:
        return None
    return count_joined(parts)


def system_tokens(backend: Backend, system: str | list[Any]) -> int:
    """Tokens of the ``system`` Anthropic's repair lifted out of the
    messages, as one system message (the backend's, counted once while the
    turn's calls send the same)."""
    if isinstance(system, str):
        return backend.system_message(system)[1]
    return backend.count_message({"role": "system", "content": system})


def count_sent(
    backend: Backend, laid_out: list[Msg], final: list[Msg], known: Sequence[int | None] = ()
) -> int:
    """Exact tokens of ``final``, sanitize's output for ``laid_out``.

    ``known[j]``, where given, is the exact count of ``laid_out[j]`` (the
    analysis counted it): a message sanitize left as it was costs nothing.

    A merged message is a new string every turn (the newest input joins the
    text before it), so counting it whole costs BPE on all of it. Instead
    each part's count (cached) is adjusted at each ``"\n\n"`` join by the
    characters after each part's last letter or digit (``Backend.count_joined``,
    on the pre-tokenizer's own character tables), counted again with the join.
    A message sanitize changed in any other way is counted whole. The walk
    keeps its place in ``laid_out`` by identity, so a message sanitize
    dropped or added does not lose it. (The extension's ``sent_tokens`` is
    the same walk.)
    """
    same = len(final) == len(laid_out) == len(known) and all(map(operator.is_, final, laid_out))
    if same:
        # Sanitize changed nothing: the counts are known (the priming once).
        if None not in known:
            return sum(t for t in known if t is not None) + backend.count_messages([])
        unknown = [m for m, tokens in zip(laid_out, known, strict=True) if tokens is None]
        return sum(t for t in known if t is not None) + backend.count_messages(unknown)
    whole: list[Msg] = []  # counted in one call (its reply priming included once)
    total = 0
    j = 0
    at: dict[int, int] | None = None  # laid-out places by identity, made when the walk loses its own
    for message in final:
        if j < len(laid_out) and message is laid_out[j]:
            own = j
        else:
            if at is None:
                at = {id(m): i for i, m in enumerate(laid_out)}
            own = at.get(id(message), -1)
        if own >= 0:
            tokens = known[own] if own < len(known) else None
            if tokens is None:
                whole.append(message)
            else:
                total += tokens
            j = own + 1
            continue
        parts = _merged_parts(laid_out, j, message)
        if parts is None:
            whole.append(message)
            continue
        total += _count_merged(backend, message, parts)
        j += len(parts)
    return total + backend.count_messages(whole)


def _merged_parts(laid_out: list[Msg], j: int, message: Mapping[str, Any]) -> list[str] | None:
    """The texts of the laid-out messages from ``j`` that ``message`` joins, if it is exactly that."""
    content = message.get("content")
    if not isinstance(content, str) or not isinstance(message.get("role"), str):
        return None
    parts: list[str] = []
    length = -len(TEXT_SEPARATOR)
    while j + len(parts) < len(laid_out) and length < len(content):
        source = laid_out[j + len(parts)]
        text = source.get("content")
        if source.get("role") != message["role"] or not isinstance(text, str):
            return None
        parts.append(text)
        length += len(TEXT_SEPARATOR) + len(text)
    if len(parts) < 2 or length != len(content) or TEXT_SEPARATOR.join(parts) != content:
        return None
    return parts


def _count_merged(backend: Backend, message: Mapping[str, Any], parts: list[str]) -> int:
    joined = backend.count_joined(parts)
    if joined is None:
        return backend.count_message(message)
    return backend.count_message({**message, "content": ""}) + joined


def settle(run: Callable[[int], tuple[Selection, int]], budget: int) -> Selection:
    """Run a policy at ``budget``; if the laid-out result is over (sanitize
    inserted a turn, say), run it again with the excess taken off. Every
    policy's answer, a list's or a log's, comes through here, and is
    refused where it would send no message (:func:`sendable`).

    The excess can be more than what must go for the rest to fit: a short
    Anthropic reply before the input, kept, makes the repair open the
    history with a user turn, and leaving the reply out leaves that turn
    out too. Where taking the excess off leaves less than what every
    window must keep, the least that must be kept is tried once before
    the budget is refused."""
    target, least_tried = budget, False
    while True:
        try:
            selection, over = run(target)
        except OverBudgetError as error:
            least = must_keep(error)
            if target == budget or least_tried or least is None or not target < least < budget:
                raise
            target, least_tried = least, True
            continue
        if over <= 0:
            return sendable(selection, budget)
        target -= over


def must_keep(error: OverBudgetError) -> int | None:
    """The tokens every window must keep, from ``error``'s sizes (``None``
    where it has none)."""
    sizes = (error.system, error.pinned, error.turn_in_progress, error.priming)
    if all(size is None for size in sizes):
        return None
    return sum(size or 0 for size in sizes)


def sendable(selection: Selection, budget: int) -> Selection:
    """``selection``, unless a history that had messages would send none:
    both APIs refuse a request without messages, and an empty list would
    hide that the history was dropped (by the budget, or by sanitize). An
    empty history is answered with an empty selection: nothing was dropped.
    (Less can only keep less: a run again at a lower target, were it over,
    could not bring a message back.)"""
    if selection.messages or not (selection.kept or selection.dropped):
        return selection
    if selection.kept:
        reasons = "; ".join(dict.fromkeys(change.reason for change in selection.changes))
        error = NothingToSendError(
            f"nothing to send: sanitize took out every message the policy kept ({reasons});"
            " both APIs refuse a request without messages (add the user's input)"
        )
    else:
        error = NothingToSendError(
            f"nothing to send: no message of the history fits in the budget of {budget} tokens,"
            " and none had to be kept (no system or pinned message, no turn in progress);"
            " both APIs refuse a request without messages"
        )
    error.kept, error.budget = selection.kept, budget
    raise error


def shape_history(
    backend: Backend,
    messages: Iterable[Mapping[str, Any]],
    max_tokens: Any,
    keep_last: int,
    min_keep: int,
    summary: str | Callable[[list[Msg]], str] | None,
    provider: str,
    cap: int | None,
) -> Selection:
    messages = prepare(messages, provider)
    budget = budget_tokens(max_tokens)
    keep_last, min_keep = count(keep_last, "keep_last"), count(min_keep, "min_keep")
    summary = check_summary(summary)
    cap = tool_result_cap(cap)
    analysis = backend.analyze(messages, cap, find_tags=False)  # turns and sizes only
    layout = Layout(backend, messages, analysis, provider)
    first_user = analysis.first_turn

    def summary_message(summary: str | Callable[[list[Msg]], str]) -> Msg:
        if callable(summary):
            # Called once, with everything that could be dropped: between the
            # first user message and the last ``min_keep`` turns.
            starts = analysis.turn_starts
            tail = starts[len(starts) - min_keep] if 0 < min_keep <= len(starts) else analysis.unit_count
            middle = [
                messages[m]
                for start, end, _tokens, _kind in analysis.spans(list(range((first_user or 0) + 1, tail)))
                for m in range(start, end)
            ]
            layout.vouch = False  # the caller's code ran after the analysis
            text: object = summary(middle)
        else:
            text = summary
        if not isinstance(text, str):
            raise InvalidTypeError(f"summary must be str or return str, not {type(text).__name__}")
        return {"role": "system", "content": SUMMARY_PREFIX + exact_text(text)}

    # Made only when something must go (a callable is called at most once):
    # at the budget, or at the lower target a run is retried at when the
    # repair made its output larger than the kernel's count (Anthropic's
    # leading user turn, say), where turns are cut and the summary is due.
    extra: tuple[Msg, int] | None = None

    def run(target: int) -> tuple[Selection, int]:
        nonlocal extra
        if extra is None and summary is not None and analysis.total_tokens + 3 > target:
            message = summary_message(summary)
            extra = message, backend.count_message(message)
        summary_tokens = None if extra is None else extra[1]
        kept, turns, with_summary = shape(analysis, target, keep_last, min_keep, summary_tokens)
        return lay_out_shape(layout, kept, turns, with_summary, extra, budget)

    return settle(run, budget)


def lay_out_shape(
    layout: Layout,
    kept: Sequence[int],
    turns: int | None,
    with_summary: bool,
    extra: tuple[Msg, int] | None,
    budget: int,
) -> tuple[Selection, int]:
    """ShapeHistory's output for the units ``kept`` (sorted): the summary
    (``extra``, when kept) after the first user message, or first; the
    first user message counted as pinned when turns were cut."""
    analysis = layout.analysis
    first_user = analysis.first_turn
    # No loop over the units in Python: a window that holds everything
    # would pay it per kept message. A unit is kept at most once.
    items: list[Item] = list(kept)
    sections: dict[str, int] = {}
    first_kept = first_user is not None and first_user in kept
    if with_summary and extra is not None:  # the kernel keeps a summary only when given one
        if not first_kept:
            items.insert(0, extra[0])
        elif turns is not None:
            items.insert(kept.index(first_user) + 1, extra[0])
        sections["global"] = extra[1]
    if turns is not None and first_kept:
        others = list(kept)
        others.remove(first_user)
        layout.sum_units(others, sections)
        layout.sum_units([first_user], sections, override="pinned")
    else:
        layout.sum_units(kept, sections)
    return layout.finish(items, budget, sections, turns)


def shape(
    analysis: Any, budget: int, keep_last: int, min_keep: int, summary_tokens: int | None
) -> tuple[list[int], int | None, bool]:
    """``analysis.shape`` for any ``keep_last`` and ``min_keep``, however large.

    The kernel tries every N from ``keep_last`` down (a machine-sized count);
    for N at or past the number of turns T it keeps the same units, so it is
    asked for at most T, and a result at T is reported as the N the full
    search would have stopped at: ``keep_last`` in its first pass (with the
    summary, or with none given), ``min(min_keep, keep_last)`` in its second.
    """
    min_keep = min(min_keep, keep_last)
    kept: list[int]
    turns: int | None
    with_summary: bool
    if keep_last <= analysis.unit_count:  # T <= units: a short search, and the kernel's own answer
        kept, turns, with_summary = analysis.shape(budget, keep_last, min_keep, summary_tokens)
        return kept, turns, with_summary
    turns_in = len(analysis.turn_starts)
    kept, turns, with_summary = analysis.shape(
        budget, min(keep_last, turns_in), min(min_keep, turns_in), summary_tokens
    )
    if turns == turns_in:
        turns = keep_last if with_summary or summary_tokens is None else min_keep
    return kept, turns, with_summary


def weighted_window(
    backend: Backend,
    messages: Iterable[Mapping[str, Any]],
    max_tokens: Any,
    weights: tuple[float, ...],
    max_anchors: int,
    recent_turns: int,
    now: float | None,
    provider: str,
    cap: int | None,
) -> Selection:
    run, budget = weighted_window_run(
        backend, messages, max_tokens, weights, max_anchors, recent_turns, now, provider, cap
    )
    return settle(run, budget)


def weighted_window_run(
    backend: Backend,
    messages: Iterable[Mapping[str, Any]],
    max_tokens: Any,
    weights: tuple[float, ...],
    max_anchors: int,
    recent_turns: int,
    now: float | None,
    provider: str,
    cap: int | None,
) -> tuple[Callable[[int], tuple[Selection, int]], int]:
    """The one-pass run of :func:`weighted_window` at any target, and the budget."""
    messages = prepare(messages, provider)
    budget = budget_tokens(max_tokens)
    now = check_now(now)
    max_anchors, recent_turns = count(max_anchors, "max_anchors"), count(recent_turns, "recent_turns")
    analysis = backend.analyze(messages, cap)
    layout = Layout(backend, messages, analysis, provider)
    # No more anchors than units: the kernel sets aside room for max_anchors of them.
    anchors = min(max_anchors, analysis.unit_count)
    recent_turns = min(recent_turns, analysis.unit_count)

    def run(target: int) -> tuple[Selection, int]:
        kept = analysis.weighted(target, weights, anchors, recent_turns, now)
        sections: dict[str, int] = {}
        layout.sum_units(kept, sections)
        return layout.finish(kept, budget, sections)

    return run, budget


def build_context(
    backend: Backend,
    history: Iterable[Mapping[str, Any]],
    max_tokens: Any,
    *,
    current_input: str | Mapping[str, Any] | None,
    global_summary: str | None,
    segment_summaries: Sequence[str],
    memories: Sequence[str],
    anchoring: bool,
    provider: str,
    cap: int | None,
) -> Selection:
    run, budget = build_context_run(
        backend,
        history,
        max_tokens,
        current_input=current_input,
        global_summary=global_summary,
        segment_summaries=segment_summaries,
        memories=memories,
        anchoring=anchoring,
        provider=provider,
        cap=cap,
    )
    return settle(run, budget)


def build_context_run(
    backend: Backend,
    history: Iterable[Mapping[str, Any]],
    max_tokens: Any,
    *,
    current_input: str | Mapping[str, Any] | None,
    global_summary: str | None,
    segment_summaries: Sequence[str],
    memories: Sequence[str],
    anchoring: bool,
    provider: str,
    cap: int | None,
) -> tuple[Callable[[int], tuple[Selection, int]], int]:
    """The one-pass run of :func:`build_context` at any target, and the budget."""
    messages = prepare(history, provider)
    if isinstance(current_input, str):
        messages.append({"role": "user", "content": current_input})
    elif current_input is not None:
        messages.append(current_input)  # type: ignore[arg-type]  # read as a mapping, like the history
    budget = budget_tokens(max_tokens)
    segment_summaries = exact_texts(segment_summaries, "segment_summaries")
    memories = exact_texts(memories, "memories")
    if global_summary is not None and not isinstance(global_summary, str):
        raise InvalidTypeError("global_summary must be str or None")
    if global_summary is not None:
        global_summary = exact_text(global_summary)
    analysis = backend.analyze(messages, cap)
    layout = Layout(backend, messages, analysis, provider)
    global_extra = layout.extra(SUMMARY_PREFIX + global_summary) if global_summary is not None else None
    memory_extras = [layout.extra(MEMORY_PREFIX + m) for m in memories]
    segment_extras = [layout.extra(SEGMENT_PREFIX + s) for s in segment_summaries]
    anchor_extra = None
    if anchoring:
        # The top constraints (the earliest stated), said again before the input.
        texts = (message_text(messages[m]).strip() for m in analysis.constraint_starts())
        constraints = [text for text in texts if text][:3]
        if constraints:
            anchor_extra = layout.extra(ANCHOR_PREFIX + "\n".join(f"- {c}" for c in constraints))

    def run(target: int) -> tuple[Selection, int]:
        fixed, recent, current, with_global, with_anchor, kept_memories, kept_segments = analysis.build(
            target,
            global_extra[1] if global_extra else None,
            [m[1] for m in memory_extras],
            [s[1] for s in segment_extras],
            anchor_extra[1] if anchor_extra else None,
        )
        items: list[Item] = list(fixed)
        sections: dict[str, int] = {}
        layout.sum_units(fixed + recent + current, sections)
        if with_global and global_extra is not None:  # kept only when given
            items.append(global_extra[0])
            sections["global"] = global_extra[1]
        items += [memory_extras[i][0] for i in kept_memories]
        sections["memories"] = sum(memory_extras[i][1] for i in kept_memories)
        items += [segment_extras[i][0] for i in kept_segments]
        sections["segments"] = sum(segment_extras[i][1] for i in kept_segments)
        items += recent
        if with_anchor and anchor_extra is not None:  # kept only when given
            items.append(anchor_extra[0])
            sections["pinned"] = sections.get("pinned", 0) + anchor_extra[1]
        items += current
        return layout.finish(items, budget, sections)

    return run, budget
