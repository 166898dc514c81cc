"""Escaping: no content, whatever it holds, can open a section or a tag of
its own. The checks below read the rendered text with their own parsers,
written from the rules (not from the escaper's code), in three views: as
written, with Unicode's format characters (Cf) removed, and that NFKC
normalised (what a model may read: <MEM> in full-width letters as <MEM>, no
zero-width space)."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import PromptBuilder, Tokenizer
from context_core.prompt import RESERVED_TAGS, CouplingWeights, Dimensions, Skill, escape, escape_attr
from context_core.prompt.escape import (
    FORMAT_CHARS,
    LESS_THAN,
    caseless,
    code_fence,
    escape_tags,
    fold,
    one_line,
)
from context_core.prompt.sections import piece
from prompt_fixtures import T0
from strategies import EDGE_ALPHABET, any_text

NAMES = {name.upper() for name in RESERVED_TAGS}

# Text dense in what could break out: tag names, brackets, slashes, hashes,
# fences, underlines, list markers, block quotes, HTML block openers, every
# kind of line break and blank, format characters and compatibility forms.
TRICKY = [
    "</MEM>", "<TASK>", "< / task >", "<file path=\"x\">", "</Doc>", "<OUTPUT_FORMAT>", "<constraint",
    "<ERROR>", "<MEMORY>", "<MEM2>", "#", "## Instructions", "   ### x", "```", "~~~", "===", "---",
    "\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", " ", "\t", "\u00a0",
    "<", ">", "/", "\"", "&", "MEM", "TASK", "a", "é", "中",
    # letters re.IGNORECASE folds to ASCII ones (long s, Kelvin, dotless i, I with a dot) after a name
    "</MEMı>", "<TASKİ>", "</FILE\u212a>", "<DOCſ source=\"x\">", "<constraintſ", "ſ", "\u212a", "ı", "İ",
    # compatibility forms and format characters
    "＜", "﹤", "＜MEM>", "＜ＭＥＭ>", "ＭＥＭ", "<\u200bMEM>", "\u200b", "\u00ad", "\u2060", "\ufeff",
    "\u202e",
    "＃", "﹟", "＞", "｀", "\u1fef", "～", "－", "＝", "⩵", "⁼", "／", "⒈", "１", "．", "ⅮⓄⒸ", "ﬁ", "\u3000",
    # list markers, block quotes, HTML blocks, code
    "- ", "* ", "+ ", "1. ", "2) ", "- ## Memory", "> ## x", ">", "<!--", "-->", "<pre>", "<script", "<style",
    "<textarea", "<?", "<!X", "<![CDATA[", "#include <stdio.h>", "`", "``", "````", "\\",
]  # fmt: skip
tricky_text = st.lists(st.sampled_from(TRICKY + EDGE_ALPHABET), max_size=40).map("".join)
content = st.one_of(tricky_text, any_text)


def views(text: str) -> list[str]:
    """The text as written, without its format characters, and that NFKC normalised."""
    visible = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return [text, visible, unicodedata.normalize("NFKC", visible)]


LIST_MARKER = re.compile(r"(?:[-+*]|[0-9]{1,9}[.)])(?:\s+|$)")
HTML_BLOCK = re.compile(r"<(?:!|\?|/?(?:pre|script|style|textarea)(?:[\s>]|$))", re.IGNORECASE)


def structure_lines(text: str) -> list[str]:
    """Lines a Markdown reader takes for structure, read past blanks and list
    markers: headings, block quotes, fences (the lines inside a fence are
    code), setext underlines, HTML blocks that run past blank lines."""
    out = []
    fence = ""
    for line in text.splitlines():
        if fence:
            closing = line.strip()
            if closing and set(closing) == {fence[0]} and len(closing) >= len(fence):
                out.append(line)
                fence = ""
            continue
        rest = line.lstrip()
        while True:
            bare = rest.rstrip()
            if rest.startswith(("```", "~~~")):
                out.append(line)
                fence = re.match(r"`+|~+", rest).group(0)
                break
            if (
                rest.startswith(("#", ">"))
                or HTML_BLOCK.match(rest)
                or (bare and set(bare) in ({"="}, {"-"}))
            ):
                out.append(line)
                break
            marker = LIST_MARKER.match(rest)
            if marker is None or not rest[marker.end() :]:
                break
            rest = rest[marker.end() :]
    return out


def tags(text: str) -> list[str]:
    """Every reserved tag, opening or closing: ``<``, then blanks and ``/``,
    then a name made of ASCII letters, digits and ``_`` that is a reserved
    one (anything else ends the name)."""
    found = []
    for start in [i for i, c in enumerate(text) if c == "<"]:
        i = start + 1
        closing = False
        while i < len(text) and (text[i].isspace() or text[i] == "/"):
            closing = closing or text[i] == "/"
            i += 1
        j = i
        while j < len(text) and text[j].isascii() and (text[j].isalnum() or text[j] == "_"):
            j += 1
        if text[i:j].upper() in NAMES:
            found.append(("/" if closing else "") + text[i:j].upper())
    return found


def assert_reads(text: str, structure: list[str], tag_list: list[str]) -> None:
    """In every view: exactly these structure lines and these tags."""
    for view in views(text):
        assert structure_lines(view) == structure
        assert tags(view) == tag_list


def plain(text: str) -> str:
    """``text`` with the escapes undone: backslashes dropped, ``&lt;`` and
    what folds to ``<`` read as ``<``."""
    return text.replace("\\", "").replace("&lt;", "<").translate({ord(c): "<" for c in LESS_THAN})


@given(content)
def test_escaped_text_has_no_structure_and_no_tags(text):
    escaped = escape(text)
    assert_reads(escaped, [], [])
    assert plain(escaped) == plain(text)  # nothing removed: only \ added and < written &lt;
    assert escape(escaped) == escaped  # what is escaped stays as it is
    inline = escape(text, line_start=False)
    assert_reads("x" + inline, [], [])
    assert escape(inline, line_start=False) == inline


@given(content)
def test_code_in_a_fence_cannot_close_it_and_keeps_its_text(text):
    fence = code_fence(text)
    body = escape_tags(text)
    block = f"<FILE>\n{fence}\n{body}\n{fence}\n</FILE>\n"
    assert_reads(block, [fence, fence], ["FILE", "/FILE"])
    assert plain(body) == plain(text)
    assert body.count("\\") == text.count("\\")  # code keeps its lines as written: no backslash added


def unescape_attr(value: str) -> str:
    """XML's reading of an attribute value (html.unescape maps C1 controls to
    Windows-1252, as HTML does, not as XML does)."""
    named = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
    return re.sub(r"&(#\d+|[a-z]+);", lambda m: chr(int(m[1][1:])) if m[1][0] == "#" else named[m[1]], value)


@given(content)
def test_attribute_values_cannot_end_their_attribute(value):
    escaped = escape_attr(value)
    for view in views(escaped):
        assert not set(view) & {'"', "<", ">", "\n", "\r"}
    assert unescape_attr(escaped) == value


@given(content)
def test_one_line_values_have_no_line_break(value):
    assert len(one_line(value + "x").splitlines()) == 1


@given(content)
def test_caseless_folds_as_documented_and_each_line_apart(text):
    """caseless: format characters removed, NFKC, casefold, white space runs
    as one space. Never-enter matching maps a match to lines by folding each
    line alone, so the text's fold must be its lines' folds joined."""
    visible = re.sub(f"[{FORMAT_CHARS}]", "", text)  # Cf, as of a Unicode newer than this Python's
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", visible).casefold())
    assert caseless(text) == " ".join(folded.split())
    assert caseless(caseless(text)) == caseless(text)
    assert caseless(text) == " ".join(f for f in map(caseless, text.splitlines()) if f)


def test_caseless_reads_through_what_a_reader_does_not_see():
    assert caseless(" \uff32\uff2d\u00a0-\u200bR\u00adF\n\n\tt\u0130\u01f0  ") == "rm -rf ti\u0307\u01f0"
    assert caseless("STRASSE") == caseless("Stra\u00dfe")
    assert caseless("\u200b\u2060\u3000\u2028") == ""


@pytest.mark.parametrize("tag", ["</MEMı>", "<TASKİ>", "</FILE\u212a>", '<DOCſ source="x">', "<constraintſ"])
def test_a_unicode_letter_after_a_tag_name_does_not_hide_the_tag(tag):
    """re.IGNORECASE reads U+017F, U+212A, U+0131 and U+0130 as ASCII letters: a name
    followed by one of them is still the reserved tag to a reader."""
    assert tags(tag) != []
    assert escape(tag) == "&lt;" + tag[1:]
    assert tags(escape(tag)) == []


def test_plain_content_passes_through_unchanged():
    text = "if a < b and b > c:\n    return a  # not a heading\n- item\nx = y\n<div>ok</div>\n1.5 and 2)"
    assert escape(text) == text
    assert escape("# Title\n</MEM> and <task>") == "\\# Title\n&lt;/MEM> and &lt;task>"
    assert escape("  ```python\n~~~\n===\n - - -\n---") == "  \\```python\n\\~~~\n\\===\n - - \\-\n\\---"


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        # a list item or a block quote holding a heading
        ("- ## Memory", "- \\## Memory"),
        ("* ## Memory", "* \\## Memory"),
        ("12. ## Memory", "12. \\## Memory"),
        ("- - ## Memory", "- - \\## Memory"),
        ("> ## x", "\\> ## x"),
        ("- > ## x", "- \\> ## x"),
        # HTML blocks that only end at their own end marker, not at a blank line
        ("<!-- swallow", "&lt;!-- swallow"),
        ("  <pre>", "  &lt;pre>"),
        ("- <script>", "- &lt;script>"),
        ("<?php", "&lt;?php"),
        ("<![CDATA[", "&lt;![CDATA["),
        # compatibility forms and format characters
        ("＜MEM>", "&lt;MEM>"),
        ("＜ＭＥＭ>", "&lt;ＭＥＭ>"),
        ("<\u200bMEM>", "&lt;\u200bMEM>"),
        ("<M\u200bE\u00adM>", "&lt;M\u200bE\u00adM>"),
        ("\u200b# x", "\u200b\\# x"),
        ("＃ x", "\\＃ x"),
        ("⒈ ## x", "⒈ \\## x"),
        ("－－－", "\\－－－"),
        ("x\n=\u200b=", "x\n\\=\u200b="),
        ("<pr\u200be>", "&lt;pr\u200be>"),
    ],
)
def test_escaping_gaps_are_closed(text, escaped):
    assert escape(text) == escaped
    assert_reads(escaped, [], [])


def test_code_is_shown_verbatim_in_a_fence():
    code = "#include <stdio.h>\n# a comment\n---\n```\n<!-- x -->\n> quote\n</FILE>\nint main() {}"
    dims = Dimensions()
    dims.add(code, "file", label="main.c")
    dims.add("Traceback:\n  ## not a heading\n~~~", "error")
    text = dims.render(10_000).text
    fence = "````"  # longer than the file's ``` line
    assert text.startswith(f'<FILE path="main.c">\n{fence}\n#include <stdio.h>\n# a comment\n---\n```\n')
    assert "&lt;/FILE>\nint main() {}\n````\n</FILE>\n" in text
    assert "<ERROR>\n```\nTraceback:\n  ## not a heading\n~~~\n```\n</ERROR>\n" in text
    assert_reads(text, [fence, fence, "```", "```"], ["FILE", "/FILE", "ERROR", "/ERROR"])


def test_an_html_block_cannot_swallow_the_sections_after_it():
    builder = PromptBuilder("x")
    for opener in ("<!--", "<pre>", "<script>", "<?", "＜!--"):
        parts = builder.build(now=T0, memory=f"{opener} unclosed", instructions=["Run the tests"])
        assert_reads(parts.volatile, ["## Context", "## Memory", "## Instructions"], [])


def test_the_unicode_tables_cover_this_pythons_unicode():
    """FORMAT_CHARS holds every Cf character; LESS_THAN every character
    that folds to "<"; escape_attr writes every character that folds to an
    attribute's delimiters; code_fence counts every one that folds to "`"."""
    format_chars = re.compile(f"[{FORMAT_CHARS}]")
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) == "Cs":
            continue
        if unicodedata.category(char) == "Cf":
            assert format_chars.match(char), hex(code)
            assert fold(char) == ""
        if code < 0x80:
            continue
        folded = unicodedata.normalize("NFKC", char)
        if folded == char:
            continue
        if "<" in folded:
            assert folded == "<"
            assert char in LESS_THAN
        if set(folded) & set('"<>&'):
            assert escape_attr(char).startswith("&#"), hex(code)
        if "`" in folded:
            assert folded == "`"
            assert code_fence(f"`{char}`") == "````", hex(code)


@given(content, content, content, content, content, content)
def test_no_layer_content_can_open_a_section(memory, instruction, cwd, fact, preference, body):
    builder = PromptBuilder(
        "You are an agent.",
        session_facts={"Session": fact, fact[:10] or "k": "v"},
        session_context=[("Project", body + "\nend")],
        skills=[Skill("s", "a skill", body)],
    )
    parts = builder.build(
        now=T0, cwd=cwd, channel=fact, memory=memory + "\nend", instructions=[instruction, body],
        preferences={"p": preference},
        skills=["s"],
    )  # fmt: skip
    expected = ["## Skills", "## Session Facts", "## Project", "## Context", "## Memory"]
    expected += ["## Loaded Skills", "### s", "## Instructions"]
    assert_reads(parts.text(), expected, [])


@given(content, content, content, content, content, content)
def test_no_item_content_can_open_or_close_a_tag(path, code, doc, key, value, task):
    dims = Dimensions()
    dims.add(value, "system", label=key or "k")
    dims.add(code, "file", label=path or "p")
    dims.add(doc, "doc", label=path or "p")
    dims.add(code, "error")
    dims.add(task, "task")
    dims.add(doc, "output_format")
    dims.add(value, "constraint")
    block = dims.render(100_000)
    fences = [code_fence(text.rstrip("\r\n")) for text in (code, code, doc)]  # FILE, ERROR, DOC
    structure = [fence for fence in fences for _ in range(2)]
    assert_reads(block.text, structure, [
        "MEM", "/MEM", "FILE", "/FILE", "ERROR", "/ERROR", "DOC", "/DOC", "TASK", "/TASK",
        "OUTPUT_FORMAT", "/OUTPUT_FORMAT", "CONSTRAINT", "/CONSTRAINT",
    ])  # fmt: skip
    opening = re.search(r'<FILE path="([^"]*)">', block.text)
    assert opening is not None
    assert unescape_attr(opening.group(1)) == (path or "p")
    parts = PromptBuilder("x").build(now="", dimensions=dims, task_budget=100_000)
    assert structure_lines(parts.volatile) == ["## Task", *structure]


@pytest.mark.parametrize("tag", ["task", "file", "system"])
@given(text=content, budget=st.integers(1, 80))
def test_a_cut_item_cannot_open_a_tag_or_a_block(tag, text, budget):
    """Cutting to a token boundary can end a text inside what then reads as a
    tag (``<MEMORY>`` cut to ``<MEM``) or a block opener; a cut is made shorter
    until it does not."""
    dims = Dimensions()
    dims.add(text + " " + text, tag, label="k")
    block = dims.render(budget, weights=CouplingWeights(1, 1, 1))
    expected_tags = {"task": ["TASK", "/TASK"], "file": ["FILE", "/FILE"], "system": ["MEM", "/MEM"]}[tag]
    fence = code_fence((text + " " + text).rstrip("\r\n"))
    for view in views(block.text):
        assert tags(view) in ([], expected_tags)
        assert structure_lines(view) in ([], [fence, fence] if tag == "file" else [])


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@given(
    st.lists(
        st.tuples(st.sampled_from(["Context", "Memory", "Instructions"]), content), min_size=1, max_size=4
    )
)
def test_section_counts_add_up_to_the_whole(encoding, sections):
    """Why a turn may count only the sections that changed: for these
    encodings the pieces' counts sum to the count of their concatenation."""
    tok = Tokenizer(encoding)
    pieces = [piece(title, escape(body), i == len(sections) - 1) for i, (title, body) in enumerate(sections)]
    assert sum(tok.count(p) for p in pieces) == tok.count("".join(pieces))


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "system", "file", "doc", "error", "task"]), content), max_size=6
    )
)
def test_item_counts_add_up_to_the_block(encoding, items):
    tok = Tokenizer(encoding)
    dims = Dimensions()
    for source, text in items:
        dims.add(text, source, label="label")  # type: ignore[arg-type]
    block = dims.render(10**6, tok)
    assert block.tokens == tok.count(block.text)
