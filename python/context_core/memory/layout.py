"""How many lines stay in ``MEMORY.md`` and how big the new fragments are, so
that ``MEMORY.md`` never holds more than ``max_lines`` lines, its pointer
lines included.

``MEMORY.md`` is laid out as::

    head[:keep]             lines that stay (facts, headings, prose)
    pointers to the stream  new fragments: head[keep:], then ``adjacent`` new lines
    fixed lines             what follows the first pointer now (kept as it is)
    pointers to the tail    new fragments of ``tail`` lines (or ``tail`` existing fragments)

The stream's and the tail's fragments hold ``size`` lines each (the last one
fewer). When everything fits, nothing moves (``keep == head``). Otherwise the
newest lines of the head move to a fragment that takes their place (so the
order of the facts, and so which value of a key is the newest, never changes)
and ``MEMORY.md`` is left :func:`reserve` lines short of full, so the next
fragments' pointers fit without moving lines again. Fragments hold at most
``max_lines`` lines, unless memory holds more than about ``max_lines ** 2``:
then fragments grow instead of ``MEMORY.md``.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Plan", "plan", "reserve"]


def reserve(max_lines: int) -> int:
    """Lines left free for pointers when ``MEMORY.md`` had to overflow."""
    return max(1, max_lines // 10)


class Plan(NamedTuple):
    keep: int
    """How many head lines stay in MEMORY.md."""
    size: int
    """Lines per new fragment."""


def _pointers(lines: int, size: int) -> int:
    return -(-lines // size)


def plan(
    head: int, adjacent: int, fixed: int, tail: int, max_lines: int, *, tail_fixed: bool = False
) -> Plan | None:
    """The layout (see the module's documentation) of ``head`` movable lines,
    ``adjacent`` new lines right after them, ``fixed`` lines, and a ``tail``
    of new lines (``tail_fixed``: pointers to ``tail`` existing fragments);
    ``None`` when the fixed lines leave no room for the pointers needed."""

    def lines(keep: int, size: int) -> int:
        tail_lines = tail if tail_fixed else _pointers(tail, size)
        return keep + _pointers(head - keep + adjacent, size) + fixed + tail_lines

    size = max_lines
    if lines(head, size) <= max_lines:
        return Plan(head, size)
    for limit in (max_lines - reserve(max_lines), max_lines):
        if lines(0, size) > limit:
            continue
        low, high = 0, head  # lines() grows with keep: the largest keep within the limit
        while low < high:
            middle = (low + high + 1) // 2
            if lines(middle, size) <= limit:
                low = middle
            else:
                high = middle - 1
        return Plan(low, size)
    # Past capacity: bigger fragments, as few as fit.
    biggest = max(head + adjacent, 0 if tail_fixed else tail, 1)
    if lines(0, biggest) > max_lines:
        return None
    low, high = max_lines, biggest
    while low < high:
        middle = (low + high) // 2
        if lines(0, middle) <= max_lines:
            high = middle
        else:
            low = middle + 1
    return Plan(0, low)
