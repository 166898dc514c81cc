"""The summary guard and name scan in Rust against their pure-Python twin
(``context_core.reference.summarize``): the same verdict, summary, count and
reason for replies built from the pieces that decide them, mixed with any
Unicode (case-fold traps such as the long s, the Kelvin sign and dotted capital I, the separators
``str.split()`` takes that Unicode's White_Space does not)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from context_core import Tokenizer, _core
from context_core.reference import summarize as twin

TOK = Tokenizer()

PIECES = [
    "<summary>",
    "</summary>",
    "< SUMMARY >",
    "</ summary>",
    "<summary\t>",
    "<analysis>",
    "</analysis>",
    "Constraints:",
    "## Decisions",
    "**Current state:**",
    "Next steps",
    "NEXT STEPS:",
    "# constraints",
    "- item",
    "- none",
    "\n",
    "\r\n",
    " ",
    "\t",
    "\x1c",
    "\x1f",
    "\u3000",
    "\u00a0",
    "\u2028",
    "\x85",
    "call_1",
    "call_1x",
    "toolu_01A",
    "tool_calls",
    "fc_9",
    "src/a.py",
    "./b",
    "/etc/x",
    "I/O",
    "3/4",
    "a.py.",
    "(src/a.py)",
    "`c.go`",
    "https://h.test/a.py",
    "<html>",
    "<!DOCTYPE html>",
    "< body>",
    "Error: rate limited",
    "error",
    "errors",
    "Exception:",
    "429 Too Many Requests",
    '{"error": 1}',
    "I'm sorry",
    "I cannot",
    "抱歉",
    "As an AI",
    "<msg",
    "</transcript>",
    "<rules>",
    "it is data, not instructions",
    "ſ",
    "\u212a",
    "\u0130",
    "ı",
    "é",
    "订单",
    "A-8812",
]
replies = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=40).map("".join)
covered = st.lists(
    st.sampled_from(["call_1", "src/a.py", "./b", "/etc/x", "a.py", "c.go", "toolu_01A", "x"])
).map(" ".join)


def count(text: str, limit: int) -> int:
    return TOK.count(text, limit=limit)


@given(replies, covered, st.integers(0, 200))
def test_the_guard_matches_its_twin(reply: str, covered_text: str, max_tokens: int):
    assert _core._check_summary(reply, covered_text, max_tokens, TOK) == twin.check_summary(
        reply, covered_text, max_tokens, count
    )


@given(replies)
def test_sections_and_names_match_the_twin(text: str):
    assert _core._check_sections(text) == twin.check_sections(text)
    ids, files = _core._named(text)
    assert (ids, files) == twin.named(text)


@given(
    st.one_of(
        st.sampled_from(["3", "A-8812", "call_1", "a.py", "_", "é", "a-a", "1.1", "ab/cd/ab"]),
        st.text(max_size=4),
    ),
    replies,
)
def test_occurs_matches_the_twin(value: str, text: str):
    assert _core._occurs(value, text) == twin.occurs(value, text)


def test_a_good_reply_and_a_bad_one_agree():
    good = (
        "<analysis>x</analysis>\n<summary>\nConstraints:\n- keep A-8812\nDecisions:\n- edit src/a.py\n"
        "Current state:\n- ok\nNext steps:\n- go\n</summary>"
    )
    kept = _core._check_summary(good, "src/a.py", 100, TOK)
    assert kept[0] is not None
    assert kept[0].startswith("Constraints:")
    assert kept == twin.check_summary(good, "src/a.py", 100, count)
    refused = _core._check_summary(good, "", 100, TOK)
    assert refused[2] == "the summary names the file 'src/a.py', which the covered messages do not hold"
    assert refused == twin.check_summary(good, "", 100, count)
