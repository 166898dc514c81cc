"""The twin of the extension's PDF page count (``rust/core/src/document.rs``),
written from its contract for the differential tests.

A PDF attachment costs :data:`PDF_PAGE_TOKENS` a page. Its data is standard
base64 (ASCII white space left out, padding optional) or a ``data:`` URL
whose header ends ``;base64`` and names no type or ``application/pdf``; a
file is a PDF if ``%PDF-`` is in its first 1,024 bytes. Its pages are its
``/Type /Page`` entries (not ``/Pages``): those in each object stream
(``/ObjStm``: the data after its ``stream`` keyword and end of line, up to
``endstream``), and those in the rest of the file, the streams' data left
out. Where a stream does not inflate whole within what the earlier ones
left of :data:`MAX_INFLATED_BYTES`, or no page is found, the pages are not
known (``None``).

A page counts once per object number (an incremental update appends a
rewritten page as a new copy of its object): the number of the indirect
object the entry is in (the last ``N G obj`` header before it, numbers of
one to ten digits, with no ``endobj`` between) or, in an object stream, of
the object its offset falls in (the stream's leading pairs of number and
offset from its dictionary's last ``/First``, all numbers of one to ten
digits, in pairs, or none are read). An entry whose object is not known
counts on its own.
"""

from __future__ import annotations

import binascii
import re
import zlib
from base64 import b64decode
from bisect import bisect_left, bisect_right

__all__ = ["MAX_INFLATED_BYTES", "PDF_PAGE_TOKENS", "PDF_TYPE", "ascii_lower", "pdf_pages", "pdf_tokens"]

PDF_PAGE_TOKENS = 3000
PDF_TYPE = "application/pdf"
MAX_INFLATED_BYTES = 64 << 20

_WHITE = b"\x00\t\n\x0c\r "
_ENDS_NAME = _WHITE + b"()<>[]{}/%"
_BASE64 = re.compile(rb"[A-Za-z0-9+/]*={0,2}")
_W = rb"[\x00\t\n\x0c\r ]"
_ENDS = rb"[\x00\t\n\x0c\r ()<>\[\]{}/%]"
#: An object's header: its number (whole, one to ten digits, after a
#: delimiter or the start), white space, its generation, white space, `obj`.
_HEADER = re.compile(
    rb"(?<!(?!" + _ENDS + rb").)([0-9]{1,10})" + _W + rb"+[0-9]{1,10}" + _W + rb"+obj(?=" + _ENDS + rb"|\Z)",
    re.S,
)
_MOST_DIGITS = 10


def pdf_tokens(data: str) -> int | None:
    """Tokens of a PDF given as base64 or a data URL; ``None`` where its pages are not known."""
    if data.startswith("data:"):
        header, comma, data = data[5:].partition(",")
        header = ascii_lower(header)
        kind = header.split(";")[0]
        if not comma or not header.endswith(";base64") or kind not in ("", PDF_TYPE):
            return None
    raw = _decode(data)
    pages = None if raw is None else pdf_pages(raw)
    return None if pages is None else pages * PDF_PAGE_TOKENS


def ascii_lower(text: str) -> str:
    """``text`` with only its ASCII letters lowered (as Rust's ``to_ascii_lowercase``)."""
    return "".join(c.lower() if c.isascii() else c for c in text)


def _decode(text: str) -> bytes | None:
    # White space as Rust's is_ascii_whitespace: no vertical tab.
    packed = bytes(b for b in text.encode("utf-8", "surrogatepass") if b not in b" \t\n\x0c\r")
    if _BASE64.fullmatch(packed) is None:
        return None
    body = packed.rstrip(b"=")
    missing = -len(body) % 4  # padding may be left out, not overdone
    if len(body) % 4 == 1 or len(packed) - len(body) > missing:
        return None
    try:
        return b64decode(body + b"=" * missing, validate=True)
    except binascii.Error:
        return None


def pdf_pages(raw: bytes) -> int | None:
    """The pages of a PDF's bytes: ``None`` if it is not a PDF, an object
    stream does not inflate, or none is found."""
    if b"%PDF-" not in raw[:1024]:
        return None
    known: set[int] = set()
    streams = _object_streams(raw, known)
    if streams is None:
        return None
    unknown, spans = streams
    start = 0
    for begin, end in [*spans, (len(raw), len(raw))]:
        unknown += _top_level_pages(raw[start:begin], known)
        start = end
    return (len(known) + unknown) or None


def _top_level_pages(raw: bytes, known: set[int]) -> int:
    """Adds the numbers of the objects ``raw``'s pages are in to ``known``;
    the pages whose object is not known."""
    entries = _page_entries(raw)
    if not entries:
        return 0
    headers = [(m.end(), int(m.group(1))) for m in _HEADER.finditer(raw)]
    header_ends = [end for end, _ in headers]
    closes = [m.start() for m in re.finditer(rb"endobj", raw)]
    unknown = 0
    for at in entries:
        before = bisect_right(header_ends, at)
        if before and bisect_left(closes, header_ends[before - 1]) == bisect_left(closes, at):
            known.add(headers[before - 1][1])
        else:
            unknown += 1
    return unknown


def _name_at(raw: bytes, name: bytes, start: int) -> int:
    """Where ``name`` next occurs whole (its next byte ends a name) from ``start``; -1 if nowhere."""
    at = raw.find(name, start)
    while at >= 0 and at + len(name) < len(raw) and raw[at + len(name)] not in _ENDS_NAME:
        at = raw.find(name, at + 1)
    return at


def _page_entries(raw: bytes) -> list[int]:
    """Where the ``/Type /Page`` entries are (not ``/Type /Pages``)."""
    found, at = [], _name_at(raw, b"/Type", 0)
    while at >= 0:
        value = at + 5
        while value < len(raw) and raw[value] in _WHITE:
            value += 1
        end = value + 5
        if raw[value:end] == b"/Page" and (end >= len(raw) or raw[end] in _ENDS_NAME):
            found.append(at)
        at = _name_at(raw, b"/Type", at + 5)
    return found


def _last_first(raw: bytes) -> int | None:
    """The value of the last whole ``/First`` name in ``raw``, if a number follows it."""
    at, found = _name_at(raw, b"/First", 0), -1
    while at >= 0:
        found, at = at, _name_at(raw, b"/First", at + 6)
    if found < 0:
        return None
    value = found + 6
    while value < len(raw) and raw[value] in _WHITE:
        value += 1
    end = value
    while end < len(raw) and raw[end] in b"0123456789":
        end += 1
    if not 0 < end - value <= _MOST_DIGITS or (end < len(raw) and raw[end] not in _ENDS_NAME):
        return None
    return int(raw[value:end])


def _stream_pages(objects: bytes, first: int | None, known: set[int]) -> int:
    """Adds the numbers of the objects an object stream's pages are in to
    ``known``; the pages whose object is not known."""
    entries = _page_entries(objects)
    offsets: list[tuple[int, int]] = []
    if first is not None and first <= len(objects):
        tokens = [t for t in re.split(_W, objects[:first]) if t]
        if all(t.isdigit() and len(t) <= _MOST_DIGITS for t in tokens) and len(tokens) % 2 == 0:
            numbers = [int(t) for t in tokens]
            offsets = sorted((first + numbers[i + 1], numbers[i]) for i in range(0, len(numbers), 2))
    starts = [start for start, _ in offsets]
    unknown = 0
    for at in entries:
        before = bisect_right(starts, at)
        if before:
            known.add(offsets[before - 1][1])
        else:
            unknown += 1
    return unknown


def _object_streams(raw: bytes, known: set[int]) -> tuple[int, list[tuple[int, int]]] | None:
    """Adds the numbers of the objects the object streams' pages are in to
    ``known``: the pages whose object is not known, and where the streams'
    data lies; ``None`` if one does not inflate."""
    left, unknown, start = MAX_INFLATED_BYTES, 0, 0
    spans: list[tuple[int, int]] = []
    while True:
        found = _name_at(raw, b"/ObjStm", start)
        if found < 0:
            return unknown, spans
        after = found + 7
        keyword = raw.find(b"stream", after)
        if keyword < 0:
            return unknown, spans
        begin = keyword + 6
        if raw.startswith(b"\r\n", begin):
            begin += 2
        elif raw.startswith(b"\n", begin):
            begin += 1
        else:
            start = begin
            continue
        end = raw.find(b"endstream", begin)
        end = len(raw) if end < 0 else end
        objects = _inflate(raw[begin:end], left)
        if objects is None:
            return None
        left -= len(objects)
        unknown += _stream_pages(objects, _last_first(raw[start:keyword]), known)
        spans.append((begin, end))
        start = end


def _inflate(data: bytes, limit: int) -> bytes | None:
    stream = zlib.decompressobj()
    try:
        out = stream.decompress(data, limit + 1)
    except zlib.error:
        return None
    return out if stream.eof and len(out) <= limit else None
