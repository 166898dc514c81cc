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
"""

from __future__ import annotations

import binascii
import re
import zlib
from base64 import b64decode

__all__ = ["MAX_INFLATED_BYTES", "PDF_PAGE_TOKENS", "PDF_TYPE", "ascii_lower", "pdf_pages", "pdf_tokens"]

PDF_PAGE_TOKENS = 3000
PDF_TYPE = "application/pdf"
MAX_INFLATED_BYTES = 64 << 20

_WHITE = b"\x00\t\n\x0c\r "
_ENDS_NAME = _WHITE + b"()<>[]{}/%"
_BASE64 = re.compile(rb"[A-Za-z0-9+/]*={0,2}")


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
    streams = _object_streams(raw)
    if streams is None:
        return None
    pages, spans = streams
    start = 0
    for begin, end in [*spans, (len(raw), len(raw))]:
        pages += _page_objects(raw[start:begin])
        start = end
    return pages or None


def _name_at(raw: bytes, name: bytes, start: int) -> int:
    """Where ``name`` next occurs whole (its next byte ends a name) from ``start``; -1 if nowhere."""
    at = raw.find(name, start)
    while at >= 0 and at + len(name) < len(raw) and raw[at + len(name)] not in _ENDS_NAME:
        at = raw.find(name, at + 1)
    return at


def _page_objects(raw: bytes) -> int:
    count, at = 0, _name_at(raw, b"/Type", 0)
    while at >= 0:
        value = at + 5
        while value < len(raw) and raw[value] in _WHITE:
            value += 1
        end = value + 5
        if raw[value:end] == b"/Page" and (end >= len(raw) or raw[end] in _ENDS_NAME):
            count += 1
        at = _name_at(raw, b"/Type", at + 5)
    return count


def _object_streams(raw: bytes) -> tuple[int, list[tuple[int, int]]] | None:
    """The pages in the object streams and where their data lies; ``None`` if one does not inflate."""
    left, pages, start = MAX_INFLATED_BYTES, 0, 0
    spans: list[tuple[int, int]] = []
    while True:
        found = _name_at(raw, b"/ObjStm", start)
        if found < 0:
            return pages, spans
        after = found + 7
        keyword = raw.find(b"stream", after)
        if keyword < 0:
            return pages, spans
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
        pages += _page_objects(objects)
        spans.append((begin, end))
        start = end


def _inflate(data: bytes, limit: int) -> bytes | None:
    stream = zlib.decompressobj()
    try:
        out = stream.decompress(data, limit + 1)
    except zlib.error:
        return None
    return out if stream.eof and len(out) <= limit else None
