"""What compaction would do next, read from a log's headers: the L1/L2/L3
hierarchy as the log's context view holds it.

- **L1** is the raw tail: the newest ``recent_turns`` turns are never
  summarised.
- **L2** is a segment summary, made from the raw messages of the oldest
  ``segment_turns`` turns before L1 (or fewer, when the raw tail is over
  ``tail_tokens``).
- **L3** is the global summary, made from every L2 summary on the active
  path (never from an older L3). The view shows the newest L3 and at most
  ``segments_kept`` L2 after it, so an L2 that would push one out of view
  waits until a new L3 has taken them all in.

A turn starts at a user message with text of its own (a message holding
only tool results continues the turn it answers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.log import MessageLog

__all__ = ["Job", "Wait", "next_job", "plan", "starts_turn", "turn_starts"]

_USER = 1
_KIND_MESSAGE = 0
_RESULTS = 4


@dataclass(frozen=True)
class Job:
    """One compaction step. ``level`` 2: summarise the raw ``messages``
    (seqs, anchors left out) covering ``covers``; ``level`` 3: merge the L2
    summaries ``segments`` (seqs, oldest first) covering ``covers``.
    ``rules`` are the seqs of the user's rules in the range (user messages
    whose header is tagged ``constraint``, by the keywords or by the
    caller; the compactor reads what each one's own text states);
    ``base`` the newest summary on the path when planned (nothing is
    written if it changed)."""

    level: int
    covers: tuple[int, int]
    messages: tuple[int, ...] = ()
    segments: tuple[int, ...] = ()
    rules: tuple[int, ...] = ()
    base: int | None = None


@dataclass(frozen=True)
class Wait:
    """Nothing is due, and nothing can be before ``turns`` more turns start
    (see :func:`turn_starts`), or (with a tail bound) ``tokens`` more tokens
    are appended; ``None``: no such bound (a turn checks again)."""

    turns: int = 0
    tokens: int | None = None


def turn_starts(headers: np.ndarray) -> np.ndarray:
    """Which of ``headers`` start a turn: user messages without tool
    results. One that holds results, with text or not, continues the turn
    whose calls it answers, so a segment never ends between a call and its
    result (the next view would open on results with no calls)."""
    starts: np.ndarray = (
        (headers["kind"] == _KIND_MESSAGE) & (headers["role"] == _USER) & ((headers["flags"] & _RESULTS) == 0)
    )
    return starts


def starts_turn(kind: int, role: int, flags: int) -> bool:
    """:func:`turn_starts` for one header's fields (a turn's few new nodes
    are checked faster one by one than as arrays)."""
    return kind == _KIND_MESSAGE and role == _USER and not flags & _RESULTS


def next_job(
    log: MessageLog,
    *,
    recent_turns: int,
    segment_turns: int,
    segments_kept: int,
    tail_tokens: int | None,
) -> Job | None:
    """The next step compaction should take on ``log``, or ``None``."""
    step = plan(
        log,
        recent_turns=recent_turns,
        segment_turns=segment_turns,
        segments_kept=segments_kept,
        tail_tokens=tail_tokens,
    )
    return step if isinstance(step, Job) else None


def plan(
    log: MessageLog,
    *,
    recent_turns: int,
    segment_turns: int,
    segments_kept: int,
    tail_tokens: int | None,
) -> Job | Wait:
    """The next step compaction should take on ``log``, or how long to
    :class:`Wait` before one can be due (a turn then skips the check).

    Planned in Rust over the headers of the active path, with the
    interpreter released: a background job's plan never holds up the
    thread that runs the turn (``context_core.reference.plan`` is its twin)."""
    for name, value in (
        ("recent_turns", recent_turns),
        ("segment_turns", segment_turns),
        ("segments_kept", segments_kept),
    ):
        _positive(name, value)
    if tail_tokens is not None:
        _positive("tail_tokens", tail_tokens)
    # Past 2**62 a count is no bound in practice; capping keeps the Rust
    # plan's arithmetic (u64) exact instead of failing or wrapping.
    recent_turns, segment_turns, segments_kept = (
        min(v, _NO_BOUND) for v in (recent_turns, segment_turns, segments_kept)
    )
    if tail_tokens is not None:
        tail_tokens = min(tail_tokens, _NO_BOUND)
    step = log._plan(recent_turns, segment_turns, segments_kept, tail_tokens)
    if step[0] == "wait":
        return Wait(step[1], step[2])
    _, level, first, last, messages, segments, rules, base = step
    return Job(
        level=level,
        covers=(first, last),
        messages=tuple(messages),
        segments=tuple(segments),
        rules=tuple(rules),
        base=base,
    )


_NO_BOUND = 2**62


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidInputError(f"{name} must be at least 1, got {value}")
