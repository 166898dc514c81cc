"""PDF attachments cost their pages, not their base64: the extension and its
twin (``context_core.reference.document``) agree on crafted files, and a
Session takes a PDF that, counted as text, would not fit any window."""

from __future__ import annotations

import base64
import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import InvalidTypeError, Session, Tokenizer, reference
from context_core.reference.document import MAX_INFLATED_BYTES, pdf_pages
from context_core.tokens import PDF_PAGE_TOKENS

KINDS = ["document", "document-text", "document-content", "document-url", "file", "input_file"]
WHITE = st.sampled_from([b"", b" ", b"\n", b"\r\n", b"\t", b"  ", b"\x00", b"\x0c"])


def page(space: bytes = b" ", tail: bytes = b">>") -> bytes:
    return b"<</Type" + space + b"/Page" + tail


def object_stream(
    objects: bytes, *, eol: bytes = b"\n", cut: int = 0, damage: bool = False, level: int = -1
) -> bytes:
    data = zlib.compress(objects, level)
    if damage:
        data = data[:4] + bytes([data[4] ^ 0xFF]) + data[5:]
    data = data[: len(data) - cut]
    return b"<</Type /ObjStm /N 3 /Filter /FlateDecode>>\nstream" + eol + data + b"\nendstream\n"


def numbered(number: int, generation: bytes, body: bytes, close: bool) -> bytes:
    """An indirect object: ``number generation obj body [endobj]``."""
    return b"%d %s obj " % (number, generation) + body + (b" endobj" if close else b"")


def numbered_stream(numbers: list[int], *, first_shift: int = 0, header_junk: bytes = b"") -> bytes:
    """An object stream whose objects (each a page, by its number) are
    found by their offsets from ``/First`` (moved by ``first_shift``, the
    pairs followed by ``header_junk``)."""
    objects, offsets, at = [], [], 0
    for number in numbers:
        body = page(b" ", b" /N %d>>" % number)
        offsets.append(b"%d %d" % (number, at))
        objects.append(body)
        at += len(body) + 1
    header = b" ".join(offsets) + header_junk + b"\n"
    data = zlib.compress(header + b" ".join(objects))
    first = len(header) + first_shift
    return (
        b"<</Type /ObjStm /N %d /First %d /Filter /FlateDecode>>\nstream\n" % (len(numbers), first)
        + data
        + b"\nendstream\n"
    )


pieces = st.one_of(
    st.builds(
        numbered,
        st.integers(1, 4),
        st.sampled_from([b"0", b"1", b"00000000000"]),
        st.builds(page, WHITE, st.sampled_from([b">>", b"/Rotate 90>>"])),
        st.booleans(),
    ),
    st.builds(
        numbered_stream,
        st.lists(st.integers(1, 6), max_size=4),
        first_shift=st.sampled_from([0, 0, 0, -3, 2, 10_000]),
        header_junk=st.sampled_from([b"", b"", b" 7", b" x"]),
    ),
    st.sampled_from([b"1 0 obj", b"endobj", b"/First 3", b"12345678901 0 obj", b"1  0\nobj/Type /Page"]),
    st.builds(page, WHITE, st.sampled_from([b">>", b"/Parent 1 0 R>>", b"s /Count 3>>", b"Label>>", b""])),
    st.sampled_from([b"/Type", b"/ObjStm", b"stream\n", b"endstream", b"/Types /Page", b"%%EOF\n"]),
    st.binary(max_size=40),
    st.builds(
        object_stream,
        st.lists(st.builds(page, WHITE), max_size=4).map(b" ".join),
        eol=st.sampled_from([b"\n", b"\r\n", b" ", b"\r"]),
        cut=st.sampled_from([0, 0, 1, 5]),
        damage=st.booleans(),
        level=st.sampled_from([-1, 0]),
    ),
)


@st.composite
def pdf_files(draw: st.DrawFn) -> bytes:
    head = draw(st.sampled_from([b"%PDF-1.7\n", b"%PDF-1.4\n", b"junk%PDF-2.0\n", b"", b"%PS-Adobe\n"]))
    return head + b"\n".join(draw(st.lists(pieces, max_size=8)))


@st.composite
def encoded(draw: st.DrawFn, file: bytes) -> str:
    text = base64.b64encode(file).decode()
    how = draw(
        st.sampled_from(
            ["plain", "url", "wrapped", "unpadded", "overpadded", "broken", "url-plain", "url-typed"]
        )
    )
    if how == "url":
        return "data:application/pdf;base64," + text
    if how == "url-typed":
        kind = draw(st.sampled_from(["", "APPLICATION/PDF", "text/plain", "application/pdf;name=a.pdf"]))
        return f"data:{kind};base64," + text
    if how == "url-plain":
        return "data:application/pdf," + text
    if how == "wrapped":
        return "\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    if how == "unpadded":
        return text.rstrip("=")
    if how == "overpadded":
        return text + "="
    if how == "broken":
        return text[:3] + "!" + text[3:]
    return text


def pdf_document(data: str) -> dict:
    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}}


def cost(block: dict) -> int:
    """What ``block`` adds to a user message, in o200k_base."""
    tok = Tokenizer("o200k_base")
    return tok.count_message({"role": "user", "content": [block]}) - tok.count_message(
        {"role": "user", "content": []}
    )


@st.composite
def attachments(draw: st.DrawFn) -> dict:
    data = draw(encoded(draw(pdf_files())))
    title = draw(st.sampled_from([None, "Q3 report", 7]))
    kind = draw(st.sampled_from(KINDS))
    if kind == "document":
        block = pdf_document(data)
        media = draw(st.sampled_from(["application/pdf", "Application/PDF", "text/plain", None, 5]))
        if media is None:
            del block["source"]["media_type"]
        else:
            block["source"]["media_type"] = media
    elif kind == "document-text":
        block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain"}}
    elif kind == "document-content":
        content = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
        block = {"type": "document", "source": {"type": "content", "content": content}}
    elif kind == "document-url":
        block = {"type": "document", "source": {"type": "url", "url": "https://example.invalid/a.pdf"}}
    elif kind == "file":
        block = {"type": "file", "file": {"file_data": data, "filename": "a.pdf"}}
    else:
        block = {"type": "input_file", "file_data": data, "filename": "a.pdf"}
    if title is not None and kind.startswith("document"):
        block["title"] = title
        block["context"] = "from the finance team"
    return block


@settings(max_examples=300, deadline=None)
@given(attachments())
def test_attachments_count_as_the_twin_counts_them(block):
    message = {"role": "user", "content": [{"type": "text", "text": "read this"}, block]}
    assert Tokenizer("o200k_base").count_message(message) == reference.Tokenizer("o200k_base").count_message(
        message
    )


@settings(max_examples=300, deadline=None)
@given(pdf_files())
def test_page_counts_agree_with_the_twin(file):
    block = {"type": "input_file", "file_data": base64.b64encode(file).decode()}
    rust = Tokenizer("o200k_base").count_message({"role": "user", "content": [block]})
    twin = reference.Tokenizer("o200k_base").count_message({"role": "user", "content": [block]})
    assert rust == twin
    pages = pdf_pages(file)
    if pages is not None:  # a PDF: its pages, not its text
        assert rust == 3 + Tokenizer("o200k_base").count("user") + pages * PDF_PAGE_TOKENS


def big_pdf(pages: int, filler: int) -> bytes:
    """A PDF of ``pages`` pages, each with ``filler`` bytes of (incompressible) content."""
    body = b"".join(
        b"%d 0 obj <</Type /Page /Contents %d 0 R>> endobj\n" % (2 * i, 2 * i + 1)
        + b"%d 0 obj <</Length %d>>\nstream\n" % (2 * i + 1, filler)
        + bytes((i * 7919 + j * 104729) % 251 for j in range(filler))
        + b"\nendstream endobj\n"
        for i in range(pages)
    )
    return b"%%PDF-1.7\n1000 0 obj <</Type /Pages /Count %d>> endobj\n" % pages + body + b"%%EOF\n"


def test_a_pdf_costs_its_pages_not_its_base64():
    file = big_pdf(12, 60_000)  # 720 KB: about 650,000 tokens as base64 text
    block = pdf_document(base64.b64encode(file).decode())
    assert cost(block) == 12 * PDF_PAGE_TOKENS
    block["title"] = "Q3 report"
    assert cost(block) == 12 * PDF_PAGE_TOKENS + Tokenizer("o200k_base").count("Q3 report")
    # Not a PDF (no header): its JSON text, as before, over- rather than under-counted.
    block["source"]["data"] = base64.b64encode(file[9:]).decode()
    assert cost(block) > 100_000


def test_a_session_takes_a_pdf_attachment(tmp_path):
    data = base64.b64encode(big_pdf(10, 60_000)).decode()
    document = pdf_document(data)
    with Session.open(tmp_path / "s", model="claude-sonnet-4-5", store=False, memory=False) as session:
        request = session.prepare("What does the report conclude?", attachments=[document])
        assert request.report.total < 10 * PDF_PAGE_TOKENS + 2_000
        assert request.report.total >= 10 * PDF_PAGE_TOKENS
        sent = request["messages"][-1]["content"]
        assert sent[-1]["source"]["data"] == data  # sent whole, as given


@pytest.mark.parametrize("inside_pages", [1, 3])
def test_object_streams_count_their_pages(inside_pages):
    inside = b" ".join(page() for _ in range(inside_pages))
    file = b"%PDF-1.7\n" + object_stream(inside) + b"9 0 obj " + page() + b" endobj\n"
    url = "data:application/pdf;base64," + base64.b64encode(file).decode()
    assert cost({"type": "input_file", "file_data": url}) == (inside_pages + 1) * PDF_PAGE_TOKENS


def test_a_page_rewritten_by_an_incremental_update_counts_once():
    """An update appends a new copy of each object it changes: the page
    object 2 rewritten twice, and then once more into an object stream, is
    still one page beside page 3; both tools count alike."""
    original = b"%PDF-1.7\n1 0 obj <</Type /Pages /Count 2>> endobj\n" + numbered(2, b"0", page(), True)
    original += b"\n" + numbered(3, b"0", page(), True) + b"\nxref\ntrailer\n%%EOF\n"
    updated = original + numbered(2, b"0", page(b" ", b" /Rotate 90>>"), True) + b"\n%%EOF\n"
    updated += numbered(2, b"0", page(b" ", b" /Rotate 180>>"), True) + b"\n%%EOF\n"
    for file, pages in [(original, 2), (updated, 2), (updated + numbered_stream([2, 4]), 3)]:
        assert pdf_pages(file) == pages
        assert (
            cost({"type": "input_file", "file_data": base64.b64encode(file).decode()})
            == pages * PDF_PAGE_TOKENS
        )


def test_a_page_whose_object_is_not_known_counts_on_its_own():
    closed = b"%PDF-1.7\n5 0 obj <<>> endobj " + page() + b" " + page()  # after endobj: in no object
    assert pdf_pages(closed) == 2
    # An object stream's pairs that do not read (an odd count, a word) give no numbers.
    for junk in (b" 7", b" x"):
        assert pdf_pages(b"%PDF-1.7\n" + numbered_stream([4, 4], header_junk=junk)) == 2
    assert pdf_pages(b"%PDF-1.7\n" + numbered_stream([4, 4])) == 1


def test_many_entries_in_one_object_are_read_in_one_pass():
    # 200,000 entries after one header: each looks back for its header and
    # an endobj through indexes, not by scanning the bytes between (which
    # would take hours).
    file = b"%PDF-1.7\n1 0 obj <<" + b"/Type/Page " * 200_000 + b">> endobj"
    block = {"type": "input_file", "file_data": base64.b64encode(file).decode()}
    assert pdf_pages(file) == 1
    assert cost(block) == PDF_PAGE_TOKENS


def test_a_count_past_a_u32_is_the_same_from_the_cache():
    # 1,500,000 pages from a 30 KB object stream: 4.5 billion tokens, more
    # than a cached count holds; the cache keeps the pages instead.
    stream = object_stream(b"/Type/Page" * 1_500_000)
    block = {"type": "input_file", "file_data": base64.b64encode(b"%PDF-1.7\n" + stream).decode()}
    assert cost(block) == cost(block) == 1_500_000 * PDF_PAGE_TOKENS


def test_a_stream_that_cannot_be_read_leaves_the_pages_unknown():
    page_tree = b" ".join(page() for _ in range(20))
    unreadable = {
        "encrypted": object_stream(page_tree)[:60] + bytes(range(40)) + b"\nendstream\n",
        "past the limit": object_stream(b"\0" * (MAX_INFLATED_BYTES + 1)),
    }
    for why, stream in unreadable.items():
        # One page outside the stream (an incremental update's, say): not
        # taken for the whole file's pages.
        file = b"%PDF-1.7\n" + stream + b"3 0 obj " + page() + b" endobj\n"
        block = {"type": "input_file", "file_data": base64.b64encode(file).decode()}
        # Counted as its text, as a file with no page found is.
        assert cost(block) == Tokenizer("o200k_base").count(json.dumps(block, separators=(",", ":"))), why


def test_a_file_of_another_type_is_not_read_as_a_pdf():
    text = base64.b64encode(b"%PDF- is how a PDF starts; /Type /Page names a page.").decode()
    assert cost({"type": "input_file", "file_data": "data:application/pdf;base64," + text}) == PDF_PAGE_TOKENS
    assert cost({"type": "input_file", "file_data": "data:text/x-python;base64," + text}) > 10
    assert cost({"type": "input_file", "file_data": "data:text/x-python;base64," + text}) < PDF_PAGE_TOKENS
    document = pdf_document(text)
    document["source"]["media_type"] = "text/plain"
    assert cost(document) < PDF_PAGE_TOKENS


def test_a_file_parts_bad_filename_is_named_where_it_is():
    data = base64.b64encode(big_pdf(1, 10)).decode()
    message = {"role": "user", "content": [{"type": "file", "file": {"file_data": data, "filename": {1, 2}}}]}
    with pytest.raises(InvalidTypeError, match=r"content\[0\]\.file\.filename"):
        Tokenizer("o200k_base").count_message(message)
