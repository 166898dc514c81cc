"""The fact line format: one fact a line, with a kind and an optional key.

A memory file (``MEMORY.md`` or a fragment) is Markdown whose fact lines read::

    - [decision: database] Use Postgres 16 for the database.
    - [fact: staging db port] The staging DB port is 5433.
    - [constraint] Never force-push to main.
    - [preference] I prefer short answers without emoji.
    - [more] auto-2025-01-31-4f2a.md

* ``kind`` is a lower-case word (``[a-z][a-z0-9_-]{0,31}``); the extractor
  writes ``constraint``, ``preference``, ``decision`` and ``fact``, a model may
  use others. ``more`` is reserved: a ``[more]`` line points to a fragment
  file, loaded on demand.
* ``key`` (optional, up to 80 characters, no ``[`` ``]``) names what the fact is
  the value of. Two facts with the same key (compared after normalisation,
  whatever their kinds) are two values of one thing: the newer one replaces
  the older one when memory is consolidated. A fact without a key is never replaced,
  only deduplicated. Colons in the text never make a key: only the bracket
  does.
* ``text`` is one line of free text (no control characters, line breaks or
  lone surrogates).

Two facts are *near duplicates* when their key and text are equal after
:func:`normalize` (Unicode NFKC, case folding, white space collapsed, quotes,
brackets and emphasis dropped at both ends of a word, sentence punctuation at
its end); the kind does not count. Exact values are never blurred: ``port
5433`` and ``port 5434`` differ, and so do ``/etc/app`` and ``etc/app``,
``.env`` and ``env``, ``::1`` and ``1``.

Every other line (headings, prose, blank lines) is kept as written and never
treated as a fact.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Union

from context_core.errors import InvalidTypeError, MemoryFormatError

__all__ = [
    "FRAGMENT_NAME",
    "KINDS",
    "MORE",
    "Fact",
    "Item",
    "Pointer",
    "RawLine",
    "normalize",
    "parse_fact",
    "parse_line",
    "parse_reply",
    "to_facts",
]

KINDS = ("constraint", "preference", "decision", "fact")
"""The kinds the deterministic extractor writes (others are accepted)."""

MORE = "more"
"""The reserved kind of a pointer line (``- [more] auto-....md``)."""

MAX_KEY_CHARS = 80

FRAGMENT_NAME = re.compile(r"auto-\d{4}-\d{2}-\d{2}-[0-9a-f]{4,8}\.md")
"""A fragment's file name: ``auto-YYYY-MM-DD-xxxx.md`` (4 to 8 hex digits)."""

_KIND = r"[a-z][a-z0-9_-]{0,31}"
_LINE = re.compile(rf"- \[(?P<kind>{_KIND})(?:: *(?P<key>[^\[\]]+?))?\] +(?P<text>.+)")
_LENIENT = re.compile(rf"(?:[-*] +)?\[(?P<kind>{_KIND})(?:: *(?P<key>[^\[\]]+?))?\] *(?P<text>.*)", re.I)
# Characters that must not occur in a fact: controls, everything str.splitlines splits on,
# and lone surrogates (not text: they cannot be written as UTF-8).
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Stripped from both ends of a word: quotes, brackets and emphasis (ASCII and CJK).
_WRAP = "\"'`*()[]{}<>\u300c\u300d\u300e\u300f\uff08\uff09\u300a\u300b\u201c\u201d\u2018\u2019"
# Stripped from the end of a word only: sentence punctuation (ASCII and CJK). A leading
# "." or ":" is part of a value (".env", ".5", "::1", ":8080").
_TRAILING = ".,;:!?\u2026\u3002\uff0c\u3001\uff1b\uff1a\uff01\uff1f"
_TRAILING_AND_WRAP = _TRAILING + _WRAP


def normalize(text: str) -> str:
    """The form near duplicates share: NFKC, case folded, words split on white
    space; quotes, brackets and emphasis stripped from both ends of each word,
    sentence punctuation from its end only (so ``/``, ``~``, ``-``, ``_``,
    ``#``, ``@``, inner dots and a leading ``.`` or ``:`` stay: ``.env`` is not
    ``env``, ``::1`` is not ``1``)."""
    words = unicodedata.normalize("NFKC", text).casefold().split()
    return " ".join(w for w in (word.rstrip(_TRAILING_AND_WRAP).lstrip(_WRAP) for word in words) if w)


def _check_text(what: str, value: str) -> str:
    value = value.strip()
    if not value:
        raise MemoryFormatError(f"a fact's {what} is empty", text=value)
    bad = _FORBIDDEN.search(value)
    if bad:
        char = bad.group()
        why = (
            "a lone surrogate (not text; it cannot be written as UTF-8)"
            if "\ud800" <= char <= "\udfff"
            else "a control or line-break character (a fact is one line)"
        )
        raise MemoryFormatError(f"a fact's {what} holds {char!r}: {why}", text=value)
    return value


@dataclass(frozen=True)
class Fact:
    """One fact: ``kind``, optional ``key``, and ``text`` (one line)."""

    text: str
    kind: str = "fact"
    key: str | None = None

    def __post_init__(self) -> None:
        for name in ("text", "kind"):
            if not isinstance(getattr(self, name), str):
                raise InvalidTypeError(f"Fact.{name} must be a str, got {type(getattr(self, name)).__name__}")
        if self.key is not None and not isinstance(self.key, str):
            raise InvalidTypeError(f"Fact.key must be a str or None, got {type(self.key).__name__}")
        object.__setattr__(self, "text", _check_text("text", self.text))
        kind = self.kind.strip().lower()
        if not re.fullmatch(_KIND, kind):
            raise MemoryFormatError(f"fact kind {self.kind!r} is not a lower-case word", text=self.kind)
        if kind == MORE:
            raise MemoryFormatError("the kind 'more' is reserved for pointer lines", text=self.kind)
        object.__setattr__(self, "kind", kind)
        if self.key is not None:
            key = " ".join(_check_text("key", self.key).split())
            if "[" in key or "]" in key or len(key) > MAX_KEY_CHARS:
                raise MemoryFormatError(
                    f"fact key {key!r}: at most {MAX_KEY_CHARS} characters, no '[' or ']'", text=key
                )
            object.__setattr__(self, "key", key)

    def line(self) -> str:
        """The fact as a stored line (without the newline)."""
        if self.key is None:
            return f"- [{self.kind}] {self.text}"
        return f"- [{self.kind}: {self.key}] {self.text}"

    __str__ = line

    @property
    def line_bytes(self) -> int:
        """The stored line's size in a file, its newline included."""
        return len(self.line().encode("utf-8", "surrogateescape")) + 1

    @property
    def signature(self) -> str:
        """Equal for near duplicates (key and text after :func:`normalize`)."""
        text = normalize(self.text)
        return text if self.key is None else f"{normalize(self.key)}\x1f{text}"

    @property
    def identity(self) -> str | None:
        """The normalised key: facts sharing it are values of one thing (the
        newest wins), whatever their kinds; ``None`` for a fact without a key.
        Near duplicates with a key share it too."""
        return None if self.key is None else normalize(self.key)


@dataclass(frozen=True)
class Pointer:
    """A ``- [more] auto-....md`` line: the fragment holds more facts."""

    name: str

    def line(self) -> str:
        return f"- [{MORE}] {self.name}"


@dataclass(frozen=True)
class RawLine:
    """Any other line (a heading, prose, a blank line), kept as written."""

    text: str

    def line(self) -> str:
        return self.text


Item = Union[Fact, Pointer, RawLine]


def parse_line(line: str) -> Item:
    """A stored line as a :class:`Fact`, a :class:`Pointer` or a :class:`RawLine`.
    Never raises: a line that is not a well-formed fact is raw text. A byte
    order mark before it (an editor's, at the start of a hand-saved file) is
    no part of it."""
    line = line.removeprefix("\ufeff")
    match = _LINE.fullmatch(line)
    if match is None:
        return RawLine(line)
    kind, key, text = match.group("kind", "key", "text")
    if kind == MORE:
        name = text.strip()
        return Pointer(name) if key is None and FRAGMENT_NAME.fullmatch(name) else RawLine(line)
    try:
        return Fact(text, kind, key)
    except MemoryFormatError:
        return RawLine(line)


def parse_fact(line: str) -> Fact:
    """A fact given by a caller: ``- [kind: key] text``, ``[kind] text`` (the
    ``- `` is optional, the kind case-insensitive) or plain ``text`` (kind
    ``fact``, no key). A byte order mark before it (a file some editors
    wrote, read as plain UTF-8) is no part of it. Raises
    :class:`~context_core.MemoryFormatError` for a line starting with ``[``
    or ``- [`` whose bracket is malformed, an empty or multi-line fact, or
    the reserved kind ``more``."""
    if not isinstance(line, str):
        raise InvalidTypeError(f"a fact must be a str or a Fact, got {type(line).__name__}")
    stripped = line.lstrip("\ufeff").strip()
    match = _LENIENT.fullmatch(stripped)
    if match is not None:
        return Fact(match.group("text"), match.group("kind"), match.group("key"))
    if re.match(r"(?:[-*] +)?\[", stripped):
        raise MemoryFormatError(
            f"malformed fact bracket in {stripped[:80]!r}: expected '- [kind] text' or '- [kind: key] text'",
            text=line,
        )
    if stripped.startswith(("- ", "* ")):
        stripped = stripped[2:]
    elif stripped in ("-", "*"):
        stripped = ""  # a bullet alone: an empty fact (refused), not the fact "-"
    return Fact(stripped)


def to_facts(facts: Iterable[Fact | str]) -> list[Fact]:
    """Facts and fact strings (see :func:`parse_fact`) as a list of facts."""
    if isinstance(facts, (str, Fact)):
        raise InvalidTypeError("facts must be a list of facts or strings, not a single one")
    if isinstance(facts, Mapping) or not isinstance(facts, Iterable):
        # A dict would give its keys as facts.
        raise InvalidTypeError(f"facts must be a list of facts or strings, not {type(facts).__name__}")
    return [f if isinstance(f, Fact) else parse_fact(f) for f in facts]


_FENCE = re.compile(r"```[\w-]*")
NOTHING = "NONE"
"""What a model answers when there is nothing to remember."""


def parse_reply(reply: str) -> list[Fact]:
    """A model's reply in the fact format, strictly: every non-blank line is a
    fact line ``- [kind] text`` or ``- [kind: key] text`` (one Markdown code
    fence around the whole reply is tolerated), or the reply is ``NONE`` alone
    (no facts). Anything else raises :class:`~context_core.MemoryFormatError`
    naming the first bad line, so a malformed reply never writes anything."""
    if not isinstance(reply, str):
        raise MemoryFormatError(f"the model's reply is a {type(reply).__name__}, not text", text=repr(reply))
    lines = reply.strip().splitlines()
    if len(lines) >= 2 and _FENCE.fullmatch(lines[0].strip()) and lines[-1].strip() == "```":
        lines = lines[1:-1]
    numbered = [(n, line.strip()) for n, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        raise MemoryFormatError("the model's reply is empty (expected fact lines or NONE)", text=reply)
    if len(numbered) == 1 and numbered[0][1].strip("*.` ").upper() == NOTHING:
        return []
    facts = []
    for n, line in numbered:
        match = _LINE.fullmatch(line)
        if match is None or match.group("kind") == MORE:
            raise MemoryFormatError(
                f"line {n} of the model's reply is not a fact line ('- [kind] text' or"
                f" '- [kind: key] text'): {line[:120]!r}",
                line=n,
                text=reply,
            )
        try:
            facts.append(Fact(match.group("text"), match.group("kind"), match.group("key")))
        except MemoryFormatError as error:
            raise MemoryFormatError(f"line {n} of the model's reply: {error}", line=n, text=reply) from None
    return facts
