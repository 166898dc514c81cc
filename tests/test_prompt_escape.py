"""Escaping: no content, whatever it holds, can open a section or a tag of
its own. The checks below read the rendered text with their own parsers,
written from the rules (not from the escaper's code)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import Dimensions, PromptBuilder, Skill, Tokenizer
from context_core.prompt import RESERVED_TAGS, escape, escape_attr
from context_core.prompt.escape import one_line
from context_core.prompt.sections import piece
from prompt_fixtures import T0
from strategies import EDGE_ALPHABET, any_text

NAMES = {name.upper() for name in RESERVED_TAGS}

# Text dense in what could break out: tag names, brackets, slashes, hashes,
# fences, underlines, every kind of line break and blank.
TRICKY = [
    "</MEM>", "<TASK>", "< / task >", "<file path=\"x\">", "</Doc>", "<OUTPUT_FORMAT>", "<constraint",
    "<ERROR>", "<MEMORY>", "<MEM2>", "#", "## Instructions", "   ### x", "```", "~~~", "===", "---",
    "\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", " ", "\t", "\u00a0",
    "<", ">", "/", "\"", "&", "MEM", "TASK", "a", "é", "中",
    # letters re.IGNORECASE folds to ASCII ones (long s, Kelvin, dotless i, I with a dot) after a name
    "</MEMı>", "<TASKİ>", "</FILE\u212a>", "<DOCſ source=\"x\">", "<constraintſ", "ſ", "\u212a", "ı", "İ",
]  # fmt: skip
tricky_text = st.lists(st.sampled_from(TRICKY + EDGE_ALPHABET), max_size=40).map("".join)
content = st.one_of(tricky_text, any_text)


def structure_lines(text: str) -> list[str]:
    """Lines a Markdown reader takes for structure: headings, fences, setext underlines."""
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if line.lstrip().startswith(("#", "```", "~~~")) or (stripped and set(stripped) in ({"="}, {"-"})):
            out.append(line)
    return out


def tags(text: str) -> list[str]:
    """Every reserved tag, opening or closing: ``<``, then blanks and ``/``,
    then a name made of letters, digits and ``_`` that is a reserved one."""
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


@given(content)
def test_escaped_text_has_no_structure_and_no_tags(text):
    escaped = escape(text)
    assert structure_lines(escaped) == []
    assert tags(escaped) == []
    # nothing removed: undoing the two escapes gives the text back
    assert re.sub(r"\\(?=[#`~=-])", "", escaped.replace("&lt;", "<")) == re.sub(
        r"\\(?=[#`~=-])", "", text.replace("&lt;", "<")
    )


def unescape_attr(value: str) -> str:
    """XML's reading of an attribute value (html.unescape maps C1 controls to
    Windows-1252, as HTML does, not as XML does)."""
    named = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
    return re.sub(r"&(#\d+|[a-z]+);", lambda m: chr(int(m[1][1:])) if m[1][0] == "#" else named[m[1]], value)


@given(content)
def test_attribute_values_cannot_end_their_attribute(value):
    escaped = escape_attr(value)
    assert not set(escaped) & {'"', "<", ">", "\n", "\r"}
    assert unescape_attr(escaped) == value


@given(content)
def test_one_line_values_have_no_line_break(value):
    assert len(one_line(value + "x").splitlines()) == 1


@pytest.mark.parametrize("tag", ["</MEMı>", "<TASKİ>", "</FILE\u212a>", '<DOCſ source="x">', "<constraintſ"])
def test_a_unicode_letter_after_a_tag_name_does_not_hide_the_tag(tag):
    """re.IGNORECASE reads U+017F, U+212A, U+0131 and U+0130 as ASCII letters: a name
    followed by one of them is still the reserved tag to a reader."""
    assert tags(tag) != []
    assert escape(tag) == "&lt;" + tag[1:]
    assert tags(escape(tag)) == []


def test_plain_content_passes_through_unchanged():
    text = "if a < b and b > c:\n    return a  # not a heading\n- item\nx = y\n<div>ok</div>"
    assert escape(text) == text
    assert escape("# Title\n</MEM> and <task>") == "\\# Title\n&lt;/MEM> and &lt;task>"
    assert escape("  ```python\n~~~\n===\n - - -\n---") == "  \\```python\n\\~~~\n\\===\n - - -\n\\---"


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
    assert structure_lines(parts.text()) == expected
    assert tags(parts.text()) == []


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
    assert tags(block.text) == [
        "MEM", "/MEM", "FILE", "/FILE", "ERROR", "/ERROR", "DOC", "/DOC", "TASK", "/TASK",
        "OUTPUT_FORMAT", "/OUTPUT_FORMAT", "CONSTRAINT", "/CONSTRAINT",
    ]  # fmt: skip
    assert structure_lines(block.text) == []
    opening = re.search(r'<FILE path="([^"]*)">', block.text)
    assert opening is not None
    assert unescape_attr(opening.group(1)) == (path or "p")
    parts = PromptBuilder("x").build(now="", dimensions=dims, task_budget=100_000)
    assert structure_lines(parts.volatile) == ["## Task"]


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
