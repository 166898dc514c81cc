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

from context_core.log import MessageLog

__all__ = ["Job", "Wait", "next_job", "plan"]

_USER = 1
_KIND_MESSAGE, _KIND_SUMMARY = 0, 1
_PINNED, _RESULTS, _HAS_TEXT = 1, 4, 8
_CONSTRAINT, _LOG = 1, 8


@dataclass(frozen=True)
class Job:
    """One compaction step. ``level`` 2: summarise the raw ``messages``
    (seqs, anchors left out) covering ``covers``; ``level`` 3: merge the L2
    summaries ``segments`` (seqs, oldest first) covering ``covers``.
    ``rules`` are the seqs of the user's rules in the range (user messages
    whose header is tagged ``constraint``, by the keywords or by the
    caller), ``loggy`` those also tagged ``log`` (a pasted trace is a rule
    only when short); ``base`` the newest summary on the path when planned
    (nothing is written if it changed)."""

    level: int
    covers: tuple[int, int]
    messages: tuple[int, ...] = ()
    segments: tuple[int, ...] = ()
    rules: tuple[int, ...] = ()
    loggy: tuple[int, ...] = ()
    base: int | None = None


@dataclass(frozen=True)
class Wait:
    """Nothing is due, and nothing can be before ``turns`` more turns start
    (see :func:`turn_starts`), or (with a tail bound) ``tokens`` more tokens
    are appended; ``None``: no such bound (a turn checks again)."""

    turns: int = 0
    tokens: int | None = None


def turn_starts(headers: np.ndarray) -> np.ndarray:
    """Which of ``headers`` start a turn: user messages with text of their
    own (one holding only tool results continues the turn it answers)."""
    flags = headers["flags"]
    starts: np.ndarray = (
        (headers["kind"] == _KIND_MESSAGE)
        & (headers["role"] == _USER)
        & ~(((flags & _RESULTS) != 0) & ((flags & _HAS_TEXT) == 0))
    )
    return starts


def _levels(flags: np.ndarray) -> np.ndarray:
    return (flags >> 6) & 3


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
    :class:`Wait` before one can be due (a turn then skips the check)."""
    path = np.asarray(log.path(), dtype=np.int64)
    if path.size == 0:
        return Wait(recent_turns + segment_turns, None if tail_tokens is None else tail_tokens + 1)
    headers = log.headers()[path]
    kinds, flags, roles = headers["kind"], headers["flags"], headers["role"]
    summaries = np.flatnonzero(kinds == _KIND_SUMMARY)
    levels = _levels(flags[summaries])
    globals_ = summaries[levels == 3]
    last_global = int(globals_[-1]) if globals_.size else -1
    segment_positions = summaries[levels == 2]
    base = int(path[summaries[-1]]) if summaries.size else None
    pending = segment_positions[segment_positions > last_global]
    pointer = log.last_summary_index
    is_message = kinds == _KIND_MESSAGE
    raw = is_message & (path > pointer) if pointer is not None else is_message
    raw_positions = np.flatnonzero(raw)
    if raw_positions.size == 0:
        return Wait(0, None)
    starts = np.flatnonzero(turn_starts(headers[raw_positions]))
    older = starts.size - recent_turns  # turns before L1
    tokens = int(headers["tokens"][raw_positions].sum())
    if older >= segment_turns:
        turns = segment_turns
    elif older > 0 and tail_tokens is not None and tokens > tail_tokens:
        turns = older
    else:
        short = recent_turns + segment_turns - int(starts.size)
        return Wait(short, None if tail_tokens is None else max(1, tail_tokens + 1 - tokens))
    if pending.size >= segments_kept:
        return _global_job(log, path, headers, segment_positions, last_global, base)
    end = int(starts[turns])  # the first raw position not covered
    chosen = raw_positions[:end]
    anchor = (roles[chosen] == 0) | ((flags[chosen] & _PINNED) != 0)
    messages = tuple(int(s) for s in path[chosen[~anchor]])
    if not messages:
        return Wait(0, None)
    tags = headers["tags"][chosen]
    rule = (roles[chosen] == _USER) & ((tags & _CONSTRAINT) != 0) & ~anchor
    return Job(
        level=2,
        covers=(int(path[chosen[0]]), int(path[chosen[-1]])),
        messages=messages,
        rules=tuple(int(s) for s in path[chosen[rule]]),
        loggy=tuple(int(s) for s in path[chosen[rule & ((tags & _LOG) != 0)]]),
        base=base,
    )


def _global_job(
    log: MessageLog,
    path: np.ndarray,
    headers: np.ndarray,
    segment_positions: np.ndarray,
    last_global: int,
    base: int | None,
) -> Job:
    """An L3 over every L2 on the path, up to the newest one's range."""
    newest = int(path[segment_positions[-1]])
    last = int(log.read([newest])[0]["covers"][1])
    covered = path <= last
    rule = (
        covered
        & (headers["kind"] == _KIND_MESSAGE)
        & (headers["role"] == _USER)
        & ((headers["tags"] & _CONSTRAINT) != 0)
    )
    return Job(
        level=3,
        covers=(int(path[0]), last),
        segments=tuple(int(s) for s in path[segment_positions]),
        rules=tuple(int(s) for s in path[np.flatnonzero(rule)]),
        loggy=tuple(int(s) for s in path[np.flatnonzero(rule & ((headers["tags"] & _LOG) != 0))]),
        base=base,
    )
