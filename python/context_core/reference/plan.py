"""The twin of the compaction plan (``_MessageLog._plan`` in Rust): the
same L1/L2/L3 plan over the log's headers, with numpy. Both answer as
:func:`context_core.compaction.plan.plan` does.
"""

from __future__ import annotations

import numpy as np

from context_core.compaction.plan import Job, Wait
from context_core.log import MessageLog

__all__ = ["plan"]

_USER = 1
_KIND_MESSAGE, _KIND_SUMMARY = 0, 1
_PINNED, _RESULTS = 1, 4
_CONSTRAINT = 1


def _turn_starts(headers: np.ndarray) -> np.ndarray:
    """User messages that hold no tool results start a turn."""
    is_user = (headers["kind"] == _KIND_MESSAGE) & (headers["role"] == _USER)
    return np.asarray(is_user & ((headers["flags"] & _RESULTS) == 0))


def _levels(flags: np.ndarray) -> np.ndarray:
    return (flags >> 6) & 3


def plan(
    log: MessageLog,
    *,
    recent_turns: int,
    segment_turns: int,
    segments_kept: int,
    tail_tokens: int | None,
) -> Job | Wait:
    """The next step compaction should take on ``log``, or how long to
    :class:`Wait` before one can be due."""
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
    starts = np.flatnonzero(_turn_starts(headers[raw_positions]))
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
    anchor = (headers["role"] == 0) | ((headers["flags"] & _PINNED) != 0)  # raw in every view
    rule = (
        covered
        & ~anchor
        & (headers["kind"] == _KIND_MESSAGE)
        & (headers["role"] == _USER)
        & ((headers["tags"] & _CONSTRAINT) != 0)
    )
    return Job(
        level=3,
        covers=(int(path[0]), last),
        segments=tuple(int(s) for s in path[segment_positions]),
        rules=tuple(int(s) for s in path[np.flatnonzero(rule)]),
        base=base,
    )
