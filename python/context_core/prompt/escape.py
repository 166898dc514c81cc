"""Escaping: content can never open a section or a tag of its own.

A prompt is Markdown sections (``## Context``...) and, in the task block,
tagged items (``<MEM>``, ``<FILE path="...">``...). Content that lands inside
them (a memory line, a file, a user's note, a tool's output) is data: it must
not start a section or close a tag. :func:`escape` makes sure of it:

* **Tag-like text.** A ``<`` that opens or closes a reserved tag
  (:data:`RESERVED_TAGS`, in any case, with spaces or a ``/`` before the name,
  ``</MEM>``, ``< task >``) is written ``&lt;``. Other ``<`` (``a < b``,
  ``<div>``, generics) are left alone, so code stays readable.
* **Markdown blocks.** A line whose first non-blank character starts a
  heading (``#``), a code fence (`````, ``~~~``) or a setext underline (a line
  of only ``=`` or only ``-``) gets a backslash before that character, which
  Markdown reads as the literal character. "Line" means what
  :meth:`str.splitlines` splits on (``\\n``, ``\\r``, ``\\v``, ``\\f``,
  ``\\x1c``-``\\x1e``, ``\\x85``, U+2028, U+2029), the widest definition.
* **Attribute values** (``path``, ``source``) are XML-escaped (``&``, ``<``,
  ``>``, ``"``, line breaks), so a value cannot end its attribute.

Only a ``\\`` or ``&lt;`` is ever added; nothing is removed, so the content
reads as it was written.
"""

from __future__ import annotations

import re

__all__ = [
    "LINE_BREAKS",
    "RESERVED_TAGS",
    "escape",
    "escape_attr",
    "escape_tags",
    "one_line",
]

RESERVED_TAGS = ("MEM", "FILE", "ERROR", "DOC", "TASK", "OUTPUT_FORMAT", "CONSTRAINT")
"""The tags the task block uses (seed 003's three dimensions)."""

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character :meth:`str.splitlines` splits on."""

_BREAK = f"[{LINE_BREAKS}]"
_BLANK = f"[^\\S{LINE_BREAKS}]"  # white space that does not end a line
# The name is matched in any case; what follows it is not: under IGNORECASE
# the lookahead would read U+017F (long s), U+212A (Kelvin), U+0131 (dotless
# i) and U+0130 as ASCII letters, so "</MEM\u0131>" would pass as a longer
# name. Only an ASCII letter, digit or "_" makes a longer name ("<MEMORY>").
_TAG = re.compile(
    r"<(?=[\s/]*(?:" + "|".join(RESERVED_TAGS) + r")(?-i:(?![0-9A-Za-z_])))",
    re.IGNORECASE,
)
_LINE_START = rf"({_BLANK}*)(#|```|~~~|(?:=+|-+){_BLANK}*(?={_BREAK}|$))"
# Led by the line break (a character class, which the regex engine skips to
# quickly) rather than by "^|": three times faster on long texts.
_BLOCK = re.compile(rf"({_BREAK}){_LINE_START}")
_FIRST = re.compile(_LINE_START)
_BREAKS = re.compile(f"(?:\r\n|{_BREAK})")
_ATTR = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"} | {c: f"&#{ord(c)};" for c in LINE_BREAKS}
)


def escape_tags(text: str) -> str:
    """``text`` with every ``<`` that starts a reserved tag written ``&lt;``."""
    return _TAG.sub("&lt;", text) if "<" in text else text


def escape(text: str) -> str:
    """``text`` made safe to put inside a section or a tag: reserved tags
    neutralised, lines that would start a heading, a fence or a setext
    underline escaped with a backslash."""
    text = _BLOCK.sub(r"\1\2\\\3", escape_tags(text))
    first = _FIRST.match(text)
    if first is not None:
        text = f"{text[: first.start(2)]}\\{text[first.start(2) :]}"
    return text


def escape_attr(value: str) -> str:
    """An attribute value, XML-escaped (quotes, angle brackets, ampersands
    and line breaks)."""
    return value.translate(_ATTR)


def one_line(text: str) -> str:
    """``text`` on one line: every line break (``\\r\\n`` counts as one)
    becomes a space."""
    return _BREAKS.sub(" ", text)
