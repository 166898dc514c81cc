"""The fact line format, the model-reply parser and the deterministic
consolidator (context_core.memory.facts / .consolidate)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import InvalidInputError, InvalidTypeError, MemoryFormatError
from context_core.memory import (
    Fact,
    Pointer,
    RawLine,
    consolidate_facts,
    consolidate_items,
    normalize,
    parse_fact,
    parse_reply,
)
from context_core.memory.facts import parse_line
from strategies import texts

# -- the line format --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind", "key", "text"),
    [
        ("- [decision: database] Use Postgres 16.", "decision", "database", "Use Postgres 16."),
        (
            "- [fact] The API lives at https://x.example/v2",
            "fact",
            None,
            "The API lives at https://x.example/v2",
        ),
        ("- [constraint] Note: never push to main", "constraint", None, "Note: never push to main"),
        ("- [lesson: retries]   back off   ", "lesson", "retries", "back off"),
        ("- [preference: 语气] 简洁", "preference", "语气", "简洁"),
    ],
)
def test_stored_fact_lines(line, kind, key, text):
    fact = parse_line(line)
    assert fact == Fact(text, kind, key)
    assert parse_line(fact.line()) == fact


@pytest.mark.parametrize(
    "line",
    [
        "# Memory",
        "",
        "plain prose with a colon: not a key",
        "- [Fact] upper-case kind",
        "- [fact]no space",
        "- [fact] ",
        "- [fact: a]b] nested bracket",
        "- [more] ../../etc/passwd",
        "- [more] auto-2025-01-01-zz.md",
        "- [more: x] auto-2025-01-01-abcd.md",
        "* [fact] another bullet",
    ],
)
def test_other_lines_are_raw_text(line):
    assert parse_line(line) == RawLine(line)


@given(texts, st.sampled_from(["fact", "decision", "x_1-y"]), st.one_of(st.none(), texts))
def test_every_fact_round_trips_through_its_line(text, kind, key):
    try:
        fact = Fact(text, kind, key)
    except MemoryFormatError:
        return  # empty, a control character, a bracket or an over-long key
    assert parse_line(fact.line()) == fact
    assert parse_fact(fact.line()) == fact
    assert "\n" not in fact.line()


def test_pointer_lines():
    assert parse_line("- [more] auto-2025-01-31-4f2a.md") == Pointer("auto-2025-01-31-4f2a.md")
    assert Pointer("auto-2025-01-31-4f2a.md").line() == "- [more] auto-2025-01-31-4f2a.md"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("- [decision: db] Use Postgres", Fact("Use Postgres", "decision", "db")),
        ("[Decision: db] Use Postgres", Fact("Use Postgres", "decision", "db")),
        ("* [constraint] Never push", Fact("Never push", "constraint")),
        ("just a sentence: with a colon", Fact("just a sentence: with a colon")),
        ("- a bulleted sentence", Fact("a bulleted sentence")),
        ("  spaced  ", Fact("spaced")),
    ],
)
def test_parse_fact_is_lenient_about_what_callers_write(given, expected):
    assert parse_fact(given) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "[bad fact",
        "- [fact",
        "[more] auto-2025-01-01-abcd.md",
        "",
        "   ",
        "two\nlines",
        "tab\tin",
        "a\u2028b",
        "lone \ud800 surrogate",
        "- [fact: k\udc80] escaped byte in the key",
        "\udfff",
    ],
)
def test_parse_fact_refuses(bad):
    with pytest.raises(MemoryFormatError):
        parse_fact(bad)


def test_a_lone_surrogate_is_not_a_fact():
    with pytest.raises(MemoryFormatError, match="surrogate"):
        Fact("port \ud83d 5433")
    with pytest.raises(MemoryFormatError, match="surrogate"):
        Fact("x", "fact", "key \udcff")
    # A stored line holding bytes that are not UTF-8 (read with surrogateescape) is raw text.
    assert parse_line("- [fact] caf\udce9") == RawLine("- [fact] caf\udce9")
    with pytest.raises(MemoryFormatError):
        parse_reply("- [fact] ok\n- [fact] bad \ud800")


def test_fact_validation():
    with pytest.raises(MemoryFormatError, match="reserved"):
        Fact("x", "more")
    with pytest.raises(MemoryFormatError, match="key"):
        Fact("x", "fact", "k" * 81)
    with pytest.raises(MemoryFormatError):
        Fact("x", "fact", "a]b")
    with pytest.raises(MemoryFormatError):
        Fact("x", "two words")
    with pytest.raises(InvalidTypeError):
        Fact(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        parse_fact(None)  # type: ignore[arg-type]
    assert issubclass(MemoryFormatError, InvalidInputError)
    assert issubclass(MemoryFormatError, ValueError)


# -- near duplicates --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Use Postgres 16.", "use  postgres 16"),
        ("**Use** `Postgres` 16!", "Use Postgres 16"),
        ("ＵＳＥ Ｐｏｓｔｇｒｅｓ", "use postgres"),  # full-width
        ("“quoted”", '"quoted"'),
        ("数据库端口是5433。", "数据库端口是5433"),
    ],
)
def test_near_duplicates(a, b):
    assert normalize(a) == normalize(b)
    assert Fact(a, "fact").signature == Fact(b, "decision").signature  # the kind does not count


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("port 5433", "port 5434"),
        ("/etc/app", "etc/app"),
        ("~/x", "/x"),
        ("v1.2.3", "v1.2.4"),
        ("use_snake", "use snake"),
        ("#42", "42"),
        (".env", "env"),
        (".5", "5"),
        ("::1", "1"),
        (":8080", "8080"),
        ("edit .env now", "edit env now"),
        ("listen on ::1.", "listen on 1."),
    ],
)
def test_exact_values_are_never_blurred(a, b):
    assert normalize(a) != normalize(b)


# A value with a leading character that is part of it; the bare word must stay distinct.
_value_prefixes = st.sampled_from([".", "..", ":", "::", "/", "~/", "#", "@", "-", "$", "_"])
_values = st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True)


@given(_value_prefixes, _values, st.sampled_from(["", ".", "!", ",", "?", ";"]))
def test_a_values_leading_characters_are_never_stripped(prefix, value, end):
    assert normalize(prefix + value + end) != normalize(value + end)
    assert normalize(prefix + value + end) == normalize(prefix + value)  # trailing punctuation goes


@pytest.mark.parametrize("wrapped", ["`.env`", "**.env**", "(.env)", '".env".', "“.env”", "'.env',"])
def test_quotes_brackets_and_emphasis_go_at_both_ends(wrapped):
    assert normalize(wrapped) == ".env"


def test_the_key_is_part_of_the_signature():
    assert Fact("5433", "fact", "port").signature != Fact("5433", "fact", "db port").signature
    assert Fact("5433", "fact", "Port").signature == Fact("5433.", "fact", "port").signature
    assert Fact("x", "fact", "Port").identity == "port"
    assert Fact("x", "decision", "port.").identity == "port"
    assert Fact("x").identity is None


# -- model replies ----------------------------------------------------------------------


def test_parse_reply():
    reply = "- [decision: db] Use Postgres 16\n\n- [constraint] Never push to main\n"
    assert parse_reply(reply) == [
        Fact("Use Postgres 16", "decision", "db"),
        Fact("Never push to main", "constraint"),
    ]
    assert parse_reply("```\n- [fact] x\n```") == [Fact("x")]
    assert parse_reply("```markdown\n- [fact] x\n```") == [Fact("x")]
    assert parse_reply("NONE") == []
    assert parse_reply("  none. ") == []


@pytest.mark.parametrize(
    ("reply", "line"),
    [
        ("Here are the facts:\n- [fact] x", 1),
        ("- [fact] x\n2. [fact] y", 2),
        ("- [fact] x\n- fact y", 2),
        ("- [more] auto-2025-01-01-abcd.md", 1),
        ("- [fact] x\nNONE", 2),
        ("", 0),
        ("   \n  ", 0),
        ('{"facts": ["x"]}', 1),
    ],
)
def test_malformed_replies_are_refused_with_the_line(reply, line):
    with pytest.raises(MemoryFormatError) as caught:
        parse_reply(reply)
    assert caught.value.line == line
    assert caught.value.text == reply


# -- the deterministic consolidator ------------------------------------------------------


def test_duplicates_removed_newest_form_kept_in_the_oldest_place():
    facts = [
        Fact("Use Postgres 16", "decision"),
        Fact("Never push to main", "constraint"),
        Fact("use postgres 16.", "fact"),
    ]
    assert consolidate_facts(facts) == [
        Fact("use postgres 16.", "fact"),
        Fact("Never push to main", "constraint"),
    ]


def test_newest_value_wins_for_a_key():
    facts = [
        Fact("Use Postgres 16", "decision", "database"),
        Fact("The port is 5433", "fact", "db port"),
        Fact("Switch to MySQL 8", "decision", "Database"),
        Fact("Another decision without a key", "decision"),
        Fact("The port is 5434", "fact", "db port"),
    ]
    assert consolidate_facts(facts) == [
        Fact("Switch to MySQL 8", "decision", "Database"),
        Fact("The port is 5434", "fact", "db port"),
        Fact("Another decision without a key", "decision"),
    ]


def test_keys_ignore_kinds_and_keyless_facts_are_never_retired():
    facts = [
        Fact("tabs", "preference", "indent"),
        Fact("We use Postgres"),
        Fact("4 spaces", "decision", "Indent"),
        Fact("We use MySQL now"),
    ]
    assert consolidate_facts(facts) == [facts[2], facts[1], facts[3]]  # the newest, at the oldest's place


def test_keyed_and_keyless_facts_with_the_same_text_are_distinct():
    facts = [Fact("old value", "fact", "k"), Fact("same text"), Fact("same text", "fact", "k")]
    assert consolidate_facts(facts) == [Fact("same text", "fact", "k"), Fact("same text")]
    facts = [
        Fact("a", "fact", "k"),
        Fact("b", "fact", "j"),
        Fact("b", "decision", "j"),
        Fact("c", "fact", "k"),
    ]
    assert consolidate_facts(facts) == [Fact("c", "fact", "k"), Fact("b", "decision", "j")]


def test_other_lines_stay_in_place_pointers_and_extra_blank_lines_go():
    items = [
        RawLine(""),
        RawLine("# Project"),
        Fact("Use Postgres", "decision", "db"),
        RawLine(""),
        RawLine(""),
        RawLine("# User"),
        Fact("short answers", "preference"),
        Pointer("auto-2025-01-01-abcd.md"),
        Fact("Use MySQL", "decision", "db"),
        RawLine(""),
    ]
    assert consolidate_items(items) == [
        RawLine("# Project"),
        Fact("Use MySQL", "decision", "db"),
        RawLine(""),
        RawLine("# User"),
        Fact("short answers", "preference"),
    ]


# Facts from a small vocabulary, so duplicates and shared keys are common.
fact_strategy = st.builds(
    Fact,
    st.sampled_from(["use Postgres", "Use postgres.", "port 5433", "port 5434", "/etc/app", "简洁", "x y"]),
    st.sampled_from(["fact", "decision", "preference"]),
    st.one_of(st.none(), st.sampled_from(["db", "DB", "port", "style"])),
)
item_strategy = st.one_of(
    fact_strategy,
    fact_strategy,
    st.sampled_from([RawLine(""), RawLine("# heading"), Pointer("auto-2025-01-01-abcd.md")]),
)


@given(st.lists(item_strategy, max_size=30))
def test_consolidation_is_idempotent_and_never_grows(items):
    once = consolidate_items(items)
    assert consolidate_items(once) == once
    assert len(once) <= len(items)
    assert sum(isinstance(i, Fact) for i in once) <= sum(isinstance(i, Fact) for i in items)


@given(st.lists(fact_strategy, max_size=30))
def test_consolidation_keeps_each_keys_newest_value_and_every_distinct_fact(facts):
    out = consolidate_facts(facts)
    signatures = {f.signature for f in out}
    # Each key's newest value is there (under its own or a near-duplicate's words).
    newest = {}
    for fact in facts:
        if fact.identity is not None:
            newest[fact.identity] = fact
    for fact in newest.values():
        assert fact.signature in signatures
    # No two survivors are near duplicates or values of one key.
    assert len(signatures) == len(out)
    identities = [f.identity for f in out if f.identity is not None]
    assert len(identities) == len(set(identities))
    # A fact is gone only as a duplicate or as an older value of a key.
    for index, fact in enumerate(facts):
        if fact.signature in signatures:
            continue
        later = facts[index + 1 :]
        assert any(f.signature == fact.signature for f in later) or (
            fact.identity is not None and any(f.identity == fact.identity for f in later)
        )
