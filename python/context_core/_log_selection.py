"""The selection policies on a :class:`~context_core.log.MessageLog`.

Each policy chooses from the log's headers alone: the exact counts, tags,
flags and priorities stored at append, with every tool result over the
policy's cap counted as cut (each such result is cut and counted once, the
turn it first appears in, and the log remembers the count by seq). Only the
kept nodes are then decoded, and laid out by the same code as a list's
window: they all fit, so the policy keeps every one of them, cuts what it
caps and repairs the result. A turn costs a sweep of 64-byte headers plus
the window it sends, never a decode of the whole history.

Within :func:`standing_in`, some of a log's messages read as others (a
session's tool results cleared to fit): the headers count each as the one
standing in for it, and the kept ones are laid out as it, so the window is
the one the whole view with them replaced would give.

The counts are kept for a few caps at once. A result appended after the
count (by another thread or process) is seen by the headers' sweep, which
then declines; the policy counts it and asks again.

Some cases read the whole context view instead, as the policies do for a
list: a ShapeHistory summary given as a callable (it is handed what may be
dropped), PriorityAssembly's ``anchoring`` (it quotes the earliest
constraints), and a ShapeHistory or PriorityAssembly that counts in another
encoding than the log (the weighted window refuses one). So are a window
whose messages name dependencies (``depends_on``; a dependency on a node
left out is reported in ``Selection.missing_dependencies``), a cap too small
for its marker (the error names the message as for a list), and a log that
moved under every one of a few tries. There each message reads with what
``append`` took as keywords (pinned, priority, weight, tags and, for the
weighted window's ages, the time), which only its header holds.
"""

from __future__ import annotations

import array
import contextlib
import contextvars
import dataclasses
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from context_core import _selection
from context_core._core import SEGMENT_PREFIX, SUMMARY_PREFIX, ToolResultCut
from context_core._selection import Backend, Msg, Selection
from context_core.errors import InvalidInputError, InvalidTypeError, NothingToSendError
from context_core.types import Message

if TYPE_CHECKING:
    from context_core.log import MessageLog

Nodes = list[tuple[int, str]]
#: The view a window was chosen from: a node count (every node ``0..n``),
#: a count and the seqs left out (a plain log rewound), or its seqs; seqs as u64 bytes.
View = int | tuple[int, bytes] | bytes


#: The messages standing in for some of one log's, by seq (see :func:`standing_in`).
_STAND_INS: contextvars.ContextVar[tuple[MessageLog, Mapping[int, Msg]] | None] = contextvars.ContextVar(
    "context_core_stand_ins", default=None
)


@contextlib.contextmanager
def standing_in(log: MessageLog, messages: Mapping[int, Msg]) -> Iterator[None]:
    """Windows chosen from ``log`` within the block read ``messages`` (by
    seq) in place of those nodes: counted as them from the headers, laid
    out as them, as the whole view with them in place would be. Only the
    turn in progress's nodes may stand in for others (every policy keeps
    that turn whole, and no count of its nodes is kept between windows)."""
    token = _STAND_INS.set((log, messages) if messages else None)
    try:
        yield
    finally:
        _STAND_INS.reset(token)


def stand_ins(log: MessageLog) -> Mapping[int, Msg]:
    """The messages standing in for ``log``'s in this context, by seq."""
    held = _STAND_INS.get()
    return held[1] if held is not None and held[0] is log else {}


def _in_place(nodes: Nodes, messages: list[Msg], stood: Mapping[int, Msg]) -> list[Msg]:
    """``messages`` (rendered from ``nodes``) with those ``stood`` in for in place."""
    if stood:
        messages = [stood.get(seq, message) for (seq, _), message in zip(nodes, messages, strict=True)]
    return messages


class ViewRest:
    """A log window's dropped seqs, listed on first read from the view as it
    was chosen from: the log may have moved on, or be closed, by then.
    Picklable."""

    __slots__ = ("kept", "view")

    def __init__(self, view: View, kept: tuple[int, ...]) -> None:
        self.view = view
        self.kept = kept

    def __call__(self) -> tuple[int, ...]:
        chosen = set(self.kept)
        if isinstance(self.view, int):
            return tuple(seq for seq in range(self.view) if seq not in chosen)
        if isinstance(self.view, tuple):
            count, holes = self.view
            chosen.update(_seqs(holes))
            return tuple(seq for seq in range(count) if seq not in chosen)
        return tuple(seq for seq in _seqs(self.view) if seq not in chosen)

    def __reduce__(self) -> tuple[type[ViewRest], tuple[View, tuple[int, ...]]]:
        return ViewRest, (self.view, self.kept)


def _seqs(data: bytes) -> Sequence[int]:
    """Seqs written as the extension writes them: 8 bytes each, little-endian."""
    seqs = array.array("Q", data)
    if sys.byteorder == "big":
        seqs.byteswap()
    return seqs


class _Noting:
    """A backend that notes whether what it analysed names a dependency."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.depends = False

    def analyze(self, messages: list[Msg], cap: int | None, find_tags: bool = True) -> Any:
        analysis = self._backend.analyze(messages, cap, find_tags)
        self.depends = self.depends or analysis.depends
        return analysis

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def counts_alike(log: MessageLog, backend: Backend) -> bool:
    """Whether the policy counts in the log's encoding (its headers' counts are the policy's)."""
    name: str = backend.tokenizer.name  # type: ignore[attr-defined]  # the extension backend's
    return name == log.encoding


def check_encoding(log: MessageLog, backend: Backend) -> None:
    if not counts_alike(log, backend):
        name = backend.tokenizer.name  # type: ignore[attr-defined]
        raise InvalidInputError(f"this log counts tokens in {log.encoding}; the policy's tokenizer is {name}")


def count_cut_results(log: MessageLog, backend: Backend, cap: int | None) -> None:
    """Tell the log the capped count of each tool result over ``cap`` that
    it has not been told of: those appended since the last count (or every
    one, for a cap the log let go). A cap too small for its marker is left
    to the whole view, which names the message as the list's policy does."""
    if cap is None:
        return
    seqs, start, upto = log._over_cap(cap)
    counts: list[tuple[int, int]] = []
    if seqs:
        messages = cast("list[Msg]", log._cached(seqs))
        try:
            tokens = backend.analyze(messages, cap, find_tags=False).tokens
        except InvalidInputError:
            raise _WholeView from None
        counts = list(zip(seqs, tokens, strict=True))
    log._set_capped(cap, start, upto, counts)


def render(log: MessageLog, nodes: Nodes, pinned: list[int]) -> list[Msg]:
    """The kept nodes as the policy reads them (each stood in for as its
    stand-in); a node pinned only by its header (``append(pinned=True)``)
    reads as pinned."""
    messages = _in_place(nodes, log._render(nodes, strip=False), stand_ins(log))
    if pinned:
        marked = set(pinned)
        for i, (seq, _) in enumerate(nodes):
            if seq in marked and messages[i].get("pinned") is not True:
                messages[i] = log._derive(seq, messages[i], _marked_pinned)
    return messages


def _marked_pinned(seq: int, message: Msg) -> Msg:
    return {**message, "pinned": True}


def with_header_metadata(
    log: MessageLog, nodes: Nodes, messages: list[Msg], keys: Sequence[str]
) -> list[Msg]:
    """The view's ``messages`` (rendered from ``nodes``) as the headers
    describe them, for the metadata ``keys`` a policy reads (of ``pinned``,
    ``priority``, ``weight``, ``timestamp``). What ``append`` took as
    keywords is in the header only, and a policy choosing from the whole
    view must weigh each message as the headers' choice does: where the
    header holds another value than the message (a keyword given, or the
    time of the append), the message reads with the header's. Only the
    messages that change are copied. (Tags are left to the policy's own
    tagger, which reads them from the text, as it does for a list.)"""
    rows = [i for i, (_, part) in enumerate(nodes) if part not in _SUMMARY_PARTS]
    if not rows or not keys:
        return messages
    headers = log.headers()[[nodes[i][0] for i in rows]]
    wanted = set(keys)
    columns = zip(
        rows,
        (headers["flags"] & _FLAG_PINNED).tolist(),
        headers["priority"].tolist(),
        headers["weight"].tolist(),
        headers["timestamp"].tolist(),
        strict=True,
    )
    out = list(messages)
    for i, pinned, priority, weight, timestamp in columns:
        message = out[i]
        given: Msg = {}
        if "pinned" in wanted and pinned and message.get("pinned") is not True:
            given["pinned"] = True
        if "priority" in wanted and priority != _as_stored(message.get("priority"), 0.0):
            given["priority"] = priority
        if "weight" in wanted and weight == weight and weight != _as_stored(message.get("weight"), None):
            given["weight"] = weight  # (NaN: none given, by keyword or key)
        if "timestamp" in wanted and timestamp != message.get("timestamp"):
            given["timestamp"] = timestamp
        if given:
            out[i] = {**message, **given}
    return out


def _as_stored(value: Any, default: float | None) -> float | None:
    """A message's own number as its header holds it (a 32-bit float), or ``default``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(array.array("f", [value])[0]) if math.isfinite(value) else float(value)


#: The metadata each policy reads, of what ``append`` may take as keywords.
SHAPE_READS = ("pinned",)
PRIORITY_READS = ("pinned", "priority")
WEIGHTED_READS = ("pinned", "weight", "timestamp")
EVERY_READ = ("pinned", "priority", "weight", "timestamp")


#: View parts that are summaries (system messages to a policy, with no header metadata of their own).
_SUMMARY_PARTS = frozenset({"global", "segment"})
#: The header's flag of a message appended pinned.
_FLAG_PINNED = 1


def keyed(log: MessageLog, nodes: Nodes, selection: Selection, view: View | None) -> Selection:
    """``selection`` over messages rendered from ``nodes``, keyed by the
    nodes' seqs: the dropped ones listed now (``view`` None: ``nodes`` is the
    whole view) or on first read from ``view``. Summary nodes are system
    messages to a policy; the tokens of those it kept move from ``pinned``
    to their own sections."""
    seqs = [seq for seq, _ in nodes]
    breakdown = selection.breakdown
    summary_tokens = {"global": 0, "segment": 0}
    kept_summaries = [nodes[m] for m in selection.kept if nodes[m][1] in summary_tokens]
    if kept_summaries:
        tokens = log.headers()["tokens"]
        for seq, part in kept_summaries:
            summary_tokens[part] += int(tokens[seq])
        breakdown = dataclasses.replace(
            breakdown,
            pinned=max(0, breakdown.pinned - sum(summary_tokens.values())),
            global_summary=breakdown.global_summary + summary_tokens["global"],
            segments=breakdown.segments + summary_tokens["segment"],
        )
    kept = tuple(seqs[m] for m in selection.kept)
    dropped = tuple(seqs[m] for m in selection.dropped) if view is None else ViewRest(view, kept)
    return dataclasses.replace(
        selection,
        breakdown=breakdown,
        kept=kept,
        truncated=tuple(ToolResultCut(seqs[t.index], t.tokens, t.kept) for t in selection.truncated),
        missing_dependencies=tuple((seqs[m], ref) for m, ref in selection.missing_dependencies),
        _dropped=dropped,
    )


def from_view(
    log: MessageLog, choose: Callable[[list[Message]], Selection], *, keys: Sequence[str] = ()
) -> Selection:
    """A policy's choice over the whole context view, decoded, each message
    read with its header's metadata ``keys`` (those the policy reads)."""
    nodes = log._view()
    rendered = _in_place(nodes, log._render(nodes, strip=False), stand_ins(log))
    messages = with_header_metadata(log, nodes, rendered, keys)
    try:
        selection = choose(cast("list[Message]", messages))
    except NothingToSendError as error:
        error.kept = tuple(nodes[m][0] for m in error.kept)  # keyed by seq, as a selection
        raise
    return keyed(log, nodes, selection, None)


def from_headers(
    log: MessageLog,
    backend: Backend,
    budget: int,
    cap: int | None,
    choose: Callable[[int, list[tuple[int, int]]], tuple[Nodes, View, list[int]] | None],
    lay_out: Callable[[Backend, list[Msg], int], tuple[Selection, int]],
    whole: Callable[[list[Message]], Selection],
    keys: Sequence[str],
) -> Selection:
    """Choose within ``budget`` from the headers (``choose(target,
    stand_ins)``: the kept nodes, the view and the nodes pinned by header,
    or ``None`` where a tool result over ``cap`` has no capped count yet;
    ``stand_ins``: the (seq, tokens) counts of the messages standing in for
    nodes, see :func:`standing_in`), then lay the kept
    nodes out (``lay_out(backend, messages, target)``: the selection and the
    tokens it is over). Over, the headers are asked again for less; a window
    naming a dependency is chosen by ``whole`` from the whole view (its
    messages read with the header metadata ``keys`` the policy reads)."""

    stood = stand_ins(log)
    counts: list[tuple[int, int]] = []
    if stood:
        try:
            tokens = backend.analyze(list(stood.values()), cap, find_tags=False).tokens
        except InvalidInputError:
            return from_view(log, whole, keys=keys)
        counts = list(zip(stood, tokens, strict=True))

    def chosen(target: int) -> tuple[Nodes, View, list[int]]:
        # A result appended since it was counted (by another thread or
        # process), or counts for a cap another thread pushed out, are
        # counted and the headers asked again; a log that keeps moving
        # under a long run of tries is read whole instead.
        for _ in range(_TRIES):
            count_cut_results(log, backend, cap)
            got = choose(min(target, sys.maxsize), counts)  # no view holds more tokens
            if got is not None:
                return got
        raise _WholeView

    def run(target: int) -> tuple[Selection, int]:
        nodes, view, pinned = chosen(target)
        noting = _Noting(backend)
        selection, _ = lay_out(cast("Backend", noting), render(log, nodes, pinned), target)
        if noting.depends:
            raise _WholeView
        # Over the caller's budget, not the target: the next target is this
        # one less the excess, as a list's window settles.
        return keyed(log, nodes, selection, view), selection.breakdown.total - budget

    try:
        selection = _selection.settle(run, budget)
    except _WholeView:
        return from_view(log, whole, keys=keys)
    if selection.breakdown.budget != budget:  # asked again for less: the caller's budget is the one
        breakdown = dataclasses.replace(selection.breakdown, budget=budget)
        selection = dataclasses.replace(selection, breakdown=breakdown)
    return selection


#: Headers asked at most this often for one window before the whole view is read.
_TRIES = 8


class _WholeView(Exception):
    """A window named a dependency, or the log would not hold still: choose from the whole view."""


def shape_history(
    log: MessageLog,
    backend: Backend,
    budget: Any,
    keep_last: int,
    min_keep: int,
    summary: Any,
    provider: str,
    cap: int | None,
) -> Selection:
    def whole(view: list[Message]) -> Selection:
        return _selection.shape_history(backend, view, budget, keep_last, min_keep, summary, provider, cap)

    # Checked in the list's order, so both name the same first bad argument.
    _selection.check_provider(provider)
    tokens = _selection.budget_tokens(budget)
    keep_last, min_keep = _selection.count(keep_last, "keep_last"), _selection.count(min_keep, "min_keep")
    summary = _selection.check_summary(summary)
    cap = _selection.tool_result_cap(cap)
    if callable(summary) or not counts_alike(log, backend):
        return from_view(log, whole, keys=SHAPE_READS)
    extra: tuple[Msg, int] | None = None
    if summary is not None:
        message = {"role": "system", "content": SUMMARY_PREFIX + _selection.exact_text(summary)}
        extra = message, backend.count_message(message)
    decided: dict[str, Any] = {}

    def choose(target: int, counts: list[tuple[int, int]]) -> tuple[Nodes, View, list[int]] | None:
        chosen = log._shape(
            target,
            min(keep_last, sys.maxsize),
            min(min_keep, sys.maxsize),
            None if extra is None else extra[1],
            cap,
            counts,
        )
        if chosen is None:
            return None
        nodes, view, pinned, turns, with_summary = chosen
        if turns == sys.maxsize and max(keep_last, min_keep) > sys.maxsize:
            # Counts past a machine's size keep what the largest does, and
            # report the count given: keep_last with the summary (or none
            # given), else the fewer of the two, as the list's pass does.
            turns = keep_last if with_summary or extra is None else min(min_keep, keep_last)
        decided.update(turns=turns, with_summary=with_summary)
        return nodes, view, pinned

    def lay_out(noting: Backend, messages: list[Msg], target: int) -> tuple[Selection, int]:
        analysis = noting.analyze(messages, cap, find_tags=False)
        layout = _selection.Layout(noting, messages, analysis, provider)
        kept = list(range(analysis.unit_count))
        return _selection.lay_out_shape(
            layout, kept, decided["turns"], decided["with_summary"], extra, target
        )

    return from_headers(log, backend, tokens, cap, choose, lay_out, whole, SHAPE_READS)


def weighted_window(
    log: MessageLog,
    backend: Backend,
    budget: Any,
    weights: tuple[float, float, float, float, float, float, float],
    max_anchors: int,
    recent_turns: int,
    now: float | None,
    provider: str,
    cap: int | None,
) -> Selection:
    def whole(view: list[Message]) -> Selection:
        return _selection.weighted_window(
            backend, view, budget, weights, max_anchors, recent_turns, now, provider, cap
        )

    check_encoding(log, backend)
    tokens = _selection.budget_tokens(budget)
    now = _selection.check_now(now)

    # Counts past a machine's size keep what the largest does.
    anchors, recent = min(max_anchors, sys.maxsize), min(recent_turns, sys.maxsize)

    def choose(target: int, counts: list[tuple[int, int]]) -> tuple[Nodes, View, list[int]] | None:
        chosen = log._weighted(target, weights, anchors, recent, now, cap, counts)
        return None if chosen is None else (chosen[0], chosen[2], chosen[3])

    def lay_out(noting: Backend, messages: list[Msg], target: int) -> tuple[Selection, int]:
        # Everything kept fits: the window over it keeps it all. Over after
        # the repair, the headers choose again for less (as for a list).
        run, _ = _selection.weighted_window_run(
            noting, messages, target, weights, max_anchors, recent_turns, now, provider, cap
        )
        return run(target)

    return from_headers(log, backend, tokens, cap, choose, lay_out, whole, WEIGHTED_READS)


def build_context(
    log: MessageLog,
    backend: Backend,
    budget: Any,
    *,
    global_summary: str | None,
    segment_summaries: Sequence[str],
    memories: Sequence[str],
    anchoring: bool,
    provider: str,
    cap: int | None,
) -> Selection:
    def whole(view: list[Message]) -> Selection:
        return _selection.build_context(
            backend,
            view,
            budget,
            current_input=None,
            global_summary=global_summary,
            segment_summaries=segments,
            memories=texts,
            anchoring=anchoring,
            provider=provider,
            cap=cap,
        )

    # Checked in the list's order, so both name the same first bad argument.
    _selection.check_provider(provider)
    tokens = _selection.budget_tokens(budget)
    segments = _selection.exact_texts(segment_summaries, "segment_summaries")
    texts = _selection.exact_texts(memories, "memories")
    if global_summary is not None and not isinstance(global_summary, str):
        raise InvalidTypeError("global_summary must be str or None")
    if global_summary is not None:
        global_summary = _selection.exact_text(global_summary)
    if anchoring or not counts_alike(log, backend):
        return from_view(log, whole, keys=PRIORITY_READS)

    def cost(prefix: str, text: str) -> int:
        return backend.system_message(prefix + text)[1]

    global_tokens = None if global_summary is None else cost(SUMMARY_PREFIX, global_summary)
    memory_tokens = [cost(_selection.MEMORY_PREFIX, m) for m in texts]
    segment_tokens = [cost(SEGMENT_PREFIX, s) for s in segments]

    def choose(target: int, counts: list[tuple[int, int]]) -> tuple[Nodes, View, list[int]] | None:
        chosen = log._priority(target, global_tokens, memory_tokens, segment_tokens, cap, counts)
        return None if chosen is None else (chosen[0], chosen[1], chosen[2])

    def lay_out(noting: Backend, messages: list[Msg], target: int) -> tuple[Selection, int]:
        # The same extras fit after the same mandatory units, and then every
        # kept unit; over after the repair, the headers choose again for less.
        run, _ = _selection.build_context_run(
            noting,
            messages,
            target,
            current_input=None,
            global_summary=global_summary,
            segment_summaries=segments,
            memories=texts,
            anchoring=False,
            provider=provider,
            cap=cap,
        )
        return run(target)

    return from_headers(log, backend, tokens, cap, choose, lay_out, whole, PRIORITY_READS)
