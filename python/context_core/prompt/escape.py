"""Escaping: content can never open a section or a tag of its own.

A prompt is Markdown sections (``## Context``...) and, in the task block,
tagged items (``<MEM>``, ``<FILE path="...">``...). Content that lands inside
them (a memory line, a file, a user's note, a tool's output) is data: it must
not start a section or close a tag, whether a Markdown parser reads it or a
model does. A model may read ``<MEM>`` in full-width letters as ``<MEM>``
and not see a zero-width space, so every check below reads the text **folded** as well as
raw: each character in its NFKC form (full-width and other compatibility
forms as their ASCII letters, digits and punctuation), Unicode's format
characters (category Cf: zero-width spaces and joiners, bidirectional
controls, the soft hyphen...) ignored.

* **Tag-like text** (:func:`escape_tags`). A ``<`` (or a character that
  folds to one, :data:`LESS_THAN`) that opens or closes a reserved tag
  (:data:`RESERVED_TAGS`, in any case, with blanks or a ``/`` before the name:
  ``</MEM>``, ``< task >``, ``<\\u200bMEM>``, the name in full-width letters)
  is written ``&lt;``. The name ends at anything but an ASCII letter, digit or
  ``_`` (``</MEM`` followed by a dotless i is ``</MEM`` to a reader;
  ``<MEMORY>`` is another name). Other
  ``<`` (``a < b``, ``<div>``, generics) are left alone, so code reads as
  written.
* **Markdown blocks** (:func:`escape`). A line is read past its blanks and
  list markers (``-``, ``+``, ``*``, ``1.``, ``1)``, each followed by a blank,
  so ``- ## Memory`` is a list item holding a heading); what comes next is
  neutralised when it would open a block: a heading (``#``), a block quote
  (``>``), a code fence (`````, ``~~~``) or a setext underline (a line of only
  ``=`` or only ``-``) gets a backslash before it, which Markdown reads as the
  literal character; an HTML block that runs past blank lines (``<!--``,
  ``<?``, ``<!``, ``<pre``, ``<script``, ``<style``, ``<textarea``) has its
  ``<`` written ``&lt;``. "Line" means what :meth:`str.splitlines` splits on
  (``\\n``, ``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028,
  U+2029), the widest definition.
* **Code** (:func:`code_fence`). Files, documents and errors are not escaped
  line by line (``#include``, ``# comment`` and ``---`` stay as written): they
  go in a code fence longer than any run of backticks in them, so no line of
  theirs can close it; only tags are escaped inside.
* **Attribute values** (:func:`escape_attr`: ``path``, ``source``) are
  XML-escaped (``&``, ``<``, ``>``, ``"``, the characters that fold to them,
  line breaks), so a value cannot end its attribute.

Only a ``\\`` is added or a ``<`` (or what folds to one) written ``&lt;``;
nothing is removed, so the content reads as it was written.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "FORMAT_CHARS",
    "LESS_THAN",
    "LINE_BREAKS",
    "RESERVED_TAGS",
    "caseless",
    "caseless_chars",
    "code_fence",
    "escape",
    "escape_attr",
    "escape_tags",
    "fold",
    "one_line",
]

RESERVED_TAGS = ("MEM", "FILE", "ERROR", "DOC", "TASK", "OUTPUT_FORMAT", "CONSTRAINT")
"""The tags the task block uses (the task block's three dimensions)."""

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character :meth:`str.splitlines` splits on."""

_FORMAT_BMP = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
)
FORMAT_CHARS = _FORMAT_BMP + (
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
"""Unicode's format characters (category Cf, Unicode 15.1), as the inside of
a regex character class: invisible, so a reader skips them."""

LESS_THAN = "<\ufe64\uff1c"
"""``<`` and the characters whose NFKC form is ``<``."""

_BACKTICKS = str.maketrans({"\u1fef": "`", "\uff40": "`"})  # what NFKC folds to a backtick
_CF = re.compile(f"[{FORMAT_CHARS}]")
# The format characters of the BMP, and every astral character (a quick first
# look: a class of many astral ranges is several times slower to search).
_CF_QUICK = re.compile(f"[{_FORMAT_BMP}\U00010000-\U0010ffff]")
_BREAK = f"[{LINE_BREAKS}]"
_BLANK = f"[^\\S{LINE_BREAKS}]"  # white space that does not end a line

# -- tags ------------------------------------------------------------------------------------

_NAMES = "|".join(RESERVED_TAGS)
# The name is matched in any case; what follows it is not: under IGNORECASE
# the lookahead would read U+017F (long s), U+212A (Kelvin), U+0131 (dotless
# i) and U+0130 as ASCII letters, so "</MEM\u0131>" would pass as a longer
# name. Only an ASCII letter, digit or "_" makes a longer name ("<MEMORY>").
_TAG = re.compile(rf"[{LESS_THAN}](?=[\s/]*(?:{_NAMES})(?-i:(?![0-9A-Za-z_])))", re.IGNORECASE)
# A "<" whose name may only show folded: a non-ASCII character (a format
# character, a full-width letter) among its blanks or within its name.
_TAG_FOLDED = re.compile(rf"[{LESS_THAN}](?=[\s/]*[0-9A-Za-z_]{{0,13}}[^\x00-\x7f])")
_TAG_NAMES = frozenset(RESERVED_TAGS)
_TAG_PREFIXES = frozenset(name[:i] for name in RESERVED_TAGS for i in range(1, len(name)))

# -- Markdown blocks ---------------------------------------------------------------------------

# A list marker and the blanks after it (or the end of its line).
_MARKER = rf"(?:[-+*]|[0-9]+[.)])(?:{_BLANK}+|(?={_BREAK}|\Z))"
# The blanks are taken atomically (a lookahead's capture, then matched): a
# marker or an opener never starts with a blank, and backtracking through an
# indented code line's blanks made the search three times slower.
_PREFIX = rf"(?P<prefix>(?=(?P<blanks>{_BLANK}*))(?P=blanks)(?:{_MARKER})*)"
_BLOCK_OPENER = rf"#|>|```|~~~|(?:=+|-+){_BLANK}*(?={_BREAK}|\Z)"
# CommonMark's HTML blocks 1-5, which end only at their own end marker, so a
# later blank line (a section's end) does not close them.
_HTML = r"(?:!|\?|/?(?i:pre|script|style|textarea)(?![0-9A-Za-z-]))"
_HTML_RE = re.compile(_HTML)
_OPENING = rf"{_PREFIX}(?:(?P<opener>{_BLOCK_OPENER})|[{LESS_THAN}](?={_HTML}))"
# Led by the line break (a character class, which the regex engine skips to
# quickly) rather than by "^|": three times faster on long texts.
_BLOCK = re.compile(rf"(?P<start>{_BREAK}){_OPENING}")
_BLOCK_FIRST = re.compile(rf"\A(?P<start>){_OPENING}")
# A line whose opening may only show folded: a non-ASCII character among its
# blanks, markers or block opener.
_FOLDED_OPENING = rf"[ \t0-9.)*+\-=`~>#]*(?:<[!?/]?[0-9A-Za-z]{{0,10}})?[^\x00-\x7f{LINE_BREAKS}]"
_LINE_FOLDED = re.compile(rf"{_BREAK}({_FOLDED_OPENING})")
_FIRST_FOLDED = re.compile(rf"\A({_FOLDED_OPENING})")
_BREAKS = re.compile(f"(?:\r\n|{_BREAK})")
_ATTR = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
    | {c: f"&#{ord(c)};" for c in LINE_BREAKS + "\ufe60\uff06\ufe64\uff1c\ufe65\uff1e\uff02"}
)

_FOLDS: dict[str, str] = {}


def fold(char: str) -> str:
    """One character as a reader may take it: nothing for a format
    character, else its NFKC form (U+FF03, a full-width ``#``, is ``#``;
    U+2488 is ``1.``)."""
    folded = _FOLDS.get(char)
    if folded is None:
        folded = "" if _CF.match(char) else unicodedata.normalize("NFKC", char)
        if len(_FOLDS) >= 8192:
            _FOLDS.clear()
        _FOLDS[char] = folded
    return folded


def _plain(text: str) -> bool:
    """Whether ``text`` reads the same folded: no format character, and
    every character already in its NFKC form."""
    if text.isascii():
        return True
    if not unicodedata.is_normalized("NFKC", text):
        return False
    quick = _CF_QUICK.search(text)
    return quick is None or (quick.group() >= "\U00010000" and not _CF.search(text, quick.start()))


def _blank_or_slash(folded: str) -> bool:
    return not folded or folded.isspace() or folded == "/"


def _tag_at(text: str, i: int) -> bool:
    """Whether ``text[i:]``, read folded, is a reserved tag's name (after
    blanks and ``/``) that no ASCII letter, digit or ``_`` continues."""
    n = len(text)
    while i < n:  # blanks and slashes, and what folds to them or to nothing
        c = text[i]
        if not (c.isspace() or c == "/" or (c >= "\x80" and _blank_or_slash(fold(c)))):
            break
        i += 1
    name = ""
    while i < n:
        c = text[i]
        i += 1
        f = c if c < "\x80" else fold(c)
        if not f:
            continue
        name += f.upper().replace("\u0130", "I")  # re.IGNORECASE's reading of U+0130
        if name in _TAG_NAMES:
            after = text[i] if i < n else ""
            return not (after.isascii() and (after.isalnum() or after == "_"))
        if name not in _TAG_PREFIXES:
            # a fold of several characters may pass the name: a longer name
            # only if what comes after it is an ASCII identifier character
            for reserved in _TAG_NAMES:
                if name.startswith(reserved):
                    after = name[len(reserved)]
                    return not (after.isascii() and (after.isalnum() or after == "_"))
            return False
    return False


def escape_tags(text: str) -> str:
    """``text`` with every ``<`` (or what folds to one) that starts a reserved
    tag written ``&lt;``."""
    if text.isascii():
        return _TAG.sub("&lt;", text) if "<" in text else text
    if "<" not in text and "\ufe64" not in text and "\uff1c" not in text:
        return text
    text = _TAG.sub("&lt;", text)
    out = []
    last = 0
    for match in _TAG_FOLDED.finditer(text):
        if _tag_at(text, match.end()):
            out.append(text[last : match.start()])
            out.append("&lt;")
            last = match.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _opening(text: str, start: int) -> tuple[int, bool] | None:
    """Where the line at ``text[start:]``, read folded, opens a block: the
    index of the character to neutralise, and whether it is an HTML block's
    ``<`` (else a backslash goes before it)."""
    chars: list[str] = []  # the line's characters, folded, as far as read
    where: list[int] = []  # the index in text each came from
    n = len(text)
    read = start

    def at(k: int) -> str:
        nonlocal read
        while len(chars) <= k:
            if read >= n or text[read] in LINE_BREAKS:
                return ""
            c = text[read]
            for f in c if c < "\x80" else fold(c):
                chars.append(f)
                where.append(read)
            read += 1
        return chars[k]

    def blanks(k: int) -> int:
        while (c := at(k)) and c.isspace():
            k += 1
        return k

    k = blanks(0)
    while True:
        c = at(k)
        if not c:
            return None
        if c in "#>":
            return where[k], False
        if c in "`~" and at(k + 1) == c and at(k + 2) == c:
            return where[k], False
        if c in "=-":
            j = k
            while at(j) == c:
                j += 1
            if not at(blanks(j)):
                return where[k], False
        if c == "<":
            head = "".join(at(j) for j in range(k + 1, k + 11))
            return (where[k], True) if _HTML_RE.match(head) else None
        # a list marker, followed by a blank, before more of the line
        if c in "-+*":
            j = k + 1
        else:
            j = k
            while "0" <= at(j) <= "9":
                j += 1
            if j == k or at(j) not in ".)":
                return None
            j += 1
        if not at(j).isspace():  # no blank (or the end of the line): not a marker
            return None
        k = blanks(j)


def _escape_folded(text: str, line_start: bool) -> str:
    """The lines of ``text`` whose opening shows only folded, neutralised."""
    out = []
    last = 0
    first = _FIRST_FOLDED.match(text) if line_start else None
    starts = [match.start(1) for match in _LINE_FOLDED.finditer(text)]
    for start in [0, *starts] if first is not None else starts:
        found = _opening(text, start)
        if found is None:
            continue
        index, html = found
        out.append(text[last:index])
        out.append("&lt;" if html else "\\")
        last = index + 1 if html else index
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _neutralise(match: re.Match[str]) -> str:
    """A line's opening with a backslash before its block opener, or its
    HTML block's ``<`` written ``&lt;``."""
    opener = match.group("opener")
    if opener is None:
        return f"{match.group('start')}{match.group('prefix')}&lt;"
    return f"{match.group('start')}{match.group('prefix')}\\{opener}"


def escape(text: str, *, line_start: bool = True) -> str:
    """``text`` made safe to put inside a section or a tag: reserved tags
    neutralised, and every line that would open a Markdown block (a heading,
    a block quote, a fence, a setext underline, an HTML block that runs past
    blank lines), past its blanks and list markers, neutralised.
    ``line_start=False``: the text's first line continues a line of the
    prompt (``<TASK>...``), so it opens no block."""
    text = _BLOCK.sub(_neutralise, escape_tags(text))
    if line_start:
        text = _BLOCK_FIRST.sub(_neutralise, text, count=1)
    if not _plain(text):
        text = _escape_folded(text, line_start)
    return text


def code_fence(text: str) -> str:
    """A backtick fence for ``text``: longer than any run of backticks in it
    (and what folds to them, format characters ignored), at least three."""
    if not text.isascii():
        text = _CF.sub("", text).translate(_BACKTICKS)
    if "```" not in text:
        return "```"
    return "`" * max(3, max(map(len, re.findall("`+", text))) + 1)


def escape_attr(value: str) -> str:
    """An attribute value, XML-escaped (quotes, angle brackets, ampersands,
    the characters that fold to them, and line breaks)."""
    return value.translate(_ATTR)


def caseless_chars(text: str) -> str:
    """``text`` with format characters removed, NFKC (full-width and other
    compatibility forms as their plain letters) and case folded: each
    character as a reader takes it, whatever its case (white space as it is)."""
    if text.isascii():  # no format character, NFKC already, and lower() is casefold()
        return text.lower()
    if _CF_QUICK.search(text):
        text = _CF.sub("", text)
    folded = unicodedata.normalize("NFKC", text).casefold()
    if not unicodedata.is_normalized("NFKC", folded):  # casefold can undo NFKC (U+01F0 to j, caron)
        folded = unicodedata.normalize("NFKC", folded)
    return folded


def caseless(text: str) -> str:
    """``text`` as never-enter rules are matched against it:
    :func:`caseless_chars`, and each run of white space (line breaks and
    no-break spaces too) one space, none at either end. Two texts a reader
    takes for the same words fold the same."""
    return " ".join(caseless_chars(text).split())


def one_line(text: str) -> str:
    """``text`` on one line: every line break (``\\r\\n`` counts as one)
    becomes a space."""
    return _BREAKS.sub(" ", text)
