"""Markdown sections, as an agent's context is commonly rendered::

    ## Session Facts
    Session: sess_123
    Task: fix_build

    ## Context
    Current date: 2024-01-18 10:30 PST
    Working directory: /Users/name/project

A section is ``## Title``, a line break, and its body; sections are separated
by a blank line. Bodies are escaped (:func:`~context_core.prompt.escape.escape`)
so content never opens a section of its own. Mappings render in sorted key
order, so two dicts with the same items render the same bytes whatever order
they were built in; pass a sequence of pairs to choose the order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Union

from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.prompt.escape import one_line

__all__ = ["Pairs", "check_text", "format_time", "key_values", "lines", "pairs", "piece"]

Pairs = Union[Mapping[str, object], Iterable[tuple[str, object]]]
"""Key-value lines: a mapping (rendered in sorted key order) or pairs (in order)."""

SEPARATOR = "\n\n"


def pairs(items: Pairs | None, what: str) -> tuple[tuple[str, str], ...]:
    """``items`` as a tuple of ``(key, value)`` strings, a mapping's sorted by
    key; ``None`` values are left out."""
    if items is None:
        return ()
    if isinstance(items, Mapping):
        raw = sorted(items.items(), key=lambda kv: str(kv[0]))
    elif isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidTypeError(
            f"{what}: expected a mapping or (key, value) pairs, got {type(items).__name__}"
        )
    else:
        raw = list(items)
    out = []
    for item in raw:
        if not isinstance(item, tuple) or len(item) != 2:
            raise InvalidTypeError(f"{what}: expected (key, value) pairs, got {item!r}")
        key, value = item
        if not isinstance(key, str):
            raise InvalidTypeError(f"{what}: keys must be str, got {type(key).__name__}")
        if value is not None:
            text = value if isinstance(value, str) else str(value)
            out.append((check_text(key, f"{what} key"), check_text(text, f"{what}[{key!r}]")))
    return tuple(out)


def key_values(items: tuple[tuple[str, str], ...]) -> str:
    """``Key: value`` lines, each key and value put on one line; not escaped."""
    return "\n".join(f"{one_line(key)}: {one_line(value)}" for key, value in items)


def lines(items: str | Iterable[str], what: str) -> str:
    """A text as it is (without leading and trailing ``\\n``), or a sequence
    of strings as ``- item`` lines; not escaped."""
    if isinstance(items, str):
        return items.strip("\n")
    if isinstance(items, (bytes, Mapping)) or not isinstance(items, Iterable):
        raise InvalidTypeError(f"{what} must be a str or a list of str, got {type(items).__name__}")
    out = []
    for item in items:
        if not isinstance(item, str):
            raise InvalidTypeError(f"{what}: expected str items, got {type(item).__name__}")
        out.append(f"- {item.strip()}")
    return "\n".join(out)


def piece(title: str, body: str, last: bool) -> str:
    """One section as it sits in its part: ``## title``, the body, and the
    blank line that separates it from the next (none after the last)."""
    text = f"## {title}\n{body}" if title else body
    return text if last else text + SEPARATOR


def check_text(text: str, where: str) -> str:
    """``text``, if a request can carry it: a lone surrogate (as a name
    decoded with ``errors="surrogateescape"`` holds) has no UTF-8, and the
    SDK would fail on it at every request that holds it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{where} holds a lone surrogate, which has no UTF-8") from None
    return text


def format_time(now: datetime | str) -> str:
    """``2024-01-18 10:30 PST``: to the minute (a turn a second later renders
    the same line), with the zone's name when ``now`` is aware."""
    if isinstance(now, str):
        return check_text(now, "now")
    if not isinstance(now, datetime):
        raise InvalidTypeError(f"now must be a datetime or a str, got {type(now).__name__}")
    try:
        zone = now.tzname()
    except TypeError as error:  # a tzinfo whose tzname() is not a str (datetime's own check)
        raise InvalidTypeError(f"now: {error}") from None
    if zone:
        check_text(zone, "now's zone name")
    text = f"{now.year:04d}-{now.month:02d}-{now.day:02d} {now.hour:02d}:{now.minute:02d}"
    return f"{text} {zone}" if zone else text
