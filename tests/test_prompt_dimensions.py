"""The Memory / Context / Prompt dimensions: the coupling matrix, the
task-complexity score, routing by source, fitting by exact counts."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strategies  # noqa: F401  (the hypothesis profile)
from context_core import InvalidInputError, PromptBuilder, Tokenizer
from context_core.prompt import (
    Allocation,
    CouplingWeights,
    Dimensions,
    Entry,
    coupling_weights,
    split_budget,
    task_complexity,
)
from prompt_fixtures import T0, prose

# -- the coupling matrix --------------------------------------------------------------------------


def test_a_worked_example_of_the_split():
    # 4000 tokens, M=0.35, C=0.45, P=0.2 -> 1400 / 1800 / 800
    assert split_budget(4000, CouplingWeights(0.35, 0.45, 0.2)) == Allocation(1400, 1800, 800)


def test_the_base_weights_and_each_rule():
    assert coupling_weights(0, 0, False, False) == CouplingWeights(0.40, 0.35, 0.25, ())
    assert split_budget(4000, coupling_weights(0, 0, False, False)) == Allocation(1600, 1400, 1000)
    assert coupling_weights(5, 0, False, False).memory == 0.40  # 5 memories are free
    assert coupling_weights(6, 0, False, False).memory == 0.35
    assert coupling_weights(8, 0, False, False).memory == 0.25
    assert coupling_weights(0, 3, False, False).context == 0.35
    assert coupling_weights(0, 4, False, False).context == 0.45
    assert coupling_weights(0, 0, True, False).context == 0.45
    assert coupling_weights(0, 0, False, True).prompt == 0.35
    assert coupling_weights(0, 0, False, False, complexity=5).memory == 0.30  # 0.40 - 0.02 * 5
    assert coupling_weights(20, 0, False, False, complexity=10).memory == 0.05  # floored
    weights = coupling_weights(6, 4, False, True)
    assert weights.reasons == (
        "memory -0.05: 6 <MEM> (> 5)",
        "context 0.45: 4 files (> 3)",
        "prompt 0.35: the task says must/forbid",
    )


def test_weights_that_do_not_sum_to_one_are_normalised():
    # 6 memories, 4 files, a must/forbid task: 0.35 : 0.45 : 0.35, which sum to 1.15
    weights = coupling_weights(6, 4, False, True)
    assert (weights.memory, weights.context, weights.prompt) == (0.35, 0.45, 0.35)
    assert weights.normalized() == pytest.approx((0.35 / 1.15, 0.45 / 1.15, 0.35 / 1.15))
    assert sum(weights.normalized()) == pytest.approx(1)
    # 4000 x those: 1217.39, 1565.22, 1217.39; floors 1217 + 1565 + 1217 = 3999, and the
    # token left goes to the largest remainder (.391: memory and prompt tie, memory first)
    allocation = split_budget(4000, weights)
    assert allocation == Allocation(1218, 1565, 1217)
    assert allocation.total == 4000


@given(
    st.integers(0, 10**6),
    st.tuples(*[st.integers(0, 1000)] * 3).filter(lambda w: sum(w) > 0),
)
def test_split_sums_to_the_budget_and_each_share_is_within_one_of_its_quota(budget, milli):
    weights = CouplingWeights(*(m / 1000 for m in milli))
    allocation = split_budget(budget, weights)
    assert allocation.total == budget
    for share, m in zip(allocation, milli, strict=True):
        quota = Fraction(budget * m, sum(milli))
        assert quota - 1 < share < quota + 1


def test_the_complexity_score():
    assert task_complexity(0, 0, 0) == 0
    assert task_complexity(100, 0, 0) == 2  # one point per 50 task tokens
    assert task_complexity(1000, 0, 0) == 4  # at most 4
    assert task_complexity(0, 2, 0) == 2  # one a file, at most 3
    assert task_complexity(0, 9, 0) == 3
    assert task_complexity(0, 0, 15) == 1.5  # one per 10 error lines, at most 3
    assert task_complexity(1000, 9, 1000) == 10
    assert task_complexity(25, 1, 5) == 2  # 0.5 + 1 + 0.5


def test_the_complexity_of_a_task_block_shifts_memory_down():
    tok = Tokenizer()
    dims = Dimensions()
    task = prose(120, 5)
    dims.add(task, "task")
    dims.add("a.py contents", "file", label="a.py")
    dims.add("\n".join(f"line {i}" for i in range(20)), "error")
    expected = min(4, tok.count(task) / 50) + 1 + 2
    assert dims.complexity(tok) == round(expected, 2)
    block = dims.render(4000, tok)
    assert block.complexity == dims.complexity(tok)
    assert block.weights.memory == pytest.approx(0.40 - 0.02 * block.complexity)
    assert block.weights.context == 0.45  # an error


def test_invalid_weights_and_budgets_are_refused():
    with pytest.raises(InvalidInputError):
        CouplingWeights(0, 0, 0)
    with pytest.raises(InvalidInputError):
        CouplingWeights(-1, 1, 1)
    with pytest.raises(InvalidInputError):
        split_budget(-1, CouplingWeights(1, 1, 1))
    with pytest.raises(InvalidInputError):
        coupling_weights(0, 0, False, False, complexity=11)


# -- routing by source ---------------------------------------------------------------------------


def test_routing_by_source():
    dims = Dimensions()
    must = dims.add("Field names must use snake_case", "user")
    plain = dims.add("I had a look at the logs yesterday", "user")
    forbid = dims.add("禁止使用表格", "user", label="tables")
    upload = dims.add("You must always call init() first.", "file", label="README.md")
    doc = dims.add("Never use @RequestMapping.", "doc", label="spring.io")
    default = dims.add("snake_case", "system", label="default_naming")
    error = dims.add("Traceback: boom", "error")
    assert (must.tag, must.dimension, must.weight, must.label) == ("MEM", "memory", 3.0, "constraint")
    assert (plain.tag, plain.dimension, plain.label) == ("DOC", "context", "user")
    assert (forbid.tag, forbid.label) == ("MEM", "tables")
    assert (upload.tag, upload.dimension) == ("FILE", "context")  # files are never Memory
    assert (doc.tag, doc.dimension) == ("DOC", "context")  # nor documents
    assert (default.tag, default.weight) == ("MEM", 5.0)  # system defaults are anchors
    assert error.tag == "ERROR"
    text = dims.render(4000).text
    assert text.index("<MEM>default_naming: snake_case</MEM>") < text.index("<MEM>constraint: Field names")
    with pytest.raises(InvalidInputError, match="needs a label"):
        dims.add("x", "file")
    with pytest.raises(InvalidInputError, match="unknown source"):
        dims.add("x", "email")  # type: ignore[arg-type]


def parse(text: str) -> list[tuple[str, str]]:
    """The block's items as (tag, first line), in order."""
    return [(m.group(1), m.group(0)) for m in re.finditer(r"^<([A-Z_]+)[ >].*$", text, re.M)]


def test_dimensions_render_in_order_memory_context_prompt():
    dims = Dimensions()
    dims.add("Return JSON", "output_format")
    dims.add("Add an idempotency check", "task")
    dims.add("Keep the public API", "constraint")
    dims.add("spring docs", "doc", label="spring.io")
    dims.add("stack trace", "error")
    dims.add("class A {}", "file", label="A.java")
    dims.add("Use snake_case, always", "user")
    dims.add("java17", "system", label="lang")
    block = dims.render(4000)
    assert [tag for tag, _ in parse(block.text)] == [
        "MEM", "MEM", "FILE", "ERROR", "DOC", "TASK", "OUTPUT_FORMAT", "CONSTRAINT",
    ]  # fmt: skip
    assert block.text.startswith("<MEM>lang: java17</MEM>\n<MEM>constraint: Use snake_case, always</MEM>\n")
    assert '<FILE path="A.java">\n```\nclass A {}\n```\n</FILE>\n' in block.text
    assert block.text.endswith(
        "<TASK>Add an idempotency check</TASK>\n"
        "<OUTPUT_FORMAT>Return JSON</OUTPUT_FORMAT>\n"
        "<CONSTRAINT>Keep the public API</CONSTRAINT>\n"
    )
    assert block.truncated == ()


# -- fitting by exact counts ------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base", "r50k_base"])
def test_each_dimension_fits_its_share_by_exact_count(encoding):
    tok = Tokenizer(encoding)
    dims = Dimensions()
    for i in range(8):
        dims.add(f"fact {i}: " + prose(20, i), "system" if i < 2 else "user", label=f"k{i}")
    dims.add(prose(3000, 1), "file", label="big.py")
    dims.add(prose(200, 2), "doc", label="notes")
    dims.add("must add a retry", "task")
    block = dims.render(1000, tok)
    assert block.allocation.total == 1000
    texts = split_dimensions(block.text)
    for name in ("memory", "context", "prompt"):
        used = getattr(block.used, name)
        assert used == tok.count(texts[name]) <= getattr(block.allocation, name)
    assert block.tokens == tok.count(block.text) <= 1000
    by_item = {t.item: t for t in block.truncated}
    cut = by_item['FILE path="big.py"']
    file_item = next(i for i in re_items(block.text) if i.startswith('<FILE path="big.py">'))
    assert cut.layer == "task.context"
    assert cut.tokens == tok.count(f'<FILE path="big.py">\n```\n{prose(3000, 1)}\n```\n</FILE>\n')
    assert cut.kept == tok.count(file_item) > 0
    assert "…[truncated " in file_item


def split_dimensions(text: str) -> dict[str, str]:
    items = re_items(text)
    groups = {"memory": "", "context": "", "prompt": ""}
    for item in items:
        tag = re.match(r"<([A-Z_]+)", item).group(1)
        name = {"MEM": "memory", "FILE": "context", "DOC": "context", "ERROR": "context"}.get(tag, "prompt")
        groups[name] += item
    assert "".join(groups.values()) == text
    return groups


def re_items(text: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"<([A-Z_]+)(?: [^>]*)?>.*?</\1>\n", text, re.S)]


def test_a_memory_that_does_not_fit_is_left_out_whole_and_reported():
    tok = Tokenizer()
    dims = Dimensions()
    dims.add("short", "system", label="a")
    long = dims.add(prose(400, 3) + " must hold", "user", label="b")
    dims.add("tiny must", "user", label="c")
    block = dims.render(600, tok, weights=CouplingWeights(0.2, 0.4, 0.4))
    assert block.allocation.memory == 120
    assert "<MEM>a: short</MEM>" in block.text
    assert "<MEM>c: tiny must</MEM>" in block.text  # a later, smaller one still fits
    assert prose(5, 3) not in block.text
    (cut,) = block.truncated
    assert (cut.layer, cut.item, cut.kept, cut.dropped) == ("task.memory", "MEM b", 0, True)
    assert cut.tokens == tok.count(long.rendered)


def test_the_task_is_cut_rather_than_left_out():
    tok = Tokenizer()
    dims = Dimensions()
    dims.add(prose(500, 4), "task")
    block = dims.render(200, tok)
    (cut,) = block.truncated
    assert cut.item == "TASK"
    assert 0 < cut.kept == block.used.prompt <= block.allocation.prompt
    assert block.text.startswith("<TASK>")
    assert block.text.endswith("</TASK>\n")


@pytest.mark.parametrize("tag", ["task", "file"])
def test_a_cut_item_keeps_min_kept_tokens_of_content_or_is_left_out(tag):
    """The marker is not content: an item cut to its marker alone (or to fewer
    than MIN_KEPT tokens of content) is left out, reported kept=0."""
    from context_core.prompt.dimensions import MARKER, MIN_KEPT

    tok = Tokenizer()
    text = prose(500, 4)
    marker = re.escape(MARKER).replace(re.escape("{dropped}"), r"\d+")
    seen = set()
    for budget in range(1, 60):
        dims = Dimensions()
        entry = dims.add(text, tag, label="a.py" if tag == "file" else None)
        weights = CouplingWeights(0, 1, 0) if tag == "file" else CouplingWeights(0, 0, 1)
        block = dims.render(budget, tok, weights=weights)
        (cut,) = block.truncated
        opening, _, closing = entry.parts
        if cut.dropped:
            assert block.text == ""
            seen.add("dropped")
            continue
        seen.add("kept")
        assert block.text.startswith(opening)
        assert block.text.endswith(closing)
        content = re.sub(marker + r"\Z", "", block.text[len(opening) : -len(closing)])
        assert content != block.text[len(opening) : -len(closing)]  # the marker was there
        assert tok.count(content) >= MIN_KEPT
        assert cut.kept == tok.count(block.text)
    assert seen == {"dropped", "kept"}


def test_the_task_block_enters_the_volatile_part():
    builder = PromptBuilder("x")
    dims = Dimensions()
    dims.add("Add an idempotency check", "task")
    parts = builder.build(now=T0, dimensions=dims, task_budget=1000)
    assert parts.volatile.endswith("## Task\n<TASK>Add an idempotency check</TASK>\n")
    assert parts.breakdown["task"] == Tokenizer().count("## Task\n<TASK>Add an idempotency check</TASK>\n")
    with pytest.raises(InvalidInputError, match="task_budget"):
        builder.build(now=T0, dimensions=dims)


def test_entries_check_their_fields():
    with pytest.raises(InvalidInputError):
        Entry("NOPE", "x")
    with pytest.raises(InvalidInputError):
        Entry("FILE", "x")  # no path
    with pytest.raises(InvalidInputError):
        Entry("MEM", "x", weight=-1)


def test_redistribution_gives_unused_shares_to_what_was_cut():
    tok = Tokenizer()
    dims = Dimensions()
    dims.add("short rule, must hold", "user")
    dims.add(prose(3000, 6), "file", label="big.py")
    dims.add("Fix it", "task")
    strict = dims.render(2000, tok)
    shared = dims.render(2000, tok, redistribute=True)
    assert strict.allocation == shared.allocation
    assert strict.used.context <= strict.allocation.context
    assert shared.used.context > shared.allocation.context  # it got what the others left
    assert shared.used.memory == strict.used.memory
    assert shared.used.prompt == strict.used.prompt
    assert strict.tokens < shared.tokens == tok.count(shared.text) <= 2000
    assert shared.tokens > 2000 - 20  # little is left unused
    (cut,) = shared.truncated
    assert cut.kept == shared.used.context
