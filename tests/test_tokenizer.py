"""The Tokenizer API (mirrors rust/core/src/tokenizer.rs): counting with a
limit, truncation, decoding, construction, errors."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import context_core
from context_core import (
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    Tokenizer,
    UnknownEncodingError,
    UnknownModelError,
    reference,
)
from context_core.tokens import TOKENS_PER_TOOL_CALL
from strategies import ENCODINGS, texts

O200K = Tokenizer("o200k_base")
REF_O200K = reference.Tokenizer("o200k_base")


def test_default_encoding_is_o200k():
    assert Tokenizer().name == "o200k_base"
    assert Tokenizer("gpt2").name == "r50k_base"


@given(text=texts)
def test_round_trip(text):
    assert O200K.decode(O200K.encode(text)) == text
    assert O200K.decode_bytes(O200K.encode(text)) == text.encode()


def test_special_token_text_is_ordinary_text(encoding):
    tok, ref = Tokenizer(encoding), reference.Tokenizer(encoding)
    text = "before <|endoftext|> after <|endofprompt|>"
    assert tok.encode(text) == ref.encode(text)
    assert tok.count("<|endoftext|>") > 1  # several ordinary tokens, not the special id


def test_decode_takes_numpy_integers():
    ids = O200K.encode("numpy ids")
    assert O200K.decode(np.array(ids, dtype=np.int64)) == "numpy ids"
    assert O200K.decode(tuple(np.uint32(i) for i in ids)) == "numpy ids"


def test_special_ids_decode_to_their_text():
    assert Tokenizer("cl100k_base").decode([100257]) == "<|endoftext|>"
    assert O200K.decode([199999]) == "<|endoftext|>"


# -- count with a limit ------------------------------------------------------------


@given(text=texts, limit=st.integers(0, 80))
def test_count_with_limit_is_exact_below_the_limit(text, limit):
    full = O200K.count(text)
    assert O200K.count(text, limit=limit) == min(full, limit + 1)
    assert O200K.count(text, limit) == REF_O200K.count(text, limit)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_count_with_limit_on_a_huge_single_piece(encoding):
    tok = Tokenizer(encoding)
    text = "a" * 200_000
    assert tok.count(text, limit=10) == 11
    assert tok.count(text, limit=None) == tok.count(text)
    full = tok.count(text)
    for limit in (full - 1, full, 2**70):  # a huge limit saturates: no limit
        assert tok.count(text, limit=limit) == min(full, limit + 1)


@pytest.mark.parametrize("tok", [O200K, REF_O200K], ids=["rust", "reference"])
def test_limits_and_caps_take_any_integer_type_but_bool_or_float(tok):
    text = "one two three four five six seven"
    for limit in (np.int64(3), np.uint8(3), np.int32(3)):
        assert tok.count(text, limit=limit) == 4
        assert tok.truncate(text, limit) == tok.truncate(text, 3)
    for bad in (True, 3.0, np.float64(3), "3"):
        with pytest.raises(InvalidTypeError):
            tok.count(text, limit=bad)
    with pytest.raises(InvalidInputError):
        tok.count(text, limit=np.int64(-1))


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(pieces=st.lists(st.sampled_from(["-" * 130, "a" * 77, "日本" * 30, " " * 40, "x"]), max_size=8))
def test_count_with_limit_is_exact_on_long_pieces(encoding, pieces):
    tok, ref = Tokenizer(encoding), reference.Tokenizer(encoding)
    text = "".join(pieces)
    full = ref.count(text)
    for limit in {0, full // 2, max(full - 1, 0), full}:
        assert tok.count(text, limit) == min(full, limit + 1)


# -- truncate ------------------------------------------------------------------------


@given(text=texts, max_tokens=st.integers(0, 40))
def test_truncate_fits_on_token_and_char_boundaries(text, max_tokens):
    cut = O200K.truncate(text, max_tokens)
    assert O200K.count(cut) <= max_tokens
    assert text.startswith(cut)
    assert cut == REF_O200K.truncate(text, max_tokens)


MARKER = "…[truncated {dropped} tokens]"


@given(text=texts, max_tokens=st.integers(12, 60))
def test_truncate_with_marker_fits_inside_the_cap(text, max_tokens):
    cut = O200K.truncate(text, max_tokens, MARKER)
    assert O200K.count(cut) <= max_tokens
    assert cut == REF_O200K.truncate(text, max_tokens, MARKER)
    if cut != text:
        assert "…[truncated " in cut
        dropped = int(cut.rsplit("[truncated ", 1)[1].split(" ")[0])
        assert 0 < dropped <= O200K.count(text)


# Texts built to put a cut next to every kind of character a pre-token run
# could continue with: letters, digits, marks, contractions, CJK, spaces.
CUT_ALPHABET = [*"ab Z9 0'’sS\n\t.,…-_/", "\u0301", "日本", "語", "🎉", "'s", "'T", "  ", "\r\n"]
cut_texts = st.lists(st.sampled_from(CUT_ALPHABET), min_size=1, max_size=200).map("".join)
MARKERS = [
    None,
    MARKER,
    "[cut {dropped}]",
    "abc{dropped}",
    "7{dropped}",
    "'s {dropped}",
    " {dropped}",
    "\u0301x",
]


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(text=cut_texts, max_tokens=st.integers(0, 80), marker=st.sampled_from(MARKERS))
def test_truncate_reusing_the_prefix_tokens_matches_the_reference(encoding, text, max_tokens, marker):
    """``truncate`` counts the cut from the tokens of the pieces before a
    stable point plus BPE on the rest; the answer must be the one counting
    the cut whole gives, for every marker's first character."""
    ours, theirs = Tokenizer(encoding), reference.Tokenizer(encoding)
    try:
        expected = theirs.truncate(text, max_tokens, marker)
    except InvalidInputError:
        with pytest.raises(InvalidInputError):
            ours.truncate(text, max_tokens, marker)
        return
    assert ours.truncate(text, max_tokens, marker) == expected


def test_truncate_of_a_long_text_keeps_the_contract():
    """A 50 KB text cut to 2,000 tokens: only the cut's pieces are encoded,
    the dropped count is the whole text's."""
    text = ("The refund worker retried order_id=ord_42 after 30s; 重试第3次。\n" * 900)[:50_000]
    cut = O200K.truncate(text, 2000, MARKER)
    assert cut == REF_O200K.truncate(text, 2000, MARKER)
    assert O200K.count(cut) <= 2000
    dropped = int(cut.rsplit("[truncated ", 1)[1].split(" ")[0])
    assert O200K.count(cut[: cut.index("…[truncated")]) + dropped == O200K.count(text)


def test_truncate_reports_the_dropped_count():
    text = "word " * 1000
    cut = O200K.truncate(text, 50, MARKER)
    kept = O200K.count(cut[: cut.index("…")])
    dropped = int(cut.rsplit("[truncated ", 1)[1].split(" ")[0])
    assert kept + dropped == O200K.count(text)


def test_truncate_never_splits_a_character():
    text = "🧑🏿‍🚀" * 100 + "日本語" * 100
    for max_tokens in range(0, 30):
        cut = O200K.truncate(text, max_tokens)
        assert text.startswith(cut)
        cut.encode("utf-8")  # a half character would be a lone surrogate or raise


def test_truncate_returns_the_same_object_when_it_fits():
    text = "short enough"
    assert O200K.truncate(text, 100, MARKER) is text


@given(text=st.text(max_size=40), max_tokens=st.integers(0, 12))
def test_truncate_with_lone_surrogates_matches_the_reference(text, max_tokens):
    text = text + "\ud800" + text
    cut = O200K.truncate(text, max_tokens, MARKER if max_tokens > 10 else None)
    assert cut == REF_O200K.truncate(text, max_tokens, MARKER if max_tokens > 10 else None)
    if O200K.count(text) <= max_tokens:
        assert cut is text


def test_truncate_refuses_a_marker_longer_than_the_cap():
    with pytest.raises(InvalidInputError, match="marker"):
        O200K.truncate("x " * 100, 3, "[this marker alone is much longer than three tokens]")


# -- construction and identity -----------------------------------------------------


def test_for_model_and_fallback():
    assert Tokenizer.for_model("gpt-4o-2024-08-06").name == "o200k_base"
    assert Tokenizer.for_model("gpt-3.5-turbo").name == "cl100k_base"
    assert Tokenizer.for_model("claude-sonnet-4", fallback="cl100k_base").name == "cl100k_base"
    with pytest.raises(UnknownModelError) as info:
        Tokenizer.for_model("claude-sonnet-4")
    message = str(info.value)
    for part in ("claude-sonnet-4", "gpt-4o-*", "fallback"):
        assert part in message
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, ValueError)


def test_unknown_encoding():
    with pytest.raises(UnknownEncodingError, match="o200k_base, cl100k_base"):
        Tokenizer("o100k")
    with pytest.raises(UnknownEncodingError):
        Tokenizer.for_model("mystery", fallback="nope")


def test_equality_hash_pickle_repr():
    assert Tokenizer("cl100k_base") == Tokenizer.for_model("gpt-4")
    assert Tokenizer("cl100k_base") != O200K
    assert len({Tokenizer(), Tokenizer("o200k_base")}) == 1
    assert pickle.loads(pickle.dumps(O200K)) == O200K
    assert repr(O200K) == 'Tokenizer("o200k_base")'


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.count(b"bytes"),
        lambda t: t.count(None),
        lambda t: t.encode(42),
        lambda t: t.count("x", limit="3"),
        lambda t: t.count("x", limit=True),
        lambda t: t.truncate("x", 2.5),
        lambda t: t.truncate("x", 2, marker=7),
        lambda t: t.decode(["a"]),
        lambda t: t.decode([1.0]),
        lambda t: t.decode([True]),
        lambda t: t.decode("abc"),
        lambda t: t.count_many("not a list"),
        lambda t: t.count_many(["ok", 3]),
        lambda t: Tokenizer(encoding=5),
        lambda t: Tokenizer.for_model(None),
    ],
)
def test_wrong_types_raise_our_type_error(call):
    with pytest.raises(InvalidTypeError) as info:
        call(O200K)
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, ContextCoreError)


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.count("x", limit=-1),
        lambda t: t.truncate("x", -5),
        lambda t: t.decode([-1]),
        lambda t: t.decode([2**40]),
        lambda t: t.decode([199_998]),  # a hole between the ordinary and special ids
    ],
)
def test_bad_values_raise_our_value_error(call):
    with pytest.raises(InvalidInputError) as info:
        call(O200K)
    assert isinstance(info.value, ValueError)


def test_the_reference_refuses_what_the_extension_refuses():
    with pytest.raises(InvalidInputError):
        REF_O200K.count("x", limit=-1)
    with pytest.raises(InvalidInputError):
        REF_O200K.decode([199_998])
    with pytest.raises(InvalidTypeError):
        REF_O200K.count_messages(None)
    with pytest.raises(InvalidTypeError):
        REF_O200K.decode([1.0])


def test_count_many_names_the_bad_item():
    with pytest.raises(InvalidTypeError, match=r"texts\[1\] must be str, not int"):
        O200K.count_many(["ok", 3])


def test_errors_are_importable_from_the_top_level():
    assert context_core.ContextCoreError is ContextCoreError
    assert issubclass(UnknownEncodingError, ValueError)


def test_encodings_load_lazily_one_at_a_time():
    """A process that counts with one encoding holds only that one: loading a
    second one later still costs its full vocabulary."""
    script = (
        "import context_core\n"
        "rss = lambda: int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
        "context_core.Tokenizer('cl100k_base').count('x')\n"
        "before = rss()\n"
        "context_core.Tokenizer('o200k_base').count('x')\n"
        "print(rss() - before)\n"
    )
    grown_kb = int(
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    )
    assert grown_kb > 20_000  # o200k_base was not resident until it was used


def test_threads_share_a_tokenizer_safely():
    """Large texts release the GIL, so these threads really count at once."""
    texts = [f"thread {i} " * 5000 for i in range(8)]
    expected = [REF_O200K.count(t) for t in texts]
    results: list[int | None] = [None] * len(texts)

    def work(i: int) -> None:
        for _ in range(5):
            results[i] = O200K.count(texts[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == expected


def test_a_server_tool_result_holding_one_object_is_counted_as_its_json():
    """A web search's error and a code run's output are one object, not a
    list of blocks: counted as its JSON text (it raised), by both; a client
    tool's tool_result holding an object is still refused."""
    error = {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}
    reply = {
        "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": error},
        ],
    }
    ours, theirs = O200K.count_messages([reply]), REF_O200K.count_messages([reply])
    assert ours == theirs
    plain = {**reply, "content": reply["content"][:1]}
    assert ours - O200K.count_messages([plain]) == TOKENS_PER_TOOL_CALL + O200K.count(
        json.dumps(error, separators=(",", ":"), ensure_ascii=False)
    )
    client = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": error}]}
    for tok in (O200K, REF_O200K):
        with pytest.raises(InvalidTypeError, match="content"):
            tok.count_messages([client])
